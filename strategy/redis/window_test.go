package redis_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesync/ratesync/internal/testenv"
	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/redis"
)

// pttlAbout fails t unless key's TTL is want, give or take the time the
// test took since it computed want (up to 3 s) and a few ms of rounding
// (TTLs are counted from clocks read in whole ms).
func pttlAbout(t *testing.T, c *goredis.Client, key string, want time.Duration) {
	t.Helper()
	got, err := c.PTTL(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if got > want+5*time.Millisecond || got < want-3*time.Second {
		t.Errorf("%s: TTL %v, want about %v", key, got, want)
	}
}

// A diff with a Span keeps its window until the span slides past it:
// start + size + Span + TTLMargin. Keys of one shard share the window's
// hash, so the hash keeps the longest TTL any of its keys needs: a later
// plain diff, or a plain check, does not cut it short.
func TestSpanKeepsTheWindowHash(t *testing.T) {
	r := testenv.NewRedis(t)
	c := r.Client(t)
	s := storeOn(t, c, r.Prefix, redis.Config{Shards: 1, TTLMargin: 7 * time.Second})
	ctx := context.Background()
	size, span := time.Second, time.Minute
	now := time.Now()
	start := strategy.WindowStart(now, size)
	hash := fmt.Sprintf("{%s:ns:0}:%d:%d", r.Prefix, size.Milliseconds(), start.UnixMilli())
	until := func(end time.Time) time.Duration { return time.Until(end) }

	mustPush(t, s, strategy.Batch{Node: "n", Seq: 1, Diffs: []strategy.Diff{diff("ns", "plain", start, size, 1)}})
	pttlAbout(t, c, hash, until(start.Add(2*size+7*time.Second)))

	spanned := diff("ns", "spanned", start, size, 1)
	spanned.Span = span
	mustPush(t, s, strategy.Batch{Node: "n", Seq: 2, Diffs: []strategy.Diff{spanned}})
	long := start.Add(size + span + 7*time.Second)
	pttlAbout(t, c, hash, until(long))

	mustPush(t, s, strategy.Batch{Node: "n", Seq: 3, Diffs: []strategy.Diff{diff("ns", "plain", start, size, 1)}})
	pttlAbout(t, c, hash, until(long))
	if _, err := s.PushAndCount(ctx, strategy.Batch{Node: "n", Seq: 4, Diffs: []strategy.Diff{diff("ns", "plain", start, size, 1)}}); err != nil {
		t.Fatal(err)
	}
	pttlAbout(t, c, hash, until(long))
	res, err := s.CheckAndCount(ctx, "n", 5, []strategy.Check{{Namespace: "ns", Key: "plain", Cost: 1, Now: now,
		Limits: []strategy.CheckLimit{{WindowSize: size, Limit: 100}}}})
	if err != nil || !res[0].Allowed || res[0].Totals[0].Current != 4 {
		t.Fatalf("check = %+v, %v; want allowed, current 4", res, err)
	}
	pttlAbout(t, c, hash, until(long))

	// The longest span of one batch wins, whatever the order of its diffs.
	next := start.Add(size)
	nextHash := fmt.Sprintf("{%s:ns:0}:%d:%d", r.Prefix, size.Milliseconds(), next.UnixMilli())
	short, longer := diff("ns", "a", next, size, 1), diff("ns", "b", next, size, 1)
	short.Span, longer.Span = 10*time.Second, 2*time.Minute
	mustPush(t, s, strategy.Batch{Node: "n", Seq: 6, Diffs: []strategy.Diff{short, longer, diff("ns", "c", next, size, 1)}})
	pttlAbout(t, c, nextHash, until(next.Add(size+2*time.Minute+7*time.Second)))
}

// GetCounters reads Query.Depth windows of each size, newest first, with
// Keys and for the whole namespace; a size listed twice is read as deep as
// its deepest entry asks.
func TestGetCountersReadsTheDepthOfEachSize(t *testing.T) {
	s, _ := newStore(t, redis.Config{ScanThreshold: 2, FieldsPerCommand: 1})
	ctx := context.Background()
	p := time.Second
	start := strategy.WindowStart(base, p)
	var diffs []strategy.Diff
	for back := range 6 {
		for _, k := range []string{"a", "b", "c"} {
			diffs = append(diffs, diff("ns", k, start.Add(-time.Duration(back)*p), p, float64(back+1)))
		}
	}
	diffs = append(diffs, diff("ns", "a", strategy.WindowStart(base, time.Minute), time.Minute, 9))
	mustPush(t, s, strategy.Batch{Node: "n", Seq: 1, Diffs: diffs})
	for _, tc := range []struct {
		name  string
		sizes []time.Duration
		depth []int
		keys  []string
		want  int // counters
	}{
		{"keys, 4 deep", []time.Duration{p}, []int{4}, []string{"a", "b", "c"}, 12},
		{"whole namespace, 4 deep", []time.Duration{p}, []int{4}, nil, 12},
		{"below 2 is 2", []time.Duration{p}, []int{1}, nil, 6},
		{"no depth is 2", []time.Duration{p, time.Minute}, nil, []string{"a"}, 3},
		{"a size twice: the deepest", []time.Duration{p, time.Minute, p}, []int{3, 2, 5}, []string{"a", "c"}, 11},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := map[string]float64{}
			for c, err := range s.GetCounters(ctx, strategy.Query{Namespace: "ns", WindowSizes: tc.sizes, Now: base.Add(300 * time.Millisecond), Keys: tc.keys, Windows: tc.depth}) {
				if err != nil {
					t.Fatal(err)
				}
				id := fmt.Sprintf("%s@%d/%v", c.Key, c.WindowStart.UnixMilli(), c.WindowSize)
				if _, dup := got[id]; dup {
					t.Fatalf("counter %s yielded twice", id)
				}
				got[id] = c.Count
				if c.WindowSize == p {
					back := int(start.Sub(c.WindowStart) / p)
					if c.Count != float64(back+1) {
						t.Errorf("counter %s = %v, want %d", id, c.Count, back+1)
					}
				}
			}
			if len(got) != tc.want {
				t.Fatalf("%d counters %v, want %d", len(got), got, tc.want)
			}
		})
	}
}
