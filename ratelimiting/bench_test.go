package ratelimiting_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/puzpuzpuz/xsync/v3"
	"golang.org/x/time/rate"

	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
	"github.com/ratesync/ratesync/strategy/memory"
)

// Benchmarks of the hot path. Each reports its ratio to the baselines,
// measured in the same run (testing.Benchmark, once per process):
//
//	x-floor: ns/op over BenchmarkBaselineMapAtomic (xsync MapOf.Load plus an
//	         atomic add: the least an increment of a shared counter costs);
//	x-xrate: ns/op over BenchmarkBaselineXTimeRate (x/time/rate Allow);
//	x-sliding (BenchmarkAlgorithms): ns/op over the same call with a plain
//	         sliding window limit.
//
// They use the default coarse clock, as production does.

// measure returns the ns per call of op run by procs goroutines, timed
// over at least 100ms (BenchmarkIncrementScaling). Goroutine p makes the
// calls op(p, i) for i = 0, 1, ...
func measure(procs int, op func(p, i int)) float64 {
	for n := 1 << 12; ; n *= 4 {
		var wg sync.WaitGroup
		start := time.Now()
		for p := range procs {
			wg.Go(func() {
				for i := range n {
					op(p, i)
				}
			})
		}
		wg.Wait()
		if d := time.Since(start); d > 100*time.Millisecond {
			return float64(d.Nanoseconds()) / float64(n*procs)
		}
	}
}

// The baselines, run interleaved with each benchmark's operation.
var (
	floorMap  = xsync.NewMapOf[string, *atomic.Int64]()
	floorKeys = benchKeys(1000)
	xrate     = rate.NewLimiter(1e12, 1)
)

func init() {
	for _, k := range floorKeys {
		floorMap.Store(k, new(atomic.Int64))
	}
}

// aluSink keeps BenchmarkIncrementScaling's ALU baseline from being
// optimized away: one cache line per goroutine.
var aluSink [2]struct {
	v uint64
	_ [56]byte
}

func floorOp(i int) {
	c, _ := floorMap.Load(floorKeys[i%len(floorKeys)])
	c.Add(1)
}

func floorOne(int) {
	c, _ := floorMap.Load(floorKeys[42])
	c.Add(1)
}

func xrateOp(int) { xrate.Allow() }

// chunk is how many calls of one kind run in a row when a benchmark
// interleaves its operation with the baselines.
const chunk = 256

// interleaved runs op, the floor and (when not parallel) x/time/rate in
// alternating chunks, so that all three see the same machine, and reports
// ns per call of each (ns/op-self, ns/op-floor, ns/op-xrate) and op's
// ratios (x-floor, x-xrate). Go's own ns/op covers the three together.
// parallel runs GOMAXPROCS goroutines, op and the floor over 1,000 keys.
func interleaved(b *testing.B, parallel bool, op func(i int)) {
	interleavedWith(b, parallel, op, nil)
}

// interleavedWith is interleaved with one more baseline in the rotation
// when ref is not nil (not parallel): it reports ns/op-sliding, ref's ns
// per call, and x-sliding, op's time over ref's.
func interleavedWith(b *testing.B, parallel bool, op, ref func(i int)) {
	var self, floor, xr, rf atomic.Int64
	run := func(i0, n int, one func(i int), into *atomic.Int64) {
		t0 := time.Now()
		for i := i0; i < i0+n; i++ {
			one(i)
		}
		into.Add(int64(time.Since(t0)))
	}
	b.ReportAllocs()
	if parallel {
		var seed atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			base := int(seed.Add(1)) * 7919
			for i := 0; ; i += chunk {
				for j := 0; j < chunk; j++ {
					if !pb.Next() {
						return
					}
				}
				run(base+i, chunk, op, &self)
				run(base+i, chunk, floorOp, &floor)
			}
		})
	} else {
		for i := 0; i < b.N; i += chunk {
			run(i, chunk, op, &self)
			run(i, chunk, floorOne, &floor)
			if ref != nil { // after a baseline, as op is: neither follows the other
				run(i, chunk, ref, &rf)
			}
			run(i, chunk, xrateOp, &xr)
		}
	}
	b.StopTimer()
	calls := float64(b.N)
	b.ReportMetric(float64(self.Load())/calls, "ns/op-self")
	b.ReportMetric(float64(self.Load())/float64(floor.Load()), "x-floor")
	if !parallel {
		b.ReportMetric(float64(self.Load())/float64(xr.Load()), "x-xrate")
	}
	if ref != nil && !parallel {
		b.ReportMetric(float64(rf.Load())/calls, "ns/op-sliding")
		b.ReportMetric(float64(self.Load())/float64(rf.Load()), "x-sliding")
	}
}

