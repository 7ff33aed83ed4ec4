package redis_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/arith"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesync/ratesync/internal/testenv"

	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/redis"
)

func keysN(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%07d", i)
	}
	return keys
}

func diffsOf(keys []string, start time.Time) []strategy.Diff {
	diffs := make([]strategy.Diff, len(keys))
	for i, k := range keys {
		diffs[i] = diff("api", k, start, time.Minute, 1)
	}
	return diffs
}

// perDiff reports the throughput of n diffs per iteration.
func perDiff(b *testing.B, n int, o *ops) {
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "diffs/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n)/float64(b.N), "ns/diff")
	if o != nil {
		b.ReportMetric(float64(o.n.Load())/float64(b.N), "roundtrips/op")
	}
}

// PushDiffs of big batches against two baselines: the same increments as
// one plain pipeline (HINCRBYFLOAT, then PEXPIRE per hash: no dedup, no
// script), and a naive loop of one HINCRBYFLOAT round trip per diff (capped
// at 2,000 diffs an iteration: compare ns/diff).
func BenchmarkPushDiffs(b *testing.B) {
	ctx := context.Background()
	start := arith.WindowStart(time.Now(), time.Minute)
	for _, n := range []int{10_000, 100_000} {
		keys := keysN(n)
		diffs := diffsOf(keys, start)
		b.Run(fmt.Sprintf("diffs=%d/store", n), func(b *testing.B) {
			s, c := newStore(b, redis.Config{})
			o := countOps(b, c)
			b.ReportAllocs()
			seq := uint64(0)
			for b.Loop() {
				seq++
				if err := s.PushDiffs(ctx, strategy.Batch{Node: "bench", Seq: seq, Diffs: diffs}); err != nil {
					b.Fatal(err)
				}
			}
			perDiff(b, n, o)
		})
		b.Run(fmt.Sprintf("diffs=%d/pipelined-hincrbyfloat", n), func(b *testing.B) {
			_, c := newStore(b, redis.Config{})
			hash := "{bench}:pipelined"
			b.Cleanup(func() { c.Del(ctx, hash) })
			o := countOps(b, c)
			b.ReportAllocs()
			for b.Loop() {
				pipe := c.Pipeline()
				for _, d := range diffs {
					pipe.HIncrByFloat(ctx, hash, d.Key, d.Value)
				}
				pipe.PExpire(ctx, hash, 2*time.Minute)
				cmds, err := pipe.Exec(ctx)
				if err != nil {
					b.Fatal(err)
				}
				for _, cmd := range cmds {
					if cmd.Err() != nil {
						b.Fatal(cmd.Err())
					}
				}
			}
			perDiff(b, n, o)
		})
		naive := min(n, 2000)
		b.Run(fmt.Sprintf("diffs=%d/naive-loop(%d)", n, naive), func(b *testing.B) {
			_, c := newStore(b, redis.Config{})
			hash := "{bench}:naive"
			b.Cleanup(func() { c.Del(ctx, hash) })
			o := countOps(b, c)
			b.ReportAllocs()
			for b.Loop() {
				for _, d := range diffs[:naive] {
					if err := c.HIncrByFloat(ctx, hash, d.Key, d.Value).Err(); err != nil {
						b.Fatal(err)
					}
				}
			}
			perDiff(b, naive, o)
		})
	}
}

// GetCounters of a namespace of 100,000 keys in one window: the whole
// namespace (HLEN, then HGETALL per shard hash of up to ScanThreshold
// fields, else HSCAN pages) and the syncer's read of given keys (HMGET
// chunks), against a plain pipelined HGETALL of every shard hash.
func BenchmarkGetCounters(b *testing.B) {
	ctx := context.Background()
	const n = 100_000
	now := time.Now()
	start := arith.WindowStart(now, time.Minute)
	keys := keysN(n)
	s, c := newStore(b, redis.Config{})
	if err := s.PushDiffs(ctx, strategy.Batch{Node: "bench", Seq: 1, Diffs: diffsOf(keys, start)}); err != nil {
		b.Fatal(err)
	}
	o := countOps(b, c)
	read := func(b *testing.B, q strategy.Query) {
		b.ReportAllocs()
		o.n.Store(0)
		for b.Loop() {
			got := 0
			for _, err := range s.GetCounters(ctx, q) {
				if err != nil {
					b.Fatal(err)
				}
				got++
			}
			if got != n {
				b.Fatalf("%d counters, want %d", got, n)
			}
		}
		b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "counters/s")
		b.ReportMetric(float64(o.n.Load())/float64(b.N), "roundtrips/op")
	}
	q := strategy.Query{Namespace: "api", WindowSizes: []time.Duration{time.Minute}, Now: now}
	b.Run("keys=100000/whole-namespace", func(b *testing.B) { read(b, q) })
	b.Run("keys=100000/with-keys", func(b *testing.B) {
		q := q
		q.Keys = keys
		read(b, q)
	})
	b.Run("keys=100000/baseline-pipelined-hgetall", func(b *testing.B) {
		var hashes []string
		it := c.Scan(ctx, 0, "*:api:*}:60000:*", 1000).Iterator()
		for it.Next(ctx) {
			hashes = append(hashes, it.Val())
		}
		b.ReportAllocs()
		o.n.Store(0)
		for b.Loop() {
			pipe := c.Pipeline()
			for _, h := range hashes {
				pipe.HGetAll(ctx, h)
			}
			cmds, err := pipe.Exec(ctx)
			if err != nil {
				b.Fatal(err)
			}
			got := 0
			for _, cmd := range cmds {
				got += len(cmd.(interface{ Val() map[string]string }).Val())
			}
			if got < n {
				b.Fatalf("%d fields in %d hashes, want %d", got, len(hashes), n)
			}
		}
		b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "counters/s")
		b.ReportMetric(float64(o.n.Load())/float64(b.N), "roundtrips/op")
	})
}

