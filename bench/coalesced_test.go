package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/testenv"
	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
	"github.com/ratesync/ratesync/strategy"
)

// Concurrent synchronous increments and
// checks are merged into one store call per batch, and each caller still
// gets the totals as of its own hit.

const workers = 64 // goroutines deciding at once

// hitTimeout bounds a synchronous store call in these benchmarks and tests:
// long enough that a slow moment of a loaded machine never marks the store
// down (hits would then be counted locally, which is not what is measured).
const hitTimeout = 30 * time.Second

// BenchmarkSynchronousCoalesced compares, with 64 goroutines deciding at
// once on one store, a synchronous namespace (SyncRate 0) of an Instance,
// whose worker coalesces the hits queued meanwhile into one store call, with
// one store round trip per decision made directly on the store by each
// goroutine on a push lane of its own (at-most-once bookkeeping per call,
// as the Instance's): store.PushAndCount of one diff for "increment"
// (Instance.Increment), store.CheckAndCount of one check for "allow"
// (Instance.Allow, one sliding limit never reached), and the same with one
// token bucket that never empties for "bucket" (Instance.AllowOne). Keys: one hot key, or
// 1,000 keys spread over the goroutines. Each b.Loop iteration runs 2,048
// decisions each way, alternately first, so both meet the same machine.
// Reported: decisions/s of each (uncoalesced-decisions/s is the baseline),
// their ratio x-uncoalesced (target: at least 3), round trips per decision
// of each, decisions per store call of the Instance, the CPU time per
// decision of this process (go-cpu) and, for Redis, of the server
// (server-cpu, from INFO cpu) with how busy it was (server-busy-%: 100 is
// one core, all Redis has), and the client's connection pool (PostgreSQL: pgxpool's default
// max(4, GOMAXPROCS), and 64 so that the baseline is not starved; Redis:
// go-redis's default 10 per GOMAXPROCS, and 64).
//
// A third backend, redis-shards=1, is the same Redis with redis.Config.Shards
// 1 (default 16), on 1,000 keys only: a batch of 32 decisions then makes one
// shard group instead of about 14, each with its own lane record, TTL and
// keys to send (see BENCHMARKS.md for what fewer shards cost elsewhere).
func BenchmarkSynchronousCoalesced(b *testing.B) {
	oneShard := opener{"redis-shards=1", func(tb testing.TB, pool int) *backend { return openRedisShards(tb, pool, 1) }}
	for _, o := range append(slices.Clone(backends), oneShard) {
		for _, pool := range []int{0, workers} {
			name := "pool=default"
			if pool > 0 {
				name = fmt.Sprintf("pool=%d", pool)
			}
			b.Run(o.name+"/"+name, func(b *testing.B) {
				be := o.open(b, pool)
				b.Logf("%s: pool of %d connections, %d goroutines, GOMAXPROCS %d", be.name, be.pool, workers, procs())
				for _, op := range []string{"increment", "allow", "bucket"} {
					for _, keys := range []int{1, 1000} {
						if o.name == oneShard.name && keys == 1 {
							continue // one key is one shard group with any Shards
						}
						b.Run(fmt.Sprintf("%s/keys=%d", op, keys), func(b *testing.B) { benchCoalesced(b, be, op, keys) })
					}
				}
			})
		}
	}
}