func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%015d", i) // 20 bytes
	}
	return keys
}

func benchInstance(b *testing.B, cfg namespace.Config, opts ...ratelimiting.Option) *ratelimiting.Instance {
	b.Helper()
	in := ratelimiting.NewInstance("bench", append([]ratelimiting.Option{quiet}, opts...)...)
	b.Cleanup(func() { _ = in.Close(context.Background()) })
	if err := in.New(cfg); err != nil {
		b.Fatal(err)
	}
	return in
}

// BaselineMapAtomic is the floor: find a counter in an xsync map and add to
// it atomically.
func BenchmarkBaselineMapAtomic(b *testing.B) {
	m := xsync.NewMapOf[string, *atomic.Int64]()
	m.Store("user:000000000000042", new(atomic.Int64))
	b.ReportAllocs()
	for b.Loop() {
		c, _ := m.Load("user:000000000000042")
		c.Add(1)
	}
}

// BaselineXTimeRate is golang.org/x/time/rate's Limiter.Allow.
func BenchmarkBaselineXTimeRate(b *testing.B) {
	l := rate.NewLimiter(rate.Inf, 1)
	l.SetLimit(1e12)
	b.ReportAllocs()
	for b.Loop() {
		l.Allow()
	}
}

func BenchmarkIncrementExisting(b *testing.B) {
	b.Run("one-key", func(b *testing.B) {
		in := benchInstance(b, local("ns", time.Minute))
		ctx := context.Background()
		in.Increment(ctx, "ns", "user:000000000000042", time.Minute, 1)
		b.ResetTimer()
		interleaved(b, false, func(int) { in.Increment(ctx, "ns", "user:000000000000042", time.Minute, 1) })
	})
	b.Run("parallel-1000-keys", func(b *testing.B) {
		in := benchInstance(b, local("ns", time.Minute))
		ctx := context.Background()
		keys := benchKeys(1000)
		for _, k := range keys {
			in.Increment(ctx, "ns", k, time.Minute, 1)
		}
		b.ResetTimer()
		interleaved(b, true, func(i int) { in.Increment(ctx, "ns", keys[i%len(keys)], time.Minute, 1) })
	})
}

func BenchmarkSlidingWindow(b *testing.B) {
	in := benchInstance(b, local("ns", time.Minute))
	ctx := context.Background()
	in.Increment(ctx, "ns", "user:000000000000042", time.Minute, 1)
	b.ResetTimer()
	interleaved(b, false, func(int) { in.SlidingWindow(ctx, "ns", "user:000000000000042", time.Minute) })
}

func BenchmarkAllow3Limits(b *testing.B) {
	in := benchInstance(b, local("ns", time.Second, time.Minute, time.Hour))
	ctx := context.Background()
	limits := []ratelimiting.Limit{
		{Limit: 1e12, Window: time.Second},
		{Limit: 1e12, Window: time.Minute},
		{Limit: 1e12, Window: time.Hour, Fixed: true},
	}
	b.ResetTimer()
	interleaved(b, false, func(int) { in.Allow(ctx, "ns", "user:000000000000042", 1, limits...) })
}