// One synchronous hit: PushAndCount of one diff (one round trip), against
// PushDiffs plus GetCounters of the key (what the syncer does for a store
// without PushAndCount: two round trips) and a bare PING (the round trip
// itself). CheckAndCount of one check with two limits, for comparison.
func BenchmarkSynchronousHit(b *testing.B) {
	ctx := context.Background()
	now := time.Now()
	start := arith.WindowStart(now, time.Minute)
	d := []strategy.Diff{diff("api", "user:42", start, time.Minute, 1)}
	s, c := newStore(b, redis.Config{})
	o := countOps(b, c)
	seq := uint64(0)
	run := func(name string, fn func(b *testing.B)) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			o.n.Store(0)
			for b.Loop() {
				fn(b)
			}
			b.ReportMetric(float64(o.n.Load())/float64(b.N), "roundtrips/op")
		})
	}
	run("push-and-count", func(b *testing.B) {
		seq++
		if _, err := s.PushAndCount(ctx, strategy.Batch{Node: "bench", Seq: seq, Diffs: d}); err != nil {
			b.Fatal(err)
		}
	})
	run("baseline-push-then-get", func(b *testing.B) {
		seq++
		if err := s.PushDiffs(ctx, strategy.Batch{Node: "bench", Seq: seq, Diffs: d}); err != nil {
			b.Fatal(err)
		}
		for _, err := range s.GetCounters(ctx, strategy.Query{Namespace: "api", WindowSizes: []time.Duration{time.Minute}, Now: now, Keys: []string{"user:42"}}) {
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	run("baseline-ping", func(b *testing.B) {
		if err := c.Ping(ctx).Err(); err != nil {
			b.Fatal(err)
		}
	})
	checks := []strategy.Check{{Namespace: "api", Key: "user:7", Cost: 1, Now: now, Limits: []strategy.CheckLimit{
		{WindowSize: time.Minute, Limit: 1e12}, {WindowSize: time.Second, Limit: 1e12, Fixed: true},
	}}}
	run("check-and-count", func(b *testing.B) {
		seq++
		if _, err := s.CheckAndCount(ctx, "bench", seq, checks); err != nil {
			b.Fatal(err)
		}
	})
}

// One check of one key on a sliding log of n entries, against the same
// check on a plain sliding window (the baseline): the log's cost must not
// grow with its entries (O(log n): a trim that finds the one entry that
// stopped weighing, one added). The clock moves 1 ms a check over a log
// whose window is n ms, so each check trims one entry and adds one: the
// log stays n entries long. "denied" is a full log of n entries refusing
// a request that fits once two entries go: its RetryAt reads those two.
// Reported: ns/op (the round trip included), server-ns/op (the script's
// time in Redis, from INFO commandstats of a server of its own: what the
// log's size would show in) and the log's entries when done.
func BenchmarkCheckLog(b *testing.B) {
	ctx := context.Background()
	r := testenv.PrivateRedis(b)
	c := r.Client(b)
	s := storeOn(b, c, r.Prefix, redis.Config{Shards: 1})
	t0 := base.UnixMilli()
	seq := uint64(0)
	runs := 0
	newKey := func(name string) string { // a key of its own for each run of a sub-benchmark's body
		runs++
		return fmt.Sprintf("%s-%d", name, runs)
	}
	check := func(b *testing.B, key string, now int64, l strategy.CheckLimit, want bool) {
		seq++
		res, err := s.CheckAndCount(ctx, "bench", seq, []strategy.Check{{Namespace: "ns", Key: key, Cost: 1, Now: time.UnixMilli(now), Limits: []strategy.CheckLimit{l}}})
		if err != nil {
			b.Fatal(err)
		}
		if res[0].Allowed != want {
			b.Fatalf("check at %d: %+v, want allowed %v", now, res[0], want)
		}
	}
	fill := func(b *testing.B, key string, n int, w time.Duration) {
		diffs := make([]strategy.BucketDiff, n)
		for i := range diffs {
			diffs[i] = strategy.BucketDiff{Namespace: "ns", Key: key, Kind: strategy.KindLog, Window: w, At: t0 + int64(i), Cost: 1, Rate: float64(n)}
		}
		seq++
		mustPush(b, s, strategy.Batch{Node: "bench", Seq: seq, Buckets: diffs})
	}
	b.Run("window", func(b *testing.B) {
		l := strategy.CheckLimit{WindowSize: time.Minute, Limit: 1e15}
		now, key := t0, newKey("w")
		b.ReportAllocs()
		sv := serverTime(b, c)
		for b.Loop() {
			now++
			check(b, key, now, l, true)
		}
		sv.report(b)
	})
	for _, n := range []int{100, 10_000} {
		w := time.Duration(n) * time.Millisecond
		b.Run(fmt.Sprintf("log=%d", n), func(b *testing.B) {
			key := newKey(fmt.Sprintf("log%d", n))
			fill(b, key, n, w)
			l := strategy.CheckLimit{Kind: strategy.KindLog, WindowSize: w, Limit: 1e15}
			now := t0 + int64(n) - 1
			b.ReportAllocs()
			sv := serverTime(b, c)
			for b.Loop() {
				now++
				check(b, key, now, l, true)
			}
			sv.report(b)
			b.ReportMetric(float64(logLen(b, c, key, w)), "entries")
		})
	}
	b.Run("log=10000/denied", func(b *testing.B) {
		const n = 10_000
		w := n * time.Millisecond
		key := newKey("denied")
		fill(b, key, n, w)
		l := strategy.CheckLimit{Kind: strategy.KindLog, WindowSize: w, Limit: n - 0.5}
		b.ReportAllocs()
		sv := serverTime(b, c)
		for b.Loop() {
			check(b, key, t0+n-1, l, false)
		}
		sv.report(b)
		b.ReportMetric(float64(logLen(b, c, key, w)), "entries")
	})
}

// scriptTime reads the time Redis spent in scripts (EVALSHA), from INFO
// commandstats of a server of the benchmark's own.
type scriptTime struct {
	c     *goredis.Client
	start int64 // µs
}

func serverTime(b *testing.B, c *goredis.Client) scriptTime {
	return scriptTime{c, evalshaMicros(b, c)}
}

// report reports the server's time per op since st was taken.
func (st scriptTime) report(b *testing.B) {
	b.ReportMetric(float64(evalshaMicros(b, st.c)-st.start)*1000/float64(b.N), "server-ns/op")
}

func evalshaMicros(b *testing.B, c *goredis.Client) int64 {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:"); ok {
			for _, f := range strings.Split(rest, ",") {
				if v, ok := strings.CutPrefix(f, "usec="); ok {
					n, err := strconv.ParseInt(v, 10, 64)
					if err != nil {
						b.Fatal(err)
					}
					return n
				}
			}
		}
	}
	return 0
}

