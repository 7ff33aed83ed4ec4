package integration

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/arith"
	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
)

// Once traffic stops, within two sync intervals every node reports the
// same rate for every key, equal to the true total.
func TestConvergence(t *testing.T) {
	const (
		nodes    = 3
		keys     = 30
		syncRate = 200 * time.Millisecond
	)
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			c := newCluster(t, ClusterConfig{Nodes: nodes, SyncRate: syncRate, Strategy: st.open(t), WindowSizes: []time.Duration{time.Hour}})
			ctx := context.Background()
			want := make([]float64, keys)
			var wg sync.WaitGroup
			for n, in := range c.Nodes {
				wg.Go(func() {
					for i := range 600 { // every node hits every key
						k := i % keys
						if _, err := in.Increment(ctx, c.Namespace(), KeyName(k), time.Hour, float64(n+1)); err != nil {
							t.Error(err)
							return
						}
						if i%60 == 0 {
							time.Sleep(20 * time.Millisecond)
						}
					}
				})
			}
			wg.Wait()
			for n := range nodes {
				for i := range 600 {
					want[i%keys] += float64(n + 1)
				}
			}
			took := eventually(t, 2*syncRate+time.Second, "every node reports every key's true total", func() bool {
				for _, in := range c.Nodes {
					for k := range keys {
						w, err := in.SlidingWindow(ctx, c.Namespace(), KeyName(k), time.Hour)
						if err != nil || w.Current != want[k] {
							return false
						}
					}
				}
				return true
			})
			t.Logf("%s: %d nodes converged on %d keys %v after the traffic stopped (sync interval %v)", st.name, nodes, keys, took.Round(time.Millisecond), syncRate)
		})
	}
}

// In periodic mode the hits admitted per window stay within L + λ·T: λ the
// key's offered rate, T the sync interval plus the store round trip
// (reference/numbers.md section 2).
func TestPeriodicOverAdmissionBound(t *testing.T) {
	const (
		limit  = 100
		window = 5 * time.Second
		rate   = 100.0 // offered hits per second on one key
	)
	store := redisStore(t)
	d := rtt(t, store)
	for _, nodes := range []int{2, 4} {
		for _, sync := range []time.Duration{100 * time.Millisecond, time.Second} {
			t.Run(fmt.Sprintf("%d nodes, sync %v", nodes, sync), func(t *testing.T) {
				t.Parallel() // light load: four runs at once keep the test short
				c := newCluster(t, ClusterConfig{Nodes: nodes, Namespace: fmt.Sprintf("bound-%d-%d", nodes, sync.Milliseconds()), SyncRate: sync, Strategy: store, WindowSizes: []time.Duration{window}})
				res, err := Run(context.Background(), c, Load{
					Rate: rate, Duration: 2 * window, Start: nextBoundary(window), Seed: uint64(nodes),
					Limits: []ratelimiting.Limit{{Limit: limit, Window: window, Fixed: true}},
				})
				if err != nil {
					t.Fatal(err)
				}
				noErrors(t, res)
				bound := limit + rate*(sync+d).Seconds()
				max := res.MaxPerWindow(window)
				t.Logf("%d nodes, sync %v, rtt %v: max admitted per %v window %d (limit %d, over %.0f%%); bound L+λT = %.1f",
					nodes, sync, d.Round(10*time.Microsecond), window, max, limit, 100*float64(max-limit)/limit, bound)
				if max < limit {
					t.Fatalf("max admitted %d < limit %d: the load did not reach the limit", max, limit)
				}
				if float64(max) > bound {
					t.Fatalf("max admitted %d per window > bound %.1f", max, bound)
				}
			})
		}
	}
}

// Synchronous mode, 4 nodes, 32 concurrent callers: admitted per window
// never exceeds L, because the check and the count are one atomic step in
// the store.
func TestSynchronousNeverExceedsTheLimit(t *testing.T) {
	const (
		limit  = 100
		window = 2 * time.Second
	)
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			c := newCluster(t, ClusterConfig{Nodes: 4, SyncRate: namespace.Synchronous, Strategy: st.open(t), WindowSizes: []time.Duration{window}})
			for _, fixed := range []bool{true, false} {
				res, err := Run(context.Background(), c, Load{
					Rate: 400, Duration: 3 * window, Workers: 32, Spread: Random, Start: nextBoundary(window), Seed: 7,
					Limits: []ratelimiting.Limit{{Limit: limit, Window: window, Fixed: fixed}},
				})
				if err != nil {
					t.Fatal(err)
				}
				noErrors(t, res)
				if fixed {
					// By the window each hit was counted in: one asked just
					// before a window's end may be counted in the next. The
					// instant that window's end and the node's Reset give
					// falls between the asking and the answer (within the
					// nodes' clock error), or the attribution is wrong.
					moved := 0
					for _, d := range res.Decisions {
						if !d.Allowed {
							continue
						}
						s := d.DecidedWindow(window)
						if at := s.Add(window - d.Reset); at.Before(d.At.Add(-clockSlack)) || at.After(d.At.Add(d.Latency+clockSlack)) {
							t.Fatalf("a hit asked at %v and answered %v later was counted in the window starting %v, %v before its end", d.At, d.Latency, s, d.Reset)
						}
						if !s.Equal(arith.WindowStart(d.At, window)) {
							moved++
						}
					}
					windows := res.PerDecidedWindow(window)
					for _, w := range windows {
						if w.Admitted > limit {
							t.Fatalf("window %v admitted %d > limit %d", w.Start, w.Admitted, limit)
						}
					}
					t.Logf("%s, fixed: per-window admissions %v (limit %d, offered %d per window); %d admitted hits counted in another window than the one they were asked in", st.name, admissions(windows), limit, int(400*window.Seconds()), moved)
					continue
				}
				// Sliding: in any span of one window, at most 2L-1 (the
				// sliding counter's own approximation, one node or many).
				if got := maxInSpan(res, window); got > 2*limit-1 {
					t.Fatalf("sliding: %d admitted within one window span, want <= %d", got, 2*limit-1)
				}
			}
		})
	}
}

