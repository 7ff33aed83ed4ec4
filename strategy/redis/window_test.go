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
