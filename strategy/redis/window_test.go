package redis_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/arith"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesync/ratesync/internal/testenv"
	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/redis"
)

// pttlAbout fails t unless key's TTL is want, as set by an operation that
// started at since (wall clock), less the time gone since then, with 2 ms
// of rounding either way (TTLs count from clocks read in whole ms).
func pttlAbout(t *testing.T, c *goredis.Client, key string, want time.Duration, since time.Time) {
	t.Helper()
	got, err := c.PTTL(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if got > want+2*time.Millisecond || got < want-time.Since(since)-2*time.Millisecond {
		t.Errorf("%s: TTL %v, want %v less the %v since it was set", key, got, want, time.Since(since))
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
	start := arith.WindowStart(now, size)
	hash := fmt.Sprintf("{%s:ns:0}:%d:%d", r.Prefix, size.Milliseconds(), start.UnixMilli())
	until := func(end time.Time) time.Duration { return end.Sub(now) }

	mustPush(t, s, strategy.Batch{Node: "n", Seq: 1, Diffs: []strategy.Diff{diff("ns", "plain", start, size, 1)}})
	pttlAbout(t, c, hash, until(start.Add(2*size+7*time.Second)), now)

	spanned := diff("ns", "spanned", start, size, 1)
	spanned.Span = span
	mustPush(t, s, strategy.Batch{Node: "n", Seq: 2, Diffs: []strategy.Diff{spanned}})
	long := start.Add(size + span + 7*time.Second)
	pttlAbout(t, c, hash, until(long), now)

	mustPush(t, s, strategy.Batch{Node: "n", Seq: 3, Diffs: []strategy.Diff{diff("ns", "plain", start, size, 1)}})
	pttlAbout(t, c, hash, until(long), now)
	if _, err := s.PushAndCount(ctx, strategy.Batch{Node: "n", Seq: 4, Diffs: []strategy.Diff{diff("ns", "plain", start, size, 1)}}); err != nil {
		t.Fatal(err)
	}
	pttlAbout(t, c, hash, until(long), now)
	res, err := s.CheckAndCount(ctx, "n", 5, []strategy.Check{{Namespace: "ns", Key: "plain", Cost: 1, Now: now,
		Limits: []strategy.CheckLimit{{WindowSize: size, Limit: 100}}}})
	if err != nil || !res[0].Allowed || res[0].Totals[0].Current != 4 {
		t.Fatalf("check = %+v, %v; want allowed, current 4", res, err)
	}
	pttlAbout(t, c, hash, until(long), now)

	// The longest span of one batch wins, whatever the order of its diffs.
	next := start.Add(size)
	nextHash := fmt.Sprintf("{%s:ns:0}:%d:%d", r.Prefix, size.Milliseconds(), next.UnixMilli())
	short, longer := diff("ns", "a", next, size, 1), diff("ns", "b", next, size, 1)
	short.Span, longer.Span = 10*time.Second, 2*time.Minute
	mustPush(t, s, strategy.Batch{Node: "n", Seq: 6, Diffs: []strategy.Diff{short, longer, diff("ns", "c", next, size, 1)}})
	pttlAbout(t, c, nextHash, until(next.Add(size+2*time.Minute+7*time.Second)), now)
}

// GetCounters reads Query.Depth windows of each size, newest first, with
// Keys and for the whole namespace; a size listed twice is read as deep as
// its deepest entry asks.
func TestGetCountersReadsTheDepthOfEachSize(t *testing.T) {
	s, _ := newStore(t, redis.Config{ScanThreshold: 2, FieldsPerCommand: 1})
	ctx := context.Background()
	p := time.Second
	start := arith.WindowStart(base, p)
	var diffs []strategy.Diff
	for back := range 6 {
		for _, k := range []string{"a", "b", "c"} {
			diffs = append(diffs, diff("ns", k, start.Add(-time.Duration(back)*p), p, float64(back+1)))
		}
	}
	diffs = append(diffs, diff("ns", "a", arith.WindowStart(base, time.Minute), time.Minute, 9))
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

// A precision limit counts in its current sub-window, whose hash lasts
// until the limit's span slides past it (start + p + WindowSize +
// TTLMargin), shared with a plain limit of the same size: one count, the
// longer TTL. The sub-windows it only reads keep theirs.
func TestPrecisionWindowTTL(t *testing.T) {
	r := testenv.NewRedis(t)
	c := r.Client(t)
	s := storeOn(t, c, r.Prefix, redis.Config{Shards: 1, TTLMargin: 7 * time.Second})
	ctx := context.Background()
	p, w := time.Second, time.Minute
	now := time.Now()
	start := arith.WindowStart(now, p)
	hash := func(start time.Time) string {
		return fmt.Sprintf("{%s:ns:0}:%d:%d", r.Prefix, p.Milliseconds(), start.UnixMilli())
	}
	mustPush(t, s, strategy.Batch{Node: "n", Seq: 1, Diffs: []strategy.Diff{diff("ns", "k", start.Add(-3*p), p, 2)}})
	res, err := s.CheckAndCount(ctx, "n", 2, []strategy.Check{{Namespace: "ns", Key: "k", Cost: 1, Now: now, Limits: []strategy.CheckLimit{
		{WindowSize: p, Limit: 100}, {WindowSize: w, Limit: 100, Precision: p},
	}}})
	if err != nil || !res[0].Allowed {
		t.Fatalf("check = %+v, %v; want allowed", res, err)
	}
	if got := res[0].Windows[1]; len(got) != 61 || got[0] != 1 || got[3] != 2 {
		t.Fatalf("windows %v: want 61, the current holding 1 (counted once), the 4th 2", got)
	}
	pttlAbout(t, c, hash(start), start.Add(p+w+7*time.Second).Sub(now), now)
	pttlAbout(t, c, hash(start.Add(-3*p)), 7*time.Second, now) // past its life as a previous window: the margin
	for back := 1; back <= 60; back++ {
		if back != 3 && c.Exists(ctx, hash(start.Add(-time.Duration(back)*p))).Val() != 0 {
			t.Fatalf("sub-window %d back exists: a read made it", back)
		}
	}
}

// Redis decides every precision limit as the node does (arith.SpanFits
// over the counts Redis holds), bit for bit, at the boundary of its
// decision or one ulp either side; a plain limit of the sub-window size in
// the same check shares its count.
func TestPrecisionDecisionsAreTheNodes(t *testing.T) {
	s, _ := newStore(t, redis.Config{})
	ctx := context.Background()
	b := boundaries{rand.New(rand.NewPCG(5, 6))}
	subs := []int64{7, 1000, 60000}
	depths := []int{3, 4, 6, 11}
	type counter struct {
		key   string
		start int64
	}
	var diffs []strategy.Diff
	checks := make([]strategy.Check, decisions)
	for i := range checks {
		p := time.Duration(subs[b.rnd.IntN(len(subs))]) * time.Millisecond
		d := depths[b.rnd.IntN(len(depths))]
		start := arith.WindowStart(far, p)
		key := fmt.Sprintf("p%d", i)
		for back := range d + 1 { // one more, out of the span
			diffs = append(diffs, diff("ns", key, start.Add(-time.Duration(back)*p), p, b.value(true)))
		}
		now := start.Add(time.Duration(b.rnd.Int64N(p.Milliseconds())) * time.Millisecond)
		checks[i] = strategy.Check{Namespace: "ns", Key: key, Cost: b.value(true), Now: now,
			Limits: []strategy.CheckLimit{{WindowSize: time.Duration(d-1) * p, Precision: p}}}
	}
	mustPush(t, s, strategy.Batch{Node: "seed", Seq: 1, Diffs: diffs})
	held := map[counter]float64{} // as Redis holds them
	var sizes []time.Duration
	for _, p := range subs {
		sizes = append(sizes, time.Duration(p)*time.Millisecond)
	}
	for c, err := range s.GetCounters(ctx, strategy.Query{Namespace: "ns", WindowSizes: sizes, Now: far, Windows: []int{12, 12, 12}}) {
		if err != nil {
			t.Fatal(err)
		}
		held[counter{c.Key, c.WindowStart.UnixMilli()}] = c.Count
	}
	counts := func(c strategy.Check) []float64 {
		l := c.Limits[0]
		start := arith.WindowStart(c.Now, l.Precision)
		out := make([]float64, l.Depth())
		for back := range out {
			out[back] = held[counter{c.Key, start.Add(-time.Duration(back) * l.Precision).UnixMilli()}]
		}
		return out
	}
	elapsed := func(c strategy.Check) int64 {
		return c.Now.UnixMilli() - arith.WindowStart(c.Now, c.Limits[0].Precision).UnixMilli()
	}
	for i := range checks {
		c, l := checks[i], &checks[i].Limits[0]
		cur, oldest := arith.SpanParts(counts(c))
		size := float64(l.Precision.Milliseconds())
		l.Limit = b.near(((cur+c.Cost)*size + oldest*(size-float64(elapsed(c)))) / size)
		if i >= decisions/2 {
			checks[i].Limits = append(checks[i].Limits, strategy.CheckLimit{WindowSize: l.Precision, Limit: 1e300})
		}
	}
	decide(t, s, checks, func(i int, r strategy.CheckResult) {
		c, l := checks[i], checks[i].Limits[0]
		n := counts(c)
		want := arith.SpanFits(n, c.Cost, l.Limit, l.Precision.Milliseconds(), elapsed(c))
		if r.Allowed != want {
			t.Errorf("check %d (%+v; counts %v): allowed %v, the node decides %v", i, c, n, r.Allowed, want)
		}
		if len(r.Windows) != len(c.Limits) || len(r.Windows[0]) != len(n) || !slices.Equal(r.Windows[0][1:], n[1:]) {
			t.Fatalf("check %d: windows %v, want %d counts ending %v", i, r.Windows, len(n), n[1:])
		}
		if r.Totals[0].Current != r.Windows[0][0] || r.Totals[0].Previous != n[1] {
			t.Errorf("check %d: totals %+v, want the newest two of %v", i, r.Totals[0], r.Windows[0])
		}
		if len(c.Limits) == 2 && (r.Windows[1] != nil || r.Totals[1] != r.Totals[0]) {
			t.Errorf("check %d: the plain limit: totals %+v, windows %v; want the precision limit's two newest, no windows", i, r.Totals[1], r.Windows[1])
		}
	})
}

// Precision is refused, naming the field, when it does not divide the
// window, is not whole milliseconds, or is set on a fixed window or
// another kind of limit; nothing is sent.
func TestInvalidPrecisionIsRejected(t *testing.T) {
	s, c := newStore(t, redis.Config{})
	ops := countOps(t, c)
	for _, tc := range []struct {
		name string
		l    strategy.CheckLimit
	}{
		{"not dividing", strategy.CheckLimit{WindowSize: time.Minute, Limit: 1, Precision: 7 * time.Second}},
		{"above the window", strategy.CheckLimit{WindowSize: time.Second, Limit: 1, Precision: 2 * time.Second}},
		{"negative", strategy.CheckLimit{WindowSize: time.Second, Limit: 1, Precision: -time.Millisecond}},
		{"sub-millisecond", strategy.CheckLimit{WindowSize: time.Second, Limit: 1, Precision: 500 * time.Microsecond}},
		{"fixed", strategy.CheckLimit{WindowSize: time.Minute, Limit: 1, Precision: time.Second, Fixed: true}},
		{"a bucket", strategy.CheckLimit{WindowSize: time.Minute, Limit: 1, Precision: time.Second, Kind: kindToken, Burst: 1}},
		{"a log", strategy.CheckLimit{WindowSize: time.Minute, Limit: 1, Precision: time.Second, Kind: strategy.KindLog}},
	} {
		checks := []strategy.Check{{Namespace: "ns", Key: "k", Cost: 1, Now: base, Limits: []strategy.CheckLimit{{WindowSize: time.Minute, Limit: 1}, tc.l}}}
		want := fmt.Sprintf(`redis: check 0 (key "k"): limit 1: Precision = %v: must be whole milliseconds dividing WindowSize %v`, tc.l.Precision, tc.l.WindowSize)
		if _, err := s.CheckAndCount(context.Background(), "n", 1, checks); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: CheckAndCount = %v, want an error containing %q", tc.name, err, want)
		}
	}
	if n := ops.n.Load(); n != 0 {
		t.Fatalf("%d commands sent for invalid input, want none", n)
	}
}
