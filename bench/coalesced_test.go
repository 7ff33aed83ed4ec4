package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/arith"
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
// token bucket that never empties for "bucket" (Instance.AllowOne). Three
// more ops decide one limit of the other algorithms through AllowOne:
// "log", a sliding log of 10,000 (the largest) per 50 ms on one key and
// per 5 s over 1,000 keys, not reached below 200,000 decisions/s (a log
// holds an entry per millisecond with admitted hits: up to 50 on the hot
// key; over 1,000 keys, at 20,000 decisions/s, about 100 per key); a log
// may deny where the other limits fail the benchmark, and admitted-% and
// uncoalesced-admitted-% say how many passed; "anchored", an anchored
// window of 1 min, never reached; "precision", a sliding window of 1 min
// counted in 10 s sub-windows (7 counters read per decision), never
// reached. A store that does not decide one of these (a probe check of it
// fails, or answers without its state) skips the op. Keys: one hot key, or
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
// keys to send (see BENCHMARKS.md for what fewer shards cost elsewhere). A
// fourth, memory, is strategy/memory in this process (default pool only,
// no round trips): the coalescer against direct calls with no network.
func BenchmarkSynchronousCoalesced(b *testing.B) {
	oneShard := opener{"redis-shards=1", func(tb testing.TB, pool int) *backend { return openRedisShards(tb, pool, 1) }}
	mem := opener{"memory", openMemory}
	for _, o := range append(slices.Clone(backends), oneShard, mem) {
		for _, pool := range []int{0, workers} {
			if o.name == mem.name && pool > 0 {
				continue // no connections
			}
			name := "pool=default"
			if pool > 0 {
				name = fmt.Sprintf("pool=%d", pool)
			}
			b.Run(o.name+"/"+name, func(b *testing.B) {
				be := o.open(b, pool)
				b.Logf("%s: pool of %d connections, %d goroutines, GOMAXPROCS %d", be.name, be.pool, workers, procs())
				for _, op := range []string{"increment", "allow", "bucket", "log", "anchored", "precision"} {
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

// opLimit returns the limit the decisions of op check on nkeys keys (see
// BenchmarkSynchronousCoalesced), and the same limit as the store's
// CheckLimit, as the Instance sends it; ok is false for increment.
func opLimit(op string, nkeys int) (l ratelimiting.Limit, cl strategy.CheckLimit, ok bool) {
	switch op {
	case "allow":
		l = ratelimiting.Limit{Limit: 1e15, Window: time.Minute}
	case "bucket":
		l = ratelimiting.Limit{Limit: 1e9, Window: time.Minute, Algorithm: ratelimiting.TokenBucket}
		return l, strategy.CheckLimit{WindowSize: l.Window, Limit: l.Limit, Kind: uint8(l.Algorithm), Burst: l.Limit}, true
	case "log":
		l = ratelimiting.Limit{Limit: ratelimiting.MaxLogLimit, Window: 50 * time.Millisecond, Algorithm: ratelimiting.SlidingLog}
		if nkeys > 1 {
			l.Window = 5 * time.Second
		}
		return l, strategy.CheckLimit{WindowSize: l.Window, Limit: l.Limit, Kind: strategy.KindLog}, true
	case "anchored":
		l = ratelimiting.Limit{Limit: 1e9, Window: time.Minute, Algorithm: ratelimiting.AnchoredWindow}
		return l, strategy.CheckLimit{WindowSize: l.Window, Limit: l.Limit, Kind: strategy.KindAnchored}, true
	case "precision":
		l = ratelimiting.Limit{Limit: 1e15, Window: time.Minute, Precision: 10 * time.Second}
		return l, strategy.CheckLimit{WindowSize: l.Window, Limit: l.Limit, Precision: l.Precision}, true
	default:
		return l, cl, false
	}
	return l, strategy.CheckLimit{WindowSize: l.Window, Limit: l.Limit}, true
}

// decides returns why store s cannot decide limit cl, nil when it can: a
// check of cost 1 on a new key must pass and answer with the limit's
// state (a log's or anchored window's level, a precision limit's counts).
func decides(ctx context.Context, s store, ns string, cl strategy.CheckLimit) error {
	res, err := s.CheckAndCount(ctx, testenv.Name(ns+"|probe-"), 1, []strategy.Check{{
		Namespace: ns, Key: "probe", Cost: 1, Now: time.Now(), Limits: []strategy.CheckLimit{cl},
	}})
	switch {
	case err != nil:
		return err
	case len(res) != 1 || !res[0].Allowed:
		return fmt.Errorf("probe check: %+v, want one result, allowed", res)
	case cl.Kind != 0 && (len(res[0].Buckets) != 1 || res[0].Buckets[0].Level != 1):
		return fmt.Errorf("probe check of kind %d: states %+v, want a level of 1", cl.Kind, res[0].Buckets)
	case cl.Precision > 0 && (len(res[0].Windows) != 1 || len(res[0].Windows[0]) != cl.Depth()):
		return fmt.Errorf("probe check with precision %v: windows %v, want %d counts", cl.Precision, res[0].Windows, cl.Depth())
	}
	return nil
}

func benchCoalesced(b *testing.B, be *backend, op string, nkeys int) {
	const chunk = workers * 32
	ctx := context.Background()
	ns := testenv.Name(op + "-")
	limit, checkLimit, _ := opLimit(op, nkeys)
	sizes := []time.Duration{time.Minute}
	if limit.Precision > 0 {
		sizes = append(sizes, limit.Precision)
	}
	if op != "increment" && op != "allow" && op != "bucket" {
		if err := decides(ctx, be.store, ns, checkLimit); err != nil {
			b.Skipf("%s: the store does not decide this limit (%+v): %v", be.name, checkLimit, err)
		}
	}
	in := newInstance(b, ns, ratelimiting.WithSyncTimeout(0, hitTimeout))
	mustNew(b, in, namespace.Config{Name: ns, SyncRate: namespace.Synchronous, Strategy: be.store, WindowSizes: sizes})
	keys := keysN("key-", nkeys)
	key := func(w, i int) string { return keys[(w*997+i)%nkeys] }
	errDenied := errors.New("denied: the limit is never reached here")
	var denied [2]atomic.Int64 // per path: denials of the log, which may deny
	judge := func(p int, allowed bool) error {
		switch {
		case allowed:
			return nil
		case op == "log":
			denied[p].Add(1)
			return nil
		}
		return errDenied
	}

	coalesced := func(w, i int) error {
		switch op {
		case "increment":
			_, err := in.Increment(ctx, ns, key(w, i), time.Minute, 1)
			return err
		case "allow":
			d, err := in.Allow(ctx, ns, key(w, i), 1, limit)
			if err != nil {
				return err
			}
			return judge(0, d.Allowed)
		}
		st, err := in.AllowOne(ctx, ns, key(w, i), 1, limit)
		if err != nil {
			return err
		}
		return judge(0, st.Allowed)
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
				Namespace: ns, Key: k, WindowStart: arith.WindowStart(now, time.Minute), WindowSize: time.Minute, Value: 1,
			}}})
			return err
		}
		res, err := be.store.CheckAndCount(ctx, lanes[w], seqs[w], []strategy.Check{{
			Namespace: ns, Key: k, Cost: 1, Now: now, Limits: []strategy.CheckLimit{checkLimit},
		}})
		if err != nil {
			return err
		}
		return judge(1, res[0].Allowed)
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
	denied[0].Store(0)
	denied[1].Store(0)
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
	if op == "log" {
		b.ReportMetric(100*(1-float64(denied[0].Load())/decisions), "admitted-%")
		b.ReportMetric(100*(1-float64(denied[1].Load())/decisions), "uncoalesced-admitted-%")
	}
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
			start := arith.WindowStart(now, window)
			in := newInstance(t, "exact", frozen(now), ratelimiting.WithSyncTimeout(0, hitTimeout))
			mustNew(t, in, namespace.Config{Name: "sync", SyncRate: namespace.Synchronous, Strategy: be.store, WindowSizes: []time.Duration{window}, Clock: namespace.NodeClock})

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
