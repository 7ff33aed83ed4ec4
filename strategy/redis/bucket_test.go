package redis_test

import (
	"context"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/arith"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesync/ratesync/internal/testenv"
	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/redis"
)

const kindToken uint8 = 4

func bucketDiff(ns, key string, window time.Duration, at int64, cost, rate float64) strategy.BucketDiff {
	return strategy.BucketDiff{Namespace: ns, Key: key, Kind: kindToken, Window: window, At: at, Cost: cost, Rate: rate}
}

// oneBucket returns the state of one bucket, failing t when the store does
// not hold it.
func oneBucket(t *testing.T, s *redis.Store, ns, key string, window time.Duration) strategy.BucketState {
	t.Helper()
	got, err := s.GetBuckets(context.Background(), ns, []strategy.BucketRef{{Key: key, Kind: kindToken, Window: window}})
	if err != nil || len(got) != 1 {
		t.Fatalf("GetBuckets(%q) = %+v, %v; want one bucket", key, got, err)
	}
	return got[0]
}

// Each bucket key lives in the Cluster slot of its shard: with the lane
// record its script writes, whatever braces the counter key holds.
func TestBucketKeysStayInTheirShardsSlot(t *testing.T) {
	cl := testenv.RedisCluster(t)
	c := cl.Client(t)
	prefix := testenv.Name("t")
	s := storeOn(t, c, prefix, redis.Config{})
	ctx := context.Background()
	at := base.UnixMilli()
	keys := []string{"k", "{k}", "}{", "a{b}c", "{", "}", "user:42", "{t}:b:4"}
	var diffs []strategy.BucketDiff
	for _, k := range keys {
		diffs = append(diffs, bucketDiff("ns", k, time.Second, at, 1, 1))
	}
	mustPush(t, s, strategy.Batch{Node: "push", Seq: 1, Buckets: diffs})
	for i, k := range keys {
		res, err := s.CheckAndCount(ctx, "check", uint64(i+1), []strategy.Check{{Namespace: "ns", Key: k, Cost: 1, Now: base,
			Limits: []strategy.CheckLimit{{Kind: kindToken, WindowSize: time.Second, Limit: 1, Burst: 5}}}})
		if err != nil || !res[0].Allowed || res[0].Buckets[0].Level != 2000 {
			t.Fatalf("check of %q = %+v, %v; want allowed, level 2000", k, res, err)
		}
	}
	type onNode struct {
		n   *goredis.Client
		key string
	}
	var (
		mu    sync.Mutex
		found []onNode
	)
	err := c.ForEachMaster(ctx, func(ctx context.Context, n *goredis.Client) error {
		it := n.Scan(ctx, 0, "{"+prefix+":*}:b:*", 1000).Iterator()
		for it.Next(ctx) {
			mu.Lock()
			found = append(found, onNode{n, it.Val()})
			mu.Unlock()
		}
		return it.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != len(keys) {
		t.Fatalf("found %d bucket keys, want %d", len(found), len(keys))
	}
	for _, f := range found {
		tag := f.key[:strings.IndexByte(f.key, '}')+1]
		for _, lane := range []string{tag + ":lane:push", tag + ":lane:check"} {
			if f.n.Exists(ctx, lane).Val() != 1 {
				t.Errorf("bucket %q: lane record %q is not on its node", f.key, lane)
			}
			if ks, ls := f.n.ClusterKeySlot(ctx, f.key).Val(), f.n.ClusterKeySlot(ctx, lane).Val(); ks != ls {
				t.Errorf("bucket %q in slot %d, its lane record %q in slot %d", f.key, ks, lane, ls)
			}
		}
	}
}

// A bucket key holds "at level rate" and expires a minute after the bucket
// drains empty, counted from the clock of the request that changed it
// (not the server's: the suite's buckets of 2040 expire as soon). A peek
// (cost 0) writes nothing.
func TestBucketKeyExpires(t *testing.T) {
	r := testenv.NewRedis(t)
	c := r.Client(t)
	s := storeOn(t, c, r.Prefix, redis.Config{Shards: 1})
	ctx := context.Background()
	at := base.UnixMilli()
	key := func(name string, window time.Duration) string {
		return "{" + r.Prefix + ":ns:0}:b:4:" + strconv.FormatInt(window.Milliseconds(), 10) + ":" + name
	}
	ttl := func(t *testing.T, k string, want time.Duration) {
		t.Helper()
		got := c.PTTL(ctx, k).Val()
		if got > want || got < want-2*time.Second {
			t.Errorf("%s: TTL %v, want about %v", k, got, want)
		}
	}

	// Level 5000 (5 per 1 s window) draining 1 per ms: empty 5 s after at.
	mustPush(t, s, strategy.Batch{Node: "n", Seq: 1, Buckets: []strategy.BucketDiff{bucketDiff("ns", "a", time.Second, at, 5, 1)}})
	if v := c.Get(ctx, key("a", time.Second)).Val(); v != strconv.FormatInt(at, 10)+" 5000 1" {
		t.Fatalf("bucket value %q, want \"<at> 5000 1\"", v)
	}
	ttl(t, key("a", time.Second), 65*time.Second)
	// A diff dated 10 s before the bucket: counted from its own clock.
	mustPush(t, s, strategy.Batch{Node: "n", Seq: 2, Buckets: []strategy.BucketDiff{bucketDiff("ns", "a", time.Second, at-10_000, 1, 1)}})
	ttl(t, key("a", time.Second), 76*time.Second)

	// A check of cost 1 in a bucket of 1 per minute: level 60000, draining
	// 1 per ms: empty 60 s after the check's Now.
	check := func(seq uint64, cost float64) strategy.CheckResult {
		res, err := s.CheckAndCount(ctx, "n", seq, []strategy.Check{{Namespace: "ns", Key: "b", Cost: cost, Now: base,
			Limits: []strategy.CheckLimit{{Kind: kindToken, WindowSize: time.Minute, Limit: 1, Burst: 2}}}})
		if err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	if r := check(3, 0); !r.Allowed || c.Exists(ctx, key("b", time.Minute)).Val() != 0 {
		t.Fatalf("peek of an empty bucket: %+v, key exists %d: want allowed and no key", r, c.Exists(ctx, key("b", time.Minute)).Val())
	}
	if r := check(4, 1); !r.Allowed || r.Buckets[0].Level != 60000 {
		t.Fatalf("check: %+v, want allowed, level 60000", r)
	}
	ttl(t, key("b", time.Minute), 120*time.Second)

	if n := c.MemoryUsage(ctx, key("a", time.Second)).Val(); n > 200 {
		t.Errorf("a bucket key takes %d bytes (MEMORY USAGE), want it small", n)
	}
}

// Levels are doubles that strategy's arithmetic keeps exact from call to
// call: the store writes them so that they read back to the same bits.
func TestBucketLevelsRoundTrip(t *testing.T) {
	r := testenv.NewRedis(t)
	c := r.Client(t)
	s := storeOn(t, c, r.Prefix, redis.Config{Shards: 1})
	ctx := context.Background()
	t0 := base.UnixMilli()
	type step struct {
		at         int64
		cost, rate float64
	}
	for _, tc := range []struct {
		name   string
		window time.Duration
		steps  []step
	}{
		{"2998.000000000001", time.Second, []step{{t0, 2.998000000000001, 3}}},
		{"a third of 3000", 3 * time.Second, []step{{t0, 1.0 / 3, 1.0 / 3}, {t0 + 1, 1.0 / 3, 1.0 / 3}, {t0 + 7, 1, 1.0 / 3}}},
		{"tenths", time.Minute, []step{{t0, 0.1, 0.1}, {t0 + 3, 0.7, 0.1}, {t0 + 1000, 0.3, 0.1}}},
		{"tiny", time.Second, []step{{t0, 1e-300, 1e-300}, {t0 + 1, 1e-310, 1e-300}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := strategy.BucketState{Key: tc.name, Kind: kindToken, Window: tc.window}
			for i, st := range tc.steps {
				want.Level, want.At = arith.BucketAdd(want.Level, want.At, st.rate, st.cost, tc.window.Milliseconds(), st.at)
				mustPush(t, s, strategy.Batch{Node: tc.name, Seq: uint64(i + 1), Buckets: []strategy.BucketDiff{bucketDiff("ns", tc.name, tc.window, st.at, st.cost, st.rate)}})
				got := oneBucket(t, s, "ns", tc.name, tc.window)
				if got.At != want.At || math.Float64bits(got.Level) != math.Float64bits(want.Level) {
					t.Fatalf("step %d: bucket %+v, want %+v (level %b)", i, got, want, math.Float64bits(want.Level))
				}
			}
			stored := c.Get(ctx, "{"+r.Prefix+":ns:0}:b:4:"+strconv.FormatInt(tc.window.Milliseconds(), 10)+":"+tc.name).Val()
			f := strings.Fields(stored)
			if len(f) != 3 {
				t.Fatalf("stored %q: want 3 fields", stored)
			}
			if l, err := strconv.ParseFloat(f[1], 64); err != nil || math.Float64bits(l) != math.Float64bits(want.Level) {
				t.Fatalf("stored level %q parses to %v, %v: want %v exactly", f[1], l, err, want.Level)
			}
		})
	}
	if l := oneBucket(t, s, "ns", "2998.000000000001", time.Second).Level; l != 2998.000000000001 || strconv.FormatFloat(l, 'g', 15, 64) == strconv.FormatFloat(l, 'g', -1, 64) {
		t.Fatalf("level %v: want 2998.000000000001, a double that needs 16 digits", l)
	}
}

// A push or a check whose reply is lost was applied; its retry (same node
// and seq) applies nothing again, buckets included, and a check's retry
// gets the decision made then.
func TestBucketsCountOnceWhenTheReplyIsLost(t *testing.T) {
	r := testenv.NewRedis(t)
	noRetries := func(o *goredis.Options) { o.MaxRetries = -1 }
	ctx := context.Background()
	at := base.UnixMilli()
	start := arith.WindowStart(base, time.Minute)

	t.Run("push and count", func(t *testing.T) {
		s, p, _ := proxied(t, r, noRetries)
		b := strategy.Batch{Node: "n", Seq: 1, Diffs: []strategy.Diff{diff("ns", "k", start, time.Minute, 1)},
			Buckets: []strategy.BucketDiff{bucketDiff("ns", "k", time.Second, at, 2, 1), bucketDiff("ns", "other", time.Second, at, 3, 1)}}
		p.DropReplies(1)
		if _, err := s.PushAndCount(ctx, b); err == nil {
			t.Fatal("PushAndCount with its reply dropped: no error")
		}
		got, err := s.PushAndCount(ctx, b)
		if err != nil || len(got) != 1 || got[0].Current != 1 {
			t.Fatalf("retry = %+v, %v; want current 1 (applied once)", got, err)
		}
		for key, want := range map[string]float64{"k": 2000, "other": 3000} {
			if b := oneBucket(t, s, "ns", key, time.Second); b.Level != want || b.At != at {
				t.Errorf("bucket %q: %+v, want level %v (applied once)", key, b, want)
			}
		}
	})
	t.Run("buckets only", func(t *testing.T) {
		s, p, _ := proxied(t, r, noRetries)
		b := strategy.Batch{Node: "n", Seq: 1, Buckets: []strategy.BucketDiff{bucketDiff("ns", "k", time.Second, at, 2, 1)}}
		p.DropReplies(1)
		if err := s.PushDiffs(ctx, b); err == nil {
			t.Fatal("PushDiffs with its reply dropped: no error")
		}
		mustPush(t, s, b)
		if b := oneBucket(t, s, "ns", "k", time.Second); b.Level != 2000 {
			t.Errorf("bucket %+v, want level 2000 (applied once)", b)
		}
	})
	t.Run("check and count", func(t *testing.T) {
		s, p, _ := proxied(t, r, noRetries)
		checks := []strategy.Check{{Namespace: "ns", Key: "k", Cost: 2, Now: base, Limits: []strategy.CheckLimit{
			{WindowSize: time.Minute, Limit: 5},
			{Kind: kindToken, WindowSize: time.Second, Limit: 1, Burst: 5},
		}}}
		p.DropReplies(1)
		if _, err := s.CheckAndCount(ctx, "n", 1, checks); err == nil {
			t.Fatal("CheckAndCount with its reply dropped: no error")
		}
		res, err := s.CheckAndCount(ctx, "n", 1, checks)
		if err != nil || !res[0].Allowed || res[0].Totals[0].Current != 2 || res[0].Buckets[1].Level != 2000 || res[0].Buckets[1].At != at {
			t.Fatalf("retry = %+v, %v; want allowed as decided then, current 2, bucket level 2000 at %d", res, err, at)
		}
		if b := oneBucket(t, s, "ns", "k", time.Second); b.Level != 2000 {
			t.Errorf("bucket %+v, want level 2000 (counted once)", b)
		}
	})
}

// Bad bucket diffs, limits and refs are refused before anything is sent,
// with an error naming the field and its value.
func TestInvalidBucketInputIsRejected(t *testing.T) {
	s, c := newStore(t, redis.Config{})
	ops := countOps(t, c)
	ctx := context.Background()
	at := base.UnixMilli()
	good := bucketDiff("ns", "k", time.Second, at, 1, 1)
	for _, tc := range []struct {
		name string
		d    func(*strategy.BucketDiff)
		want string
	}{
		{"kind 0", func(d *strategy.BucketDiff) { d.Kind = 0 }, `redis: batch 1 of node "n": bucket diff 1 (key "k"): Kind = 0: must be a bucket kind, 1 to 255`},
		{"zero window", func(d *strategy.BucketDiff) { d.Window = 0 }, "window size 0s: must be > 0 and whole milliseconds"},
		{"sub-ms window", func(d *strategy.BucketDiff) { d.Window = 1500 * time.Microsecond }, "window size 1.5ms: must be > 0 and whole milliseconds"},
		{"zero cost", func(d *strategy.BucketDiff) { d.Cost = 0 }, "Cost = 0: must be finite and not 0"},
		{"NaN cost", func(d *strategy.BucketDiff) { d.Cost = math.NaN() }, "Cost = NaN: must be finite and not 0"},
		{"infinite cost", func(d *strategy.BucketDiff) { d.Cost = math.Inf(1) }, "Cost = +Inf: must be finite and not 0"},
		{"negative log cost", func(d *strategy.BucketDiff) { d.Kind, d.Cost = strategy.KindLog, -1 }, "Cost = -1: must be finite and not 0 (> 0 for an anchored window or a log)"},
		{"negative rate", func(d *strategy.BucketDiff) { d.Rate = -1 }, "Rate = -1: must be finite and > 0"},
		{"infinite rate", func(d *strategy.BucketDiff) { d.Rate = math.Inf(1) }, "Rate = +Inf: must be finite and > 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := good
			tc.d(&bad)
			b := strategy.Batch{Node: "n", Seq: 1, Buckets: []strategy.BucketDiff{good, bad}}
			if err := s.PushDiffs(ctx, b); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("PushDiffs = %v, want an error containing %q", err, tc.want)
			}
			if _, err := s.PushAndCount(ctx, b); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("PushAndCount = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	lim := strategy.CheckLimit{Kind: kindToken, WindowSize: time.Second, Limit: 1, Burst: 1}
	for _, tc := range []struct {
		name string
		l    func(*strategy.CheckLimit)
		want string
	}{
		{"zero burst", func(l *strategy.CheckLimit) { l.Burst = 0 }, `redis: check 0 (key "k"): limit 1: Burst = 0: must be finite and > 0`},
		{"NaN burst", func(l *strategy.CheckLimit) { l.Burst = math.NaN() }, "limit 1: Burst = NaN: must be finite and > 0"},
		{"infinite burst", func(l *strategy.CheckLimit) { l.Burst = math.Inf(1) }, "limit 1: Burst = +Inf: must be finite and > 0"},
		{"zero limit", func(l *strategy.CheckLimit) { l.Limit = 0 }, "limit 1: Limit 0: must be > 0"},
		{"infinite limit", func(l *strategy.CheckLimit) { l.Limit = math.Inf(1) }, "limit 1: Limit = +Inf: must be finite"},
		{"sub-ms limit window", func(l *strategy.CheckLimit) { l.WindowSize = time.Millisecond + 1 }, "limit 1: window size 1.000001ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := lim
			tc.l(&bad)
			checks := []strategy.Check{{Namespace: "ns", Key: "k", Cost: 1, Now: base, Limits: []strategy.CheckLimit{lim, bad}}}
			if _, err := s.CheckAndCount(ctx, "n", 1, checks); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CheckAndCount = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name string
		ref  strategy.BucketRef
		want string
	}{
		{"kind 0", strategy.BucketRef{Key: "k", Window: time.Second}, `redis: buckets of namespace "ns": ref 0 (key "k"): Kind = 0: must be a bucket kind, 1 to 255`},
		{"negative window", strategy.BucketRef{Key: "k", Kind: kindToken, Window: -time.Second}, "ref 0 (key \"k\"): window size -1s"},
	} {
		if _, err := s.GetBuckets(ctx, "ns", []strategy.BucketRef{tc.ref}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("GetBuckets with %s = %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	if n := ops.n.Load(); n != 0 {
		t.Fatalf("%d commands sent for invalid input, want none", n)
	}
}

// A bucket key that holds something else fails the requests that read it,
// not the others; the batch is recorded, so that a retry counts nothing
// again.
func TestBucketKeyHoldingNoBucket(t *testing.T) {
	r := testenv.NewRedis(t)
	c := r.Client(t)
	s := storeOn(t, c, r.Prefix, redis.Config{Shards: 1})
	ctx := context.Background()
	at := base.UnixMilli()
	bad := "{" + r.Prefix + ":ns:0}:b:4:1000:bad"
	for _, tc := range []struct {
		name, value string
	}{{"text", "not a bucket"}, {"a hash", ""}} {
		t.Run(tc.name, func(t *testing.T) {
			c.Del(ctx, bad, "{"+r.Prefix+":ns:0}:b:4:1000:a")
			if tc.value != "" {
				c.Set(ctx, bad, tc.value, 0)
			} else {
				c.HSet(ctx, bad, "at", 1)
			}
			b := strategy.Batch{Node: "n-" + tc.name, Seq: 1, Buckets: []strategy.BucketDiff{
				bucketDiff("ns", "a", time.Second, at, 1, 1), bucketDiff("ns", "bad", time.Second, at, 1, 1),
			}}
			for try := range 2 {
				err := s.PushDiffs(ctx, b)
				if try == 0 && (err == nil || !strings.Contains(err.Error(), "holds no bucket")) {
					t.Fatalf("PushDiffs = %v, want the bad bucket reported", err)
				}
				if try == 1 && err != nil {
					t.Fatalf("retry: %v, want nothing applied and no error", err)
				}
			}
			if got := oneBucket(t, s, "ns", "a", time.Second); got.Level != 1000 {
				t.Errorf("bucket a: %+v, want level 1000 (applied once)", got)
			}
			c.Del(ctx, "{"+r.Prefix+":ns:0}:b:4:1000:a")
			checks := []strategy.Check{
				{Namespace: "ns", Key: "a", Cost: 1, Now: base, Limits: []strategy.CheckLimit{{Kind: kindToken, WindowSize: time.Second, Limit: 1, Burst: 5}}},
				{Namespace: "ns", Key: "bad", Cost: 1, Now: base, Limits: []strategy.CheckLimit{{Kind: kindToken, WindowSize: time.Second, Limit: 1, Burst: 5}}},
			}
			if res, err := s.CheckAndCount(ctx, "c-"+tc.name, 1, checks); err == nil || !strings.Contains(err.Error(), "holds no bucket") {
				t.Fatalf("CheckAndCount = %+v, %v; want the bad bucket reported", res, err)
			}
			if got := oneBucket(t, s, "ns", "a", time.Second); got.Level != 1000 {
				t.Errorf("bucket a after the check: %+v, want level 1000 (the good check counted)", got)
			}
		})
	}
}

// Each bucket a script call changes is read once and written once (with
// its TTL), whatever the number of requests on it; a replay reads it only.
func TestBucketCallsPerBatch(t *testing.T) {
	r := testenv.PrivateRedis(t)
	c := r.Client(t)
	s := storeOn(t, c, r.Prefix, redis.Config{Shards: 1})
	ctx := context.Background()
	const n = 32
	var checks []strategy.Check
	var diffs []strategy.BucketDiff
	for i := range n {
		checks = append(checks, strategy.Check{Namespace: "ns", Key: "hot", Cost: 1, Now: base,
			Limits: []strategy.CheckLimit{{Kind: kindToken, WindowSize: time.Second, Limit: 1, Burst: 1e9}}})
		diffs = append(diffs, bucketDiff("ns", "hot", time.Second, base.UnixMilli()+int64(i), 1, 1))
	}
	for _, tc := range []struct {
		name string
		run  func() error
		want map[string]int // GET and SET: the lane record's, and the bucket's
	}{
		{"check", func() error { _, err := s.CheckAndCount(ctx, "n", 1, checks); return err }, map[string]int{"evalsha": 1, "get": 2, "set": 2}},
		{"push", func() error { return s.PushDiffs(ctx, strategy.Batch{Node: "n", Seq: 2, Buckets: diffs}) }, map[string]int{"evalsha": 1, "get": 2, "set": 2}},
		{"replay", func() error { _, err := s.CheckAndCount(ctx, "n", 1, checks); return err }, map[string]int{"evalsha": 1, "get": 2, "set": 0}},
	} {
		got := commandCalls(t, c, tc.run)
		for k, w := range tc.want {
			if got[k] != w {
				t.Errorf("%s: %s: %d calls, want %d (all: %v)", tc.name, k, got[k], w, got)
			}
		}
	}
	if b := oneBucket(t, s, "ns", "hot", time.Second); b.Level != 2*n*1000-(n-1) {
		t.Fatalf("bucket %+v, want level %d", b, 2*n*1000-(n-1))
	}
}
