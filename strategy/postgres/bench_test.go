package postgres_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/arith"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ratesync/ratesync/internal/strategytest"
	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/postgres"
)

// Benchmarks run against a real server (the same as the tests'); each puts
// its baseline in the same run and reports the ratio. Figures depend on the
// server's fsync and synchronous_commit: compare ratios, not absolutes.

func benchDiffs(n int, start time.Time, size time.Duration) []strategy.Diff {
	diffs := make([]strategy.Diff, n)
	for i := range diffs {
		diffs[i] = diff("bench", fmt.Sprintf("key-%06d", i), start, size, 1)
	}
	return diffs
}

// perItem reports the cost of one item (diff, row) of b's loop and the
// items per second, and returns the former.
func perItem(b *testing.B, items int, unit string) float64 {
	per := float64(b.Elapsed().Nanoseconds()) / float64(b.N*items)
	b.ReportMetric(per, "ns/"+unit)
	b.ReportMetric(1e9/per, unit+"s/s")
	return per
}

// naiveCap bounds the diffs of one iteration of the naive loop: at one
// round trip and one commit per diff it runs hundreds of diffs per second,
// so its per-diff cost is measured on this many and compared per diff.
const naiveCap = 1000

func BenchmarkPushDiffs(b *testing.B) {
	s, pool := newStore(b, postgres.Config{})
	ctx := context.Background()
	size := time.Minute
	start := arith.WindowStart(strategytest.Base, size)
	var naive float64 // ns per diff of the baseline

	// Baseline: one autocommit upsert statement per diff, as a simple port
	// of Kong's push would do (without its textual SQL).
	b.Run(fmt.Sprintf("naive-loop-capped-%d", naiveCap), func(b *testing.B) {
		b.ReportAllocs()
		diffs := benchDiffs(naiveCap, start, size)
		sql := `INSERT INTO public.ratesync_counters AS c (namespace, window_size, window_start, key, count)
			VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (namespace, window_size, window_start, key) DO UPDATE SET count = c.count + EXCLUDED.count`
		for b.Loop() {
			for _, d := range diffs {
				if _, err := pool.Exec(ctx, sql, d.Namespace, d.WindowSize.Milliseconds(), d.WindowStart.UnixMilli(), []byte(d.Key), d.Value); err != nil {
					b.Fatal(err)
				}
			}
		}
		naive = perItem(b, naiveCap, "diff")
	})
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("unnest-%d", n), func(b *testing.B) {
			b.ReportAllocs()
			diffs := benchDiffs(n, start, size)
			node := fmt.Sprintf("bench-%d", n) // a lane per case: no batch is a replay
			var seq uint64
			for b.Loop() {
				seq++
				if err := s.PushDiffs(ctx, strategy.Batch{Node: node, Seq: seq, Diffs: diffs}); err != nil {
					b.Fatal(err)
				}
			}
			if per := perItem(b, n, "diff"); naive > 0 {
				b.ReportMetric(naive/per, "x-faster-than-naive")
			}
		})
	}
}

func BenchmarkGetCounters(b *testing.B) {
	const n = 100_000
	s, pool := newStore(b, postgres.Config{})
	ctx := context.Background()
	size := time.Minute
	start := arith.WindowStart(strategytest.Base, size)
	diffs := benchDiffs(n, start, size)
	if err := s.PushDiffs(ctx, strategy.Batch{Node: "load", Seq: 1, Diffs: diffs}); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE public.ratesync_counters"); err != nil {
		b.Fatal(err)
	}
	keys := make([]string, n)
	for i, d := range diffs {
		keys[i] = d.Key
	}
	var raw float64 // ns per row of the baseline

	// Baseline: the same rows read with a plain pgx query (Kong's select of
	// the namespace), decoded into reused buffers, with no Counter built.
	b.Run("raw-pgx-select", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			rows, err := pool.Query(ctx, `SELECT key, window_size, window_start, count FROM public.ratesync_counters
				WHERE namespace = $1 AND window_size = $2 AND window_start IN ($3, $4)`,
				"bench", size.Milliseconds(), start.UnixMilli(), start.Add(-size).UnixMilli())
			if err != nil {
				b.Fatal(err)
			}
			got := 0
			var (
				key         []byte
				wsize, wbeg int64
				count       float64
			)
			for rows.Next() {
				if err := rows.Scan(&key, &wsize, &wbeg, &count); err != nil {
					b.Fatal(err)
				}
				got++
			}
			if err := rows.Err(); err != nil || got != n {
				b.Fatalf("%d rows, err %v", got, err)
			}
		}
		raw = perItem(b, n, "row")
	})
	for _, c := range []struct {
		name string
		keys []string
	}{{"namespace", nil}, {"keys", keys}} {
		b.Run(fmt.Sprintf("%s-%d", c.name, n), func(b *testing.B) {
			b.ReportAllocs()
			q := strategy.Query{Namespace: "bench", WindowSizes: []time.Duration{size}, Now: strategytest.Base, Keys: c.keys}
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
			if per := perItem(b, n, "row"); raw > 0 {
				b.ReportMetric(per/raw, "x-cost-of-raw")
			}
		})
	}
}

// BenchmarkSynchronous measures the calls of synchronous mode. The
// baseline, what the syncer does with a store that is no PushCounter (a
// push, then a read of the key's windows), runs interleaved with
// PushAndCount in one loop, so that both meet the same commit latency
// (fsync times on a VM vary several-fold from second to second). With
// synchronous_commit off the figures show round trips and server work
// alone.
func BenchmarkSynchronous(b *testing.B) {
	for _, commit := range []string{"on", "off"} {
		b.Run("synchronous_commit="+commit, func(b *testing.B) { benchSynchronous(b, commit) })
	}
}