// logLen returns the entries of key's log of window w, in namespace "ns"
// of the one-shard store c holds.
func logLen(b *testing.B, c *goredis.Client, key string, w time.Duration) int64 {
	keys, err := c.Keys(context.Background(), fmt.Sprintf("{*:ns:0}:l:%d:%s", w.Milliseconds(), key)).Result()
	if err != nil || len(keys) != 1 {
		b.Fatalf("log keys %q, %v: want one", keys, err)
	}
	return c.ZCard(context.Background(), keys[0]).Val()
}

// Synchronous decisions as the syncer sends them: CheckAndCount of
// batches of 32 checks (the decisions its worker coalesces), each node
// (goroutine) on a lane of its own, on one hot key or spread over 1,000
// keys, of one sliding log (1 minute, never full), against the same on a
// plain sliding window (the baseline). Each check is judged at the wall
// clock, so a log trims and grows as it would in use. Reported:
// decisions/s and ns/decision.
func BenchmarkSynchronousDecisions(b *testing.B) {
	const batch = 32
	ctx := context.Background()
	s, _ := newStore(b, redis.Config{})
	var lanes atomic.Int64
	limits := map[string]strategy.CheckLimit{
		"window": {WindowSize: time.Minute, Limit: 1e15},
		"log":    {Kind: strategy.KindLog, WindowSize: time.Minute, Limit: 1e15},
	}
	for _, kind := range []string{"window", "log"} {
		for _, nkeys := range []int{1, 1000} {
			b.Run(fmt.Sprintf("%s/keys=%d", kind, nkeys), func(b *testing.B) {
				keys := keysN(nkeys)
				l := limits[kind]
				ns := fmt.Sprintf("%s-%d", kind, nkeys)
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					node := fmt.Sprintf("node-%d", lanes.Add(1))
					checks := make([]strategy.Check, batch)
					var seq uint64
					next := int(lanes.Load()) * 997
					for pb.Next() {
						now := time.Now()
						for i := range checks {
							next++
							checks[i] = strategy.Check{Namespace: ns, Key: keys[next%nkeys], Cost: 1, Now: now, Limits: []strategy.CheckLimit{l}}
						}
						seq++
						res, err := s.CheckAndCount(ctx, node, seq, checks)
						if err != nil {
							b.Error(err)
							return
						}
						for _, r := range res {
							if !r.Allowed {
								b.Errorf("denied: %+v", r)
								return
							}
						}
					}
				})
				decisions := float64(batch * b.N)
				b.ReportMetric(decisions/b.Elapsed().Seconds(), "decisions/s")
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/decisions, "ns/decision")
			})
		}
	}
}