// IncrementScaling runs the increment with GOMAXPROCS 1 and 2 (as many
// goroutines) and reports the throughput speedup from 1 to 2, beside two
// baselines measured the same way in the same run: the floor's speedup
// (MapOf.Load and an atomic add, on keys of its own chosen as the
// increment's) and the ALU's (arithmetic on registers, nothing in memory
// shared: whether the machine gave two cores at all). Cases:
//
//	1000-keys         each goroutine increments keys of its own: with 2,
//	                  each has a block of 500 of the 1,000 (distinct keys
//	                  per core);
//	1000-keys-shared  every goroutine increments all 1,000 keys, so each
//	                  counter's cache line moves between the cores;
//	one-key           every goroutine increments one hot key.
//
// The speedup of the first is the hot path's own: nothing the cores share
// is written. The other two show what contention costs; their floors pay
// the same.
func BenchmarkIncrementScaling(b *testing.B) {
	for _, c := range []struct {
		name   string
		keys   int
		shared bool
	}{{"1000-keys", 1000, false}, {"1000-keys-shared", 1000, true}, {"one-key", 1, true}} {
		b.Run(c.name, func(b *testing.B) {
			in := benchInstance(b, local("ns", time.Minute))
			ctx := context.Background()
			keys := benchKeys(c.keys)
			for _, k := range keys {
				in.Increment(ctx, "ns", k, time.Minute, 1)
			}
			// index returns the key of goroutine p's i-th call among
			// procs, in a scattered order: any of the keys when they are
			// shared, else one of the p-th block of keys/procs (keys made
			// one after another: a block's counters share no cache line
			// with another block's but at its ends).
			index := func(procs, p, i int) int {
				if c.shared {
					return (i*7919 + p*c.keys/2) % c.keys
				}
				per := c.keys / procs
				return p*per + (i*7919)%per
			}
			var procs int
			increment := func(p, i int) {
				in.Increment(ctx, "ns", keys[index(procs, p, i)], time.Minute, 1)
			}
			floor := func(p, i int) {
				ctr, _ := floorMap.Load(floorKeys[index(procs, p, i)])
				ctr.Add(1)
			}
			alu := func(p, i int) {
				x := uint64(i)
				for range 32 {
					x = x*6364136223846793005 + 1442695040888963407
				}
				aluSink[p].v += x
			}
			run := func(n int, op func(p, i int)) float64 {
				prev := runtime.GOMAXPROCS(n)
				defer runtime.GOMAXPROCS(prev)
				procs = n
				return measure(n, op)
			}
			// Alternate the settings and keep each one's median, so that a
			// load on the machine weighs on all alike.
			var ones, twos, fones, ftwos, aones, atwos []float64
			for b.Loop() {
				for range 5 {
					ones, twos = append(ones, run(1, increment)), append(twos, run(2, increment))
					fones, ftwos = append(fones, run(1, floor)), append(ftwos, run(2, floor))
					aones, atwos = append(aones, run(1, alu)), append(atwos, run(2, alu))
				}
			}
			median := func(xs []float64) float64 { slices.Sort(xs); return xs[len(xs)/2] }
			one, two := median(ones), median(twos)
			fone, ftwo := median(fones), median(ftwos)
			b.ReportMetric(median(aones)/median(atwos), "alu-speedup")
			b.ReportMetric(one, "ns/op-1cpu")
			b.ReportMetric(two, "ns/op-2cpu")
			b.ReportMetric(one/two, "speedup")
			b.ReportMetric(fone/ftwo, "floor-speedup")
			b.ReportMetric((one/two)/(fone/ftwo), "x-floor-speedup")
		})
	}
}

// BucketAllowOne is a token bucket's decision on an existing key of a
// local namespace (AllowOne: no Decision slice), against x/time/rate's
// Allow, a mutex-guarded token bucket, in the same run (x-xrate).
func BenchmarkBucketAllowOne(b *testing.B) {
	in := benchInstance(b, local("ns", time.Second))
	ctx := context.Background()
	l := ratelimiting.Limit{Limit: 1e12, Window: time.Second, Algorithm: ratelimiting.TokenBucket, Burst: 1e6}
	b.ResetTimer()
	interleaved(b, false, func(int) { in.AllowOne(ctx, "ns", "user:000000000000042", 1, l) })
}