func benchSynchronous(b *testing.B, commit string) {
	s := benchStore(b, commit)
	ctx := context.Background()
	size := time.Minute
	start := arith.WindowStart(strategytest.Base, size)
	var lanes atomic.Uint64
	hit := func(node string, seq uint64) strategy.Batch {
		return strategy.Batch{Node: node, Seq: seq, Diffs: []strategy.Diff{diff("bench", "hot", start, size, 1)}}
	}

	b.Run("push-and-count-vs-push-then-get-1-diff", func(b *testing.B) {
		b.ReportAllocs()
		node := fmt.Sprintf("lane-%d", lanes.Add(1))
		q := strategy.Query{Namespace: "bench", WindowSizes: []time.Duration{size}, Now: strategytest.Base, Keys: []string{"hot"}}
		var seq uint64
		var base, mine time.Duration
		for b.Loop() {
			seq++
			t0 := time.Now()
			if err := s.PushDiffs(ctx, hit(node, seq)); err != nil {
				b.Fatal(err)
			}
			for _, err := range s.GetCounters(ctx, q) {
				if err != nil {
					b.Fatal(err)
				}
			}
			t1 := time.Now()
			seq++
			if _, err := s.PushAndCount(ctx, hit(node, seq)); err != nil {
				b.Fatal(err)
			}
			base, mine = base+t1.Sub(t0), mine+time.Since(t1)
		}
		b.ReportMetric(float64(base.Nanoseconds())/float64(b.N), "ns/push-then-get")
		b.ReportMetric(float64(mine.Nanoseconds())/float64(b.N), "ns/push-and-count")
		b.ReportMetric(float64(base)/float64(mine), "x-faster-than-push-then-get")
	})
	// Many lanes on one hot key: its row lock serializes them.
	b.Run("push-and-count-1-diff-parallel-hot-key", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			node := fmt.Sprintf("lane-%d", lanes.Add(1))
			var seq uint64
			for pb.Next() {
				seq++
				if _, err := s.PushAndCount(ctx, hit(node, seq)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("check-and-count-1-check-2-limits", func(b *testing.B) {
		b.ReportAllocs()
		node := fmt.Sprintf("lane-%d", lanes.Add(1))
		checks := []strategy.Check{{Namespace: "bench", Key: "checked", Cost: 1, Now: strategytest.Base.Add(30 * time.Second),
			Limits: []strategy.CheckLimit{{WindowSize: time.Second, Limit: 1e12}, {WindowSize: size, Limit: 1e12}}}}
		var seq uint64
		for b.Loop() {
			seq++
			if _, err := s.CheckAndCount(ctx, node, seq, checks); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkCheckBatches measures synchronous decisions of a sliding log as
// the syncer sends them: CheckAndCount calls of 32 checks (about what a
// coalesced call carries), one call in flight on one lane, on one hot key
// or over 1,000 keys, each check one limit never reached, of a 1 s window,
// at the wall clock's time (the checks of a call share it), so that a log
// holds a second of entries and hits trim it. The baseline, the same calls
// with a plain sliding window of 1 s, runs interleaved with them in one
// loop, alternately first, so that both meet the same commit latency.
// Reported: log-decisions/s, window-decisions/s and their ratio x-window,
// with synchronous_commit on and off.
func BenchmarkCheckBatches(b *testing.B) {
	for _, commit := range []string{"on", "off"} {
		b.Run("synchronous_commit="+commit, func(b *testing.B) {
			s := benchStore(b, commit)
			for _, keys := range []int{1, 1000} {
				b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) { benchCheckBatches(b, s, keys) })
			}
		})
	}
}

// benchStore returns a store on a fresh database whose connections run
// with synchronous_commit set to commit.
func benchStore(b *testing.B, commit string) *postgres.Store {
	p, _ := newDB(b)
	cfg, err := pgxpool.ParseConfig(p.URL)
	if err != nil {
		b.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = commit
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	s, err := postgres.New(context.Background(), pool, postgres.Config{})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func benchCheckBatches(b *testing.B, s *postgres.Store, nkeys int) {
	const batch = 32
	ctx := context.Background()
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%04d", i)
	}
	kinds := []struct {
		name  string
		limit strategy.CheckLimit
	}{
		{"log", strategy.CheckLimit{Kind: strategy.KindLog, WindowSize: time.Second, Limit: 1e12}},
		{"window", strategy.CheckLimit{WindowSize: time.Second, Limit: 1e12}},
	}
	node := fmt.Sprintf("bench-%d-%d", nkeys, time.Now().UnixNano()) // a lane per case: no call is a replay
	var (
		seq, next uint64
		took      [2]time.Duration
	)
	call := func(k int) {
		checks := make([]strategy.Check, batch)
		now := time.Now()
		for i := range checks {
			checks[i] = strategy.Check{Namespace: "bench-" + kinds[k].name, Key: keys[int(next)%nkeys], Cost: 1, Now: now,
				Limits: []strategy.CheckLimit{kinds[k].limit}}
			next++
		}
		seq++
		t0 := time.Now()
		res, err := s.CheckAndCount(ctx, node, seq, checks)
		took[k] += time.Since(t0)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range res {
			if !r.Allowed {
				b.Fatalf("%s: a check far from its limit was denied: %+v", kinds[k].name, r)
			}
		}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		first := i % 2
		call(first)
		call(1 - first)
		i++
	}
	decisions := float64(b.N * batch)
	log, window := decisions/took[0].Seconds(), decisions/took[1].Seconds()
	b.ReportMetric(log, "log-decisions/s")
	b.ReportMetric(window, "window-decisions/s")
	b.ReportMetric(log/window, "x-window")
}