func benchCoalesced(b *testing.B, be *backend, op string, nkeys int) {
	const chunk = workers * 32
	ctx := context.Background()
	ns := testenv.Name(op + "-")
	in := newInstance(b, ns, ratelimiting.WithSyncTimeout(0, hitTimeout))
	mustNew(b, in, namespace.Config{Name: ns, SyncRate: namespace.Synchronous, Strategy: be.store, WindowSizes: []time.Duration{time.Minute}})
	keys := keysN("key-", nkeys)
	key := func(w, i int) string { return keys[(w*997+i)%nkeys] }
	limit := ratelimiting.Limit{Limit: 1e15, Window: time.Minute}
	bucket := ratelimiting.Limit{Limit: 1e9, Window: time.Minute, Algorithm: ratelimiting.TokenBucket}
	errDenied := errors.New("denied: the limit is never reached here")

	coalesced := func(w, i int) error {
		switch op {
		case "increment":
			_, err := in.Increment(ctx, ns, key(w, i), time.Minute, 1)
			return err
		case "bucket":
			st, err := in.AllowOne(ctx, ns, key(w, i), 1, bucket)
			if err == nil && !st.Allowed {
				err = errDenied
			}
			return err
		}
		d, err := in.Allow(ctx, ns, key(w, i), 1, limit)
		if err == nil && !d.Allowed {
			err = errDenied
		}
		return err
	}
	var (
		lanes [workers]string
		seqs  [workers]uint64
	)
	for w := range lanes {
		lanes[w] = testenv.Name(ns + "|baseline-")
	}
	uncoalesced := func(w, i int) error {
		seqs[w]++
		now := time.Now()
		k := key(w, i)
		if op == "increment" {
			_, err := be.store.PushAndCount(ctx, strategy.Batch{Node: lanes[w], Seq: seqs[w], Diffs: []strategy.Diff{{
				Namespace: ns, Key: k, WindowStart: strategy.WindowStart(now, time.Minute), WindowSize: time.Minute, Value: 1,
			}}})
			return err
		}
		cl := strategy.CheckLimit{WindowSize: time.Minute, Limit: limit.Limit}
		if op == "bucket" {
			cl = strategy.CheckLimit{WindowSize: time.Minute, Limit: bucket.Limit, Kind: uint8(bucket.Algorithm), Burst: bucket.Limit}
		}
		res, err := be.store.CheckAndCount(ctx, lanes[w], seqs[w], []strategy.Check{{
			Namespace: ns, Key: k, Cost: 1, Now: now, Limits: []strategy.CheckLimit{cl},
		}})
		if err == nil && !res[0].Allowed {
			err = errDenied
		}
		return err
	}

	paths := [2]func(w, i int) error{coalesced, uncoalesced}
	var (
		took          [2]time.Duration
		trips         [2]int64
		goCPU, srvCPU [2]float64
		cpuOK         = [2]bool{true, true} // [0]: this process, [1]: the server
	)
	run := func(p, n int) {
		r := be.trips()
		g0, gok := processCPU()
		s0, sok := be.serverCPU()
		d, err := drive(n, workers, paths[p])
		if err != nil {
			b.Fatal(err)
		}
		g1, gok1 := processCPU()
		s1, sok1 := be.serverCPU()
		took[p] += d
		trips[p] += be.trips() - r
		goCPU[p] += g1 - g0
		srvCPU[p] += s1 - s0
		cpuOK[0] = cpuOK[0] && gok && gok1
		cpuOK[1] = cpuOK[1] && sok && sok1
	}
	// Warm up: connections open, statements prepared, counters created.
	run(0, 4*workers)
	run(1, 4*workers)
	took, trips, goCPU, srvCPU = [2]time.Duration{}, [2]int64{}, [2]float64{}, [2]float64{}
	st := syncStats(b, in, ns)
	calls0 := st.Pushes + st.Checks

	i := 0
	for b.Loop() {
		run(i%2, chunk)
		run(1-i%2, chunk)
		i++
	}
	st = syncStats(b, in, ns)
	if st.LocalHits != 0 || st.PushErrors != 0 {
		b.Fatalf("the store failed during the run (%d push errors, %d hits counted locally: %v): not a measurement of the store path", st.PushErrors, st.LocalHits, st.LastError)
	}
	decisions := float64(chunk * b.N)
	b.ReportMetric(decisions/took[0].Seconds(), "decisions/s")
	b.ReportMetric(decisions/took[1].Seconds(), "uncoalesced-decisions/s")
	b.ReportMetric(float64(took[1])/float64(took[0]), "x-uncoalesced")
	b.ReportMetric(float64(trips[0])/decisions, "roundtrips/decision")
	b.ReportMetric(float64(trips[1])/decisions, "uncoalesced-roundtrips/decision")
	b.ReportMetric(decisions/float64(st.Pushes+st.Checks-calls0), "decisions/store-call")
	b.ReportMetric(float64(be.pool), "pool")
	if cpuOK[0] {
		b.ReportMetric(goCPU[0]/decisions*1e6, "go-cpu-us/decision")
		b.ReportMetric(goCPU[1]/decisions*1e6, "uncoalesced-go-cpu-us/decision")
	}
	if cpuOK[1] {
		b.ReportMetric(srvCPU[0]/decisions*1e6, "server-cpu-us/decision")
		b.ReportMetric(srvCPU[1]/decisions*1e6, "uncoalesced-server-cpu-us/decision")
		b.ReportMetric(100*srvCPU[0]/took[0].Seconds(), "server-busy-%")
		b.ReportMetric(100*srvCPU[1]/took[1].Seconds(), "uncoalesced-server-busy-%")
	}
}