// BucketAllow is the same decision through Allow, whose Decision holds a
// slice of limit states (one allocation).
func BenchmarkBucketAllow(b *testing.B) {
	in := benchInstance(b, local("ns", time.Second))
	ctx := context.Background()
	l := ratelimiting.Limit{Limit: 1e12, Window: time.Second, Algorithm: ratelimiting.TokenBucket, Burst: 1e6}
	b.ResetTimer()
	interleaved(b, false, func(int) { in.Allow(ctx, "ns", "user:000000000000042", 1, l) })
}

// BenchmarkAlgorithms is one decision of cost 1 on an existing key of a
// local namespace for each algorithm, through AllowOne and through Allow.
// Beside the floor and x/time/rate, its rotation holds a third baseline:
// the same call with a plain sliding window limit (1 min, never reached) on
// an Instance of its own (ns/op-sliding, x-sliding). Each Instance has a
// clock of its own that every one of its decisions first steps by 1 ms,
// the measured one's and the sliding window's alike, so that:
//
//	sliding-window      is the baseline against itself (x-sliding near 1);
//	sliding-log-100     a log of limit 100 over 100 ms admits each hit at a
//	                    millisecond of its own and holds 100 entries: every
//	                    hit trims the oldest and appends one, leaving the
//	                    key at its limit (Remaining 0);
//	sliding-log-10000   the same at the largest limit, 10,000 over 10 s;
//	anchored            an anchored window of 1 min, never full, opened
//	                    anew every 60,000 hits;
//	precision-10s-of-1m a sliding window of 1 min counted in 10 s
//	                    sub-windows (1/6 of the window): 7 counters read.
//
// The logs are filled before the timer starts. The last decision before
// the timed loop, the last after it and the last after counting
// allocations must be allowed, and a log's must leave it full (Rate =
// Limit), or the benchmark fails. allocs/op-self is the measured call's own allocations
// (testing.AllocsPerRun after the timed loop); Go's allocs/op counts the
// whole rotation. Allow gets a slice of limits made once: limits passed
// one by one make a new slice, which escapes, at every call.
func BenchmarkAlgorithms(b *testing.B) {
	type alg struct {
		name  string
		sizes []time.Duration // the namespace's window sizes
		limit ratelimiting.Limit
		fill  int // decisions before the timer starts
	}
	sliding := ratelimiting.Limit{Limit: 1e12, Window: time.Minute}
	algs := []alg{
		{"sliding-window", []time.Duration{time.Minute}, sliding, 1},
		{"sliding-log-100", []time.Duration{time.Minute}, ratelimiting.Limit{Limit: 100, Window: 100 * time.Millisecond, Algorithm: ratelimiting.SlidingLog}, 200},
		{"sliding-log-10000", []time.Duration{time.Minute}, ratelimiting.Limit{Limit: 10_000, Window: 10 * time.Second, Algorithm: ratelimiting.SlidingLog}, 20_000},
		{"anchored", []time.Duration{time.Minute}, ratelimiting.Limit{Limit: 1e12, Window: time.Minute, Algorithm: ratelimiting.AnchoredWindow}, 1},
		{"precision-10s-of-1m", []time.Duration{10 * time.Second}, ratelimiting.Limit{Limit: 1e12, Window: time.Minute, Precision: 10 * time.Second}, 1},
	}
	const key = "user:000000000000042"
	for _, api := range []string{"AllowOne", "Allow"} {
		for _, a := range algs {
			b.Run(api+"/"+a.name, func(b *testing.B) {
				op, last := stepped(b, api, a.sizes, a.limit, key)
				ref, _ := stepped(b, api, []time.Duration{time.Minute}, sliding, key)
				for i := range a.fill {
					op(i)
				}
				ref(0)
				check := func(when string) {
					st := *last
					if !st.Allowed || a.limit.Algorithm == ratelimiting.SlidingLog && st.Rate != a.limit.Limit {
						b.Fatalf("%s: %+v, want allowed (and a log full, rate %v)", when, st, a.limit.Limit)
					}
				}
				check("after the fill")
				b.ResetTimer()
				interleavedWith(b, false, op, ref)
				check("after the run")
				b.ReportMetric(testing.AllocsPerRun(1000, func() { op(0) }), "allocs/op-self")
				check("after counting allocations")
			})
		}
	}
}

