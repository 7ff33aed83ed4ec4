package redis_test

import (
	"context"
	"fmt"
	"testing"
	"time"

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
	start := strategy.WindowStart(time.Now(), time.Minute)
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
	start := strategy.WindowStart(now, time.Minute)
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
	start := strategy.WindowStart(now, time.Minute)
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