// TestSynchronousCoalescedExact: 64 goroutines make N synchronous
// increments each of one key at once; their hits are coalesced, yet every
// caller gets the count as of its own hit: the returned counts are exactly
// 1..64N, each goroutine's increasing, and the store holds 64N. Then 64
// goroutines ask Allow N times each against a limit of 32N: exactly 32N
// pass, and the store counts them only.
func TestSynchronousCoalescedExact(t *testing.T) {
	const n = 20
	for _, o := range backends {
		t.Run(o.name, func(t *testing.T) {
			ctx := context.Background()
			be := o.open(t, workers)
			now := time.Now()
			start := strategy.WindowStart(now, window)
			in := newInstance(t, "exact", frozen(now), ratelimiting.WithSyncTimeout(0, hitTimeout))
			mustNew(t, in, namespace.Config{Name: "sync", SyncRate: namespace.Synchronous, Strategy: be.store, WindowSizes: []time.Duration{window}})

			t.Run("increment", func(t *testing.T) {
				got := make([][]float64, workers)
				var wg sync.WaitGroup
				for w := range workers {
					wg.Go(func() {
						for range n {
							win, err := in.Increment(ctx, "sync", "hot", window, 1)
							if err != nil {
								t.Error(err)
								return
							}
							got[w] = append(got[w], win.Current)
						}
					})
				}
				wg.Wait()
				var all []float64
				for w, vs := range got {
					if !slices.IsSorted(vs) || len(slices.Compact(slices.Clone(vs))) != len(vs) {
						t.Errorf("goroutine %d: counts %v not increasing", w, vs)
					}
					all = append(all, vs...)
				}
				slices.Sort(all)
				if len(all) != workers*n {
					t.Fatalf("%d counts returned, want %d", len(all), workers*n)
				}
				for i, v := range all {
					if v != float64(i+1) {
						t.Fatalf("sorted counts[%d] = %v, want %d: the counts are not exactly 1..%d", i, v, i+1, workers*n)
					}
				}
				total, err := be.store.GetWindow(ctx, "sync", "hot", start, window)
				if err != nil {
					t.Fatal(err)
				}
				if total != workers*n {
					t.Errorf("store total = %v, want %d", total, workers*n)
				}
				st := syncStats(t, in, "sync")
				if st.LocalHits != 0 {
					t.Errorf("%d hits counted locally: the store failed", st.LocalHits)
				}
				t.Logf("%s: %d increments in %d store calls", be.name, workers*n, st.Pushes)
			})

			t.Run("allow", func(t *testing.T) {
				const limit = workers * n / 2
				var (
					mu      sync.Mutex
					allowed int
				)
				var wg sync.WaitGroup
				for range workers {
					wg.Go(func() {
						for range n {
							d, err := in.Allow(ctx, "sync", "checked", 1, ratelimiting.Limit{Limit: limit, Window: window, Fixed: true})
							if err != nil {
								t.Error(err)
								return
							}
							if d.Allowed {
								mu.Lock()
								allowed++
								mu.Unlock()
							}
						}
					})
				}
				wg.Wait()
				if allowed != limit {
					t.Errorf("%d requests allowed, want exactly the limit %d", allowed, limit)
				}
				total, err := be.store.GetWindow(ctx, "sync", "checked", start, window)
				if err != nil {
					t.Fatal(err)
				}
				if total != limit {
					t.Errorf("store total = %v, want %d", total, limit)
				}
				st := syncStats(t, in, "sync")
				if st.LocalHits != 0 || st.PushErrors != 0 {
					t.Errorf("the store failed: %d local hits, %d push errors", st.LocalHits, st.PushErrors)
				}
				t.Logf("%s: %d checks in %d store calls", be.name, workers*n, st.Checks)
			})
		})
	}
}