// stepped returns a decision of cost 1 on key against l through api
// (AllowOne or Allow), on a local Instance of its own whose clock the
// decision first steps by 1 ms, and where it leaves the limit's state.
func stepped(b *testing.B, api string, sizes []time.Duration, l ratelimiting.Limit, key string) (op func(int), last *ratelimiting.LimitState) {
	clk := newClock(t0)
	in := benchInstance(b, local("ns", sizes...), ratelimiting.WithClock(clk.Now))
	ctx := context.Background()
	last = new(ratelimiting.LimitState)
	if api == "AllowOne" {
		return func(int) {
			clk.Advance(time.Millisecond)
			st, err := in.AllowOne(ctx, "ns", key, 1, l)
			if err != nil {
				b.Fatal(err)
			}
			*last = st
		}, last
	}
	limits := []ratelimiting.Limit{l} // made once, as BenchmarkAllow3Limits's
	return func(int) {
		clk.Advance(time.Millisecond)
		d, err := in.Allow(ctx, "ns", key, 1, limits...)
		if err != nil {
			b.Fatal(err)
		}
		*last = d.Limits[0]
	}, last
}

// BenchmarkLeasedAllowOne is a decision served from a held lease against
// the same decision on a local-only namespace (x-local: leased over local,
// in alternating chunks of one run), for a sliding window, a fixed window
// and a token bucket of a capacity no run reaches: grants come from the
// memory store, sized up as the key proves hot, so almost every decision
// is the lease's compare-and-swap.
func BenchmarkLeasedAllowOne(b *testing.B) {
	for _, l := range []ratelimiting.Limit{
		{Limit: 1e12, Window: time.Minute},
		{Limit: 1e12, Window: time.Minute, Algorithm: ratelimiting.FixedWindow},
		// A bucket's grant holds while it refills less than the grant:
		// a rate of 1e6 a minute refills 1,000 units in 60 ms.
		{Limit: 1e6, Window: time.Minute, Algorithm: ratelimiting.TokenBucket, Burst: 1e12},
	} {
		b.Run(l.Algorithm.String(), func(b *testing.B) {
			const key = "user:000000000000042"
			leased := benchInstance(b, namespace.Config{Name: "ns", SyncRate: time.Second, Strategy: memory.New(), Leases: true,
				WindowSizes: []time.Duration{time.Minute}})
			plain := benchInstance(b, local("ns", time.Minute))
			ctx := context.Background()
			op := func(in *ratelimiting.Instance) func(int) {
				return func(int) {
					if st, err := in.AllowOne(ctx, "ns", key, 1, l); err != nil || !st.Allowed {
						b.Fatalf("%+v, %v", st, err)
					}
				}
			}
			self, ref := op(leased), op(plain)
			for i := range 100 { // the lease grows to the key's rate
				self(i)
				ref(i)
			}
			var ts, tr time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i += chunk {
				t0 := time.Now()
				for j := i; j < i+chunk; j++ {
					self(j)
				}
				t1 := time.Now()
				for j := i; j < i+chunk; j++ {
					ref(j)
				}
				ts, tr = ts+t1.Sub(t0), tr+time.Since(t1)
			}
			b.StopTimer()
			b.ReportMetric(float64(ts)/float64(b.N), "ns/op-leased")
			b.ReportMetric(float64(tr)/float64(b.N), "ns/op-local")
			b.ReportMetric(float64(ts)/float64(tr), "x-local")
			for _, st := range leased.Stats() {
				b.ReportMetric(float64(st.Leases.StoreCalls)*100/float64(b.N+100), "store-calls/100")
			}
			b.ReportMetric(testing.AllocsPerRun(1000, func() { self(0) }), "allocs/op-leased")
		})
	}
}