// clockSlack bounds how far a node's namespace clock (the store's, by
// its measured offset) may be from the true clock in these tests, where
// the store runs on the same host: the offset's error, and up to 100 ms
// that the clock may stand still after a lower estimate (syncer).
const clockSlack = 250 * time.Millisecond

func admissions(ws []WindowCount) []int {
	out := make([]int, len(ws))
	for i, w := range ws {
		out[i] = w.Admitted
	}
	return out
}

func maxInSpan(res *Result, span time.Duration) int {
	var ts []time.Time
	for _, d := range res.Decisions {
		if d.Allowed {
			ts = append(ts, d.At)
		}
	}
	best, j := 0, 0
	for i := range ts {
		for ts[i].Sub(ts[j]) >= span {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

// One node's clock runs 1.5 s ahead of the others. Counting on the node's
// clock (Clock: NodeClock), its hits land in windows the others have not
// reached yet; counting on the store's (the default), in the store's
// windows, as the others' do. Measured and printed; the bound asserted is
// L + λ·(T + skew) on the node's clock, and L + λ·(T + RTT) (no skew) on
// the store's.
func TestClockSkew(t *testing.T) {
	const (
		limit    = 100
		window   = 5 * time.Second
		rate     = 100.0
		skew     = 1500 * time.Millisecond
		syncRate = 250 * time.Millisecond
	)
	store := redisStore(t)
	d := rtt(t, store)
	results := map[string]int{}
	cases := []struct {
		name  string
		skew  time.Duration
		clock namespace.Clock
	}{
		{"no skew", 0, namespace.StoreClock},
		{"node 2 at +1.5s, node clock", skew, namespace.NodeClock},
		{"node 2 at +1.5s, store clock", skew, namespace.StoreClock},
	}
	for i, tc := range cases {
		cfg := ClusterConfig{Nodes: 3, Namespace: fmt.Sprintf("skew-%d", i), SyncRate: syncRate, Strategy: store,
			WindowSizes: []time.Duration{window}, Skew: []time.Duration{0, 0, tc.skew}, Clock: tc.clock}
		c := newCluster(t, cfg)
		measuredOffsets(t, c)
		res, err := Run(context.Background(), c, Load{
			Rate: rate, Duration: 3 * window, Start: nextBoundary(window), Seed: 11,
			Limits: []ratelimiting.Limit{{Limit: limit, Window: window, Fixed: true}},
		})
		if err != nil {
			t.Fatal(err)
		}
		noErrors(t, res)
		ws := res.PerWindow(window)
		results[tc.name] = res.MaxPerWindow(window)
		t.Logf("%s: admitted per true %v window %v (limit %d)", tc.name, window, admissions(ws), limit)
	}
	skewBound := limit + rate*(syncRate+d+skew).Seconds()
	bound := limit + rate*(syncRate+d).Seconds()
	t.Logf("clock skew: max per window %d without skew; with one node 1.5s ahead, %d on the node's clock (bound L+λ(T+skew) = %.1f), %d on the store's (bound L+λ(T+RTT) = %.1f)",
		results[cases[0].name], results[cases[1].name], skewBound, results[cases[2].name], bound)
	if got := results[cases[1].name]; float64(got) > skewBound {
		t.Fatalf("with skew, node clock: %d > %.1f", got, skewBound)
	}
	if got := results[cases[2].name]; float64(got) > bound {
		t.Fatalf("with skew, store clock: %d > %.1f", got, bound)
	}
}

// Faults between the nodes and the store (latency, replies lost after the
// store applied them, connection resets during pushes): totals exact, no
// double count, no loss.
func TestNetworkFaults(t *testing.T) {
	r := testenvRedis(t)
	proxy := newProxy(t, r.Addr)
	store := redisStoreVia(t, r, proxy)
	c := newCluster(t, ClusterConfig{Nodes: 3, SyncRate: 100 * time.Millisecond, Strategy: store, WindowSizes: []time.Duration{time.Hour}})
	ctx, cancel := context.WithCancel(context.Background())
	var faults sync.WaitGroup
	faults.Go(func() {
		steps := []func(){
			func() { proxy.SetLatency(200 * time.Millisecond) },
			func() { proxy.SetLatency(0) },
			func() { proxy.DropReplies(3) },
			func() { proxy.Reset() },
			func() { proxy.DropReplies(2) },
			func() { proxy.Reset() },
		}
		for _, step := range steps {
			select {
			case <-ctx.Done():
				return
			case <-time.After(400 * time.Millisecond):
			}
			step()
		}
	})
	res, err := Run(ctx, c, Load{
		Rate: 300, Keys: 20, Spread: Random, Duration: 3 * time.Second, Seed: 3,
		Limits: []ratelimiting.Limit{{Limit: 1e9, Window: time.Hour}},
	})
	cancel()
	faults.Wait()
	if err != nil {
		t.Fatal(err)
	}
	noErrors(t, res)
	proxy.SetLatency(0)
	if err := c.Close(context.Background()); err != nil { // final pushes
		t.Fatalf("final sync: %v", err)
	}
	// Each key's count, summed over the hour windows the run's hits may
	// have been counted in.
	starts := res.WindowStarts(time.Hour, clockSlack)
	total, stored := 0.0, 0.0
	for key, n := range res.AdmittedPerKey() {
		got := 0.0
		for _, start := range starts {
			v, err := store.GetWindow(context.Background(), c.Namespace(), KeyName(key), start, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			got += v
		}
		if got != n {
			t.Errorf("%s: store %v, admitted %v", KeyName(key), got, n)
		}
		total, stored = total+n, stored+got
	}
	t.Logf("network faults: %v admitted, %v in the store (latency 200ms, 5 lost replies, 2 resets)", total, stored)
	if total != stored {
		t.Fatalf("store total %v != admitted %v", stored, total)
	}
}

// Four nodes, 32 workers, a token bucket decided in the store: at no point
// has the cluster admitted more than the bucket allows (its capacity plus
// what refilled since the first admission), and it admits what it allows.
func TestSynchronousBucketNeverExceeds(t *testing.T) {
	const (
		rate  = 50 // per second
		burst = 20
	)
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			c := newCluster(t, ClusterConfig{Nodes: 4, SyncRate: namespace.Synchronous, Strategy: st.open(t), WindowSizes: []time.Duration{time.Second}})
			// The largest clock offset any node applied during the run:
			// its estimate changes as samples come (see below).
			var offset time.Duration
			stop, polled := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(polled)
				tick := time.NewTicker(time.Millisecond)
				defer tick.Stop()
				for {
					for _, in := range c.Nodes {
						offset = max(offset, in.Stats()[0].Sync.ClockOffset.Abs())
					}
					select {
					case <-stop:
						return
					case <-tick.C:
					}
				}
			}()
			res, err := Run(context.Background(), c, Load{
				Rate: 400, Duration: 3 * time.Second, Workers: 32, Spread: Random, Seed: 11,
				Limits: []ratelimiting.Limit{{Limit: rate, Window: time.Second, Algorithm: ratelimiting.TokenBucket, Burst: burst}},
			})
			close(stop)
			<-polled
			if err != nil {
				t.Fatal(err)
			}
			noErrors(t, res)
			// A node decided each admission between the call (At) and its
			// answer (At + Latency), on its clock truncated to the
			// millisecond: by the k-th answer, the bucket has let through at
			// most its capacity plus what refilled since the millisecond of
			// the first call that was admitted.
			var first time.Time
			var ends []time.Time
			for _, d := range res.Decisions {
				if d.Allowed {
					if at := d.At.Truncate(time.Millisecond); first.IsZero() || at.Before(first) {
						first = at
					}
					ends = append(ends, d.At.Add(d.Latency))
				}
			}
			slices.SortFunc(ends, func(a, b time.Time) int { return a.Compare(b) })
			if len(ends) == 0 {
				t.Fatal("nothing admitted")
			}
			// The nodes count on the store's clock (the default), each
			// with its estimate of the store's offset from it; the store
			// runs on this host, so an estimate is its own error. Two
			// admissions from two nodes can so be apart in the store's
			// reckoning by up to both nodes' errors more than they were
			// in truth: twice the largest estimate seen, and 10ms more for
			// the milliseconds the nodes truncate to (half a token here).
			ahead := 2*offset + 10*time.Millisecond
			for k, end := range ends {
				if allowed := burst + rate*(end.Sub(first)+ahead).Seconds(); float64(k+1) > allowed {
					t.Fatalf("%d admitted by %v after the first call, the bucket allows %.1f", k+1, end.Sub(first), allowed)
				}
			}
			span := ends[len(ends)-1].Sub(first).Seconds()
			if want := burst + rate*span; float64(len(ends)) < 0.9*want {
				t.Fatalf("%d admitted over %.2fs, the bucket allows %.0f: it denies what it should admit", len(ends), span, want)
			}
			t.Logf("%s: %d admitted over %.2fs (bucket: %d + %d/s)", st.name, len(ends), span, burst, rate)
		})
	}
}
