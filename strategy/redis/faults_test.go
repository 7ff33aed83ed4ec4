package redis_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/arith"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesync/ratesync/internal/strategytest"
	"github.com/ratesync/ratesync/internal/testenv"
	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/redis"
)

// proxied returns a store whose client reaches r through a new proxy.
func proxied(t *testing.T, r *testenv.Redis, opts func(*goredis.Options)) (*redis.Store, *testenv.Proxy, *goredis.Client) {
	t.Helper()
	p := testenv.NewProxy(t, r.Addr)
	opt, err := goredis.ParseURL(r.URLVia(p))
	if err != nil {
		t.Fatal(err)
	}
	if opts != nil {
		opts(opt)
	}
	c := goredis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	s := storeOn(t, c, r.Prefix, redis.Config{})
	// An established, idle connection, so that DropReplies hits a reply and
	// not the handshake of a new connection (go-redis may dial one for its
	// first pipeline).
	pipe := c.Pipeline()
	pipe.Ping(context.Background())
	if _, err := pipe.Exec(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if st := c.PoolStats(); st.TotalConns != 1 || st.IdleConns != 1 {
		t.Fatalf("pool %+v: want one idle connection", st)
	}
	return s, p, c
}

// A reply lost after the server applied a batch: the caller sees an error,
// and the syncer's retry (same node and seq) counts nothing again; a
// check's retry gets the decision made then.
func TestDroppedReplyIsCountedOnce(t *testing.T) {
	r := testenv.NewRedis(t)
	noRetries := func(o *goredis.Options) { o.MaxRetries = -1 }
	start := arith.WindowStart(base, time.Minute)
	var diffs []strategy.Diff
	for i := range 300 { // every shard: a pipeline of 16 scripts
		diffs = append(diffs, diff("ns", fmt.Sprintf("k%d", i), start, time.Minute, 1))
	}
	ctx := context.Background()

	t.Run("push", func(t *testing.T) {
		s, p, _ := proxied(t, r, noRetries)
		b := strategy.Batch{Node: "n", Seq: 1, Diffs: diffs}
		p.DropReplies(1)
		if err := s.PushDiffs(ctx, b); err == nil {
			t.Fatal("PushDiffs with its reply dropped: no error")
		}
		mustPush(t, s, b) // the retry
		for i := range diffs {
			if got := count(t, s, "ns", diffs[i].Key, start, time.Minute); got != 1 {
				t.Fatalf("%s = %v after a dropped reply and a retry, want 1", diffs[i].Key, got)
			}
		}
	})
	t.Run("push and count", func(t *testing.T) {
		s, p, _ := proxied(t, r, noRetries)
		b := strategy.Batch{Node: "n", Seq: 1, Diffs: diffs[:1]}
		p.DropReplies(1)
		if _, err := s.PushAndCount(ctx, b); err == nil {
			t.Fatal("PushAndCount with its reply dropped: no error")
		}
		got, err := s.PushAndCount(ctx, b)
		if err != nil || len(got) != 1 || got[0].Current != 1 {
			t.Fatalf("retry = %+v, %v; want current 1 (applied once)", got, err)
		}
	})
	t.Run("check and count", func(t *testing.T) {
		s, p, _ := proxied(t, r, noRetries)
		checks := []strategy.Check{{Namespace: "ns", Key: "k", Cost: 1, Now: base, Limits: []strategy.CheckLimit{{WindowSize: time.Minute, Limit: 5}}}}
		p.DropReplies(1)
		if _, err := s.CheckAndCount(ctx, "n", 1, checks); err == nil {
			t.Fatal("CheckAndCount with its reply dropped: no error")
		}
		res, err := s.CheckAndCount(ctx, "n", 1, checks)
		if err != nil || !res[0].Allowed || res[0].Totals[0].Current != 1 {
			t.Fatalf("retry = %+v, %v; want allowed as decided then, current 1", res, err)
		}
	})
	// go-redis resends a command whose connection failed (MaxRetries): the
	// script finds the batch applied, so the caller sees success and the
	// count is still exact.
	t.Run("client retries", func(t *testing.T) {
		s, p, _ := proxied(t, r, nil)
		p.DropReplies(1)
		mustPush(t, s, strategy.Batch{Node: "n", Seq: 1, Diffs: diffs[:1]})
		if got := count(t, s, "ns", diffs[0].Key, start, time.Minute); got != 1 {
			t.Fatalf("count = %v, want 1", got)
		}
	})
}

// A check call whose reply is lost, over several shards and every kind of
// limit: its retry with the same (node, seq), by the caller or by go-redis
// itself (MaxRetries resends the scripts of a connection that failed),
// gets the decisions made the first time, and each check is counted
// exactly once.
func TestLostCheckReplyRetryGetsTheDecisionsMadeThen(t *testing.T) {
	r := testenv.NewRedis(t)
	ctx := context.Background()
	now := base.Add(15 * time.Second)
	ms := now.UnixMilli()
	start := arith.WindowStart(now, time.Minute)
	call := strategytest.RetryCall("ns", now)
	exact := func(t *testing.T, s *redis.Store, c *goredis.Client, res []strategy.CheckResult) {
		t.Helper()
		for i, r := range res {
			if r.Allowed != strategytest.RetryDecisions[i] {
				t.Errorf("check %d: %+v, want allowed %v (the decision made then)", i, r, strategytest.RetryDecisions[i])
			}
		}
		for key, want := range map[string]float64{"ra": 3, "re": 2, "rf": 0} {
			if got := count(t, s, "ns", key, start, time.Minute); got != want {
				t.Errorf("%s = %v, want %v (counted once)", key, got, want)
			}
		}
		b, err := s.GetBuckets(ctx, "ns", []strategy.BucketRef{{Key: "rb", Kind: 4, Window: time.Second}})
		if err != nil || len(b) != 1 || b[0].Level != 1000 || b[0].At != ms {
			t.Errorf("bucket rb: %+v, %v; want level 1000 at %d (counted once)", b, err, ms)
		}
		if r := res[4].Buckets[0]; r.Level != 2 || r.At != ms {
			t.Errorf("log rc: %+v, want sum 2 at %d (counted once)", r, ms)
		}
		shards := map[string]bool{}
		for _, k := range c.Keys(ctx, "{"+r.Prefix+":ns:*}:60000:*").Val() {
			shards[k[:strings.Index(k, "}")]] = true
		}
		if len(shards) < 2 {
			t.Errorf("window hashes in shards %v: want the call on several shards", shards)
		}
		if lanes := c.Keys(ctx, "{"+r.Prefix+":ns:*}:lane:n").Val(); len(lanes) != 1 {
			t.Errorf("lane records %q: want one, the call's (its groups run in one script)", lanes)
		}
	}
	t.Run("caller retries", func(t *testing.T) {
		s, p, c := proxied(t, r, func(o *goredis.Options) { o.MaxRetries = -1 })
		p.DropReplies(1)
		if _, err := s.CheckAndCount(ctx, "n", 1, call); err == nil {
			t.Fatal("CheckAndCount with its reply dropped: no error")
		}
		res, err := s.CheckAndCount(ctx, "n", 1, call)
		if err != nil {
			t.Fatalf("retry: %v", err)
		}
		exact(t, s, c, res)
	})
	t.Run("client retries", func(t *testing.T) {
		s, p, c := proxied(t, r, nil)
		misses := c.PoolStats().Misses
		p.DropReplies(1)
		res, err := s.CheckAndCount(ctx, "n", 1, call)
		if err != nil {
			t.Fatalf("CheckAndCount with its reply dropped, resent by go-redis: %v", err)
		}
		if c.PoolStats().Misses == misses {
			t.Fatal("no new connection: the reply was not dropped, nothing was resent")
		}
		exact(t, s, c, res)
	})
}

// node is a ratelimiting instance for the fault tests: a fixed clock (one
// window for the whole test; their namespaces count on it, NodeClock),
// short timeouts, no logs.
func node(t *testing.T, id string, now time.Time) *ratelimiting.Instance {
	t.Helper()
	in := ratelimiting.NewInstance(id,
		ratelimiting.WithClock(func() time.Time { return now }),
		ratelimiting.WithNodeID(id),
		ratelimiting.WithLogger(slog.New(slog.DiscardHandler)),
		ratelimiting.WithSyncTimeout(500*time.Millisecond, 500*time.Millisecond))
	t.Cleanup(func() { _ = in.Close(context.Background()) })
	return in
}

func view(t *testing.T, in *ratelimiting.Instance, key string) float64 {
	t.Helper()
	w, err := in.SlidingWindow(context.Background(), "api", key, time.Minute)
	if err != nil {
		t.Fatalf("SlidingWindow: %v", err)
	}
	return w.Current
}

func settled(in *ratelimiting.Instance) bool {
	for _, st := range in.Stats() {
		if st.Sync.InFlight != 0 || st.Sync.Dirty != 0 || !st.Sync.StoreUp {
			return false
		}
	}
	return true
}

// Redis restarted empty: counts pushed before are lost; the batch in flight
// during the outage is pushed again, and the nodes converge on the store's
// new counts (their fetch sets each counter's synced part to the store's
// count).
func TestRedisRestartedEmpty(t *testing.T) {
	r := testenv.PrivateRedis(t)
	s := storeOn(t, r.Client(t), r.Prefix, redis.Config{Timeout: time.Second})
	now := time.Date(2030, 1, 1, 0, 0, 30, 0, time.UTC)
	start := arith.WindowStart(now, time.Minute)
	cfg := namespace.Config{Name: "api", SyncRate: 100 * time.Millisecond, Strategy: s, WindowSizes: []time.Duration{time.Minute}, Clock: namespace.NodeClock}
	a, b := node(t, "a", now), node(t, "b", now)
	for _, in := range []*ratelimiting.Instance{a, b} {
		if err := in.New(cfg); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	inc := func(in *ratelimiting.Instance, v float64) {
		t.Helper()
		if _, err := in.Increment(ctx, "api", "k", time.Minute, v); err != nil {
			t.Fatalf("Increment: %v", err)
		}
	}
	converged := func(want float64) {
		t.Helper()
		eventually(t, 20*time.Second, func() string {
			v, err := s.GetWindow(ctx, "api", "k", start, time.Minute)
			return fmt.Sprintf("store %v (%v), node a %v, node b %v; want %v everywhere", v, err, view(t, a, "k"), view(t, b, "k"), want)
		}, func() bool {
			v, err := s.GetWindow(ctx, "api", "k", start, time.Minute)
			return err == nil && v == want && view(t, a, "k") == want && view(t, b, "k") == want && settled(a) && settled(b)
		})
	}

	inc(a, 5)
	inc(b, 2)
	converged(7)

	r.Stop(t)
	inc(a, 3) // in flight once a's next sync fails
	eventually(t, 10*time.Second, func() string { return "node a never saw the store down" }, func() bool {
		st := a.Stats()[0].Sync
		return !st.StoreUp && st.InFlightDiffs > 0
	})
	r.Start(t)   // empty
	converged(3) // the 7 pushed before are gone; the in-flight 3 landed

	inc(b, 1)
	converged(4)
}

// A store outage in the middle of traffic: no error reaches the callers of
// Increment, nodes keep counting locally, and once the store is back every
// diff lands exactly once.
func TestOutageMidTraffic(t *testing.T) {
	for _, tc := range []struct {
		name       string
		down, up   func(t *testing.T, r *testenv.Redis, p *testenv.Proxy)
		keepsState bool
	}{
		{
			name: "server stopped 5s",
			// The server saves on its graceful stop and loads the file when
			// started again: the outage, not a data loss (see
			// TestRedisRestartedEmpty for that).
			down: func(t *testing.T, r *testenv.Redis, _ *testenv.Proxy) {
				if err := r.Client(t).ConfigSet(context.Background(), "save", "3600 1").Err(); err != nil {
					t.Fatal(err)
				}
				r.Stop(t)
			},
			up: func(t *testing.T, r *testenv.Redis, _ *testenv.Proxy) { r.Start(t) },
		},
		{
			name: "server paused 5s",
			down: func(t *testing.T, r *testenv.Redis, _ *testenv.Proxy) { r.Pause(t) },
			up:   func(t *testing.T, r *testenv.Redis, _ *testenv.Proxy) { r.Resume(t) },
		},
		{
			name: "network cut 5s",
			down: func(t *testing.T, _ *testenv.Redis, p *testenv.Proxy) { p.Cut() },
			up:   func(t *testing.T, _ *testenv.Redis, p *testenv.Proxy) { p.Restore() },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := testenv.PrivateRedis(t)
			p := testenv.NewProxy(t, r.Addr)
			opt, err := goredis.ParseURL(r.URLVia(p))
			if err != nil {
				t.Fatal(err)
			}
			c := goredis.NewClient(opt)
			t.Cleanup(func() { _ = c.Close() })
			s := storeOn(t, c, r.Prefix, redis.Config{Timeout: time.Second})
			now := time.Date(2030, 1, 1, 0, 0, 30, 0, time.UTC)
			in := node(t, "n", now)
			if err := in.New(namespace.Config{Name: "api", SyncRate: 100 * time.Millisecond, Strategy: s, WindowSizes: []time.Duration{time.Minute}, Clock: namespace.NodeClock}); err != nil {
				t.Fatal(err)
			}

			const workers, keys = 3, 10
			var (
				hits atomic.Int64
				errs = make(chan error, workers)
				stop = make(chan struct{})
				once sync.Once
				wg   sync.WaitGroup
			)
			for w := range workers {
				wg.Go(func() {
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						if _, err := in.Increment(context.Background(), "api", fmt.Sprintf("k%d", (w+i)%keys), time.Minute, 1); err != nil {
							errs <- err
							return
						}
						hits.Add(1)
						time.Sleep(time.Millisecond)
					}
				})
			}
			stopTraffic := func() {
				once.Do(func() { close(stop) })
				wg.Wait()
			}
			t.Cleanup(stopTraffic)

			total := func() float64 {
				sum := 0.0
				for k := range keys {
					sum += view(t, in, fmt.Sprintf("k%d", k))
				}
				return sum
			}
			eventually(t, 10*time.Second, func() string { return "no push landed" }, func() bool {
				return in.Stats()[0].Sync.Pushes > 2
			})
			tc.down(t, r, p)
			before := total()
			eventually(t, 10*time.Second, func() string { return "the node never saw the store down" }, func() bool {
				return !in.Stats()[0].Sync.StoreUp
			})
			time.Sleep(5 * time.Second) // the outage itself, not an assertion
			if after := total(); after <= before {
				t.Errorf("local counts went from %v to %v during the outage: want them to go on", before, after)
			}
			tc.up(t, r, p)
			eventually(t, 20*time.Second, func() string { return "the node never saw the store back" }, func() bool {
				return in.Stats()[0].Sync.StoreUp && in.Stats()[0].Sync.Pushes > 0
			})
			time.Sleep(200 * time.Millisecond) // traffic after the recovery too
			stopTraffic()
			select {
			case err := <-errs:
				t.Fatalf("Increment returned %v", err)
			default:
			}

			want := float64(hits.Load())
			stored := func() float64 {
				sum := 0.0
				for c, err := range s.GetCounters(context.Background(), strategy.Query{Namespace: "api", WindowSizes: []time.Duration{time.Minute}, Now: now}) {
					if err != nil {
						return -1
					}
					sum += c.Count
				}
				return sum
			}
			eventually(t, 20*time.Second, func() string {
				return fmt.Sprintf("store total %v, want %v hits", stored(), want)
			}, func() bool { return stored() == want && settled(in) })
			if err := in.Close(context.Background()); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if got := stored(); got != want {
				t.Fatalf("store total %v after Close, want exactly %v hits", got, want)
			}
		})
	}
}

// Synchronous namespaces (SyncRate 0) on this store: each increment is one
// PushAndCount round trip, so every node sees the cluster count at once.
func TestSynchronousNamespaces(t *testing.T) {
	s, _ := newStore(t, redis.Config{})
	now := time.Date(2030, 1, 1, 0, 0, 30, 0, time.UTC)
	cfg := namespace.Config{Name: "api", SyncRate: namespace.Synchronous, Strategy: s, WindowSizes: []time.Duration{time.Minute}, Clock: namespace.NodeClock}
	a, b := node(t, "a", now), node(t, "b", now)
	for _, in := range []*ratelimiting.Instance{a, b} {
		if err := in.New(cfg); err != nil {
			t.Fatal(err)
		}
	}
	for i, in := range []*ratelimiting.Instance{a, b, a, b, b} {
		w, err := in.Increment(context.Background(), "api", "k", time.Minute, 1.5)
		if err != nil {
			t.Fatal(err)
		}
		if want := 1.5 * float64(i+1); w.Current != want {
			t.Fatalf("increment %d: current %v, want %v (the cluster's count)", i, w.Current, want)
		}
	}
}

// A lane record holds the seq's 20 digits, then a check call's decisions
// in its shard ('1' or '0' each, in order); a push's holds the seq alone.
// A record of the seq alone, as a push writes it, gives a retry of that
// seq no decision: not allowed, nothing counted; the next seq applies as
// usual.
func TestLaneRecordOfTheSeqAlone(t *testing.T) {
	r := testenv.NewRedis(t)
	c := r.Client(t)
	s := storeOn(t, c, r.Prefix, redis.Config{Shards: 1})
	ctx := context.Background()
	now := base.Add(15 * time.Second)
	start := arith.WindowStart(now, time.Minute)
	lane := "{" + r.Prefix + ":ns:0}:lane:n"
	check := func(cost float64) strategy.Check {
		return strategy.Check{Namespace: "ns", Key: "k", Cost: cost, Now: now, Limits: []strategy.CheckLimit{{WindowSize: time.Minute, Limit: 3, Fixed: true}}}
	}
	call := func(seq uint64, checks ...strategy.Check) string {
		t.Helper()
		res, err := s.CheckAndCount(ctx, "n", seq, checks)
		if err != nil {
			t.Fatalf("CheckAndCount seq %d: %v", seq, err)
		}
		var got []byte
		for _, r := range res {
			got = fmt.Appendf(got, "%d", btoi(r.Allowed))
		}
		return string(got)
	}
	record := func(want string) {
		t.Helper()
		if got := c.Get(ctx, lane).Val(); got != want {
			t.Fatalf("lane record %q, want %q", got, want)
		}
		if ttl := c.PTTL(ctx, lane).Val(); ttl <= 0 {
			t.Fatalf("lane record TTL %v, want one", ttl)
		}
	}

	if got := call(1, check(1), check(3), check(1)); got != "101" {
		t.Fatalf("seq 1: decisions %s, want 101", got)
	}
	record("00000000000000000001101")
	if err := c.Set(ctx, lane, "00000000000000000001", goredis.KeepTTL).Err(); err != nil {
		t.Fatal(err)
	}
	if got := call(1, check(1), check(3), check(1)); got != "000" {
		t.Fatalf("retry of seq 1 with a record of the seq alone: decisions %s, want 000", got)
	}
	if got := count(t, s, "ns", "k", start, time.Minute); got != 2 {
		t.Fatalf("count %v after the retry, want 2 (nothing counted again)", got)
	}
	if got := call(2, check(1), check(1)); got != "10" {
		t.Fatalf("seq 2: decisions %s, want 10", got)
	}
	record("0000000000000000000210")
	if got := call(2, check(1), check(1)); got != "10" {
		t.Fatalf("retry of seq 2: decisions %s, want 10", got)
	}
	mustPush(t, s, strategy.Batch{Node: "n", Seq: 3, Diffs: []strategy.Diff{diff("ns", "k", start, time.Minute, 1)}})
	record("00000000000000000003")
	if got := call(3, check(0)); got != "0" {
		t.Fatalf("check of the pushed seq 3: decision %s, want 0", got)
	}
	if got := count(t, s, "ns", "k", start, time.Minute); got != 4 {
		t.Fatalf("count %v, want 4", got)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
