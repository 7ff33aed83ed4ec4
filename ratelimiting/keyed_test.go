package ratelimiting_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/strategytest"
	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
	"github.com/ratesync/ratesync/strategy/memory"
)

func TestAnchoredWindow(t *testing.T) {
	for _, mode := range []string{"local", "synchronous"} {
		t.Run(mode, func(t *testing.T) {
			clk := newClock(t0.Add(123 * time.Millisecond))
			in := instanceIn(t, clk, mode)
			l := ratelimiting.Limit{Limit: 3, Window: time.Second, Algorithm: ratelimiting.AnchoredWindow}
			if d := allow(t, in, "ns", "k", 0, l); !d.Allowed || d.Limits[0].Reset != 0 || d.Limits[0].Remaining != 3 {
				t.Fatalf("a peek on a new key: %+v, want no window", d)
			}
			clk.Advance(100 * time.Millisecond)
			if d := allow(t, in, "ns", "k", 0, l); d.Limits[0].Reset != 0 {
				t.Fatalf("a peek opened a window: %+v", d)
			}
			d := allow(t, in, "ns", "k", 1, l) // opens [a, a+1s)
			if !d.Allowed || d.Limits[0].Reset != time.Second || d.Limits[0].Remaining != 2 || d.Limits[0].Rate != 1 {
				t.Fatalf("first hit: %+v, want allowed, reset 1s, 2 remaining", d)
			}
			clk.Advance(400 * time.Millisecond)
			allow(t, in, "ns", "k", 2, l)
			d = allow(t, in, "ns", "k", 1, l)
			if d.Allowed || d.RetryAfter != 600*time.Millisecond || d.Limits[0].Reset != 600*time.Millisecond {
				t.Fatalf("over the limit: %+v, want denied, retry after 600ms", d)
			}
			clk.Advance(599 * time.Millisecond)
			if d := allow(t, in, "ns", "k", 1, l); d.Allowed || d.RetryAfter != time.Millisecond {
				t.Fatalf("1 ms before the window closes: %+v", d)
			}
			clk.Advance(time.Millisecond)
			if d := allow(t, in, "ns", "k", 3, l); !d.Allowed || d.Limits[0].Reset != time.Second || d.Limits[0].Remaining != 0 {
				t.Fatalf("at the window's end: %+v, want a new window holding 3", d)
			}
		})
	}
}

func TestSlidingLog(t *testing.T) {
	for _, mode := range []string{"local", "synchronous"} {
		t.Run(mode, func(t *testing.T) {
			clk := newClock(t0.Add(77 * time.Millisecond))
			in := instanceIn(t, clk, mode)
			l := ratelimiting.Limit{Limit: 4, Window: time.Second, Algorithm: ratelimiting.SlidingLog}
			allow(t, in, "ns", "k", 1, l)
			allow(t, in, "ns", "k", 1, l)
			clk.Advance(500 * time.Millisecond)
			if d := allow(t, in, "ns", "k", 1.5, l); !d.Allowed || d.Limits[0].Rate != 3.5 || d.Limits[0].Remaining != 0 || d.Limits[0].Reset != time.Second {
				t.Fatalf("third hit: %+v, want rate 3.5, none remaining, reset 1s", d)
			}
			clk.Advance(100 * time.Millisecond)
			d := allow(t, in, "ns", "k", 1, l)
			if d.Allowed || d.RetryAfter != 400*time.Millisecond {
				t.Fatalf("over the limit: %+v, want retry after 400ms (the first hits stop weighing)", d)
			}
			if d := allow(t, in, "ns", "k", 3, l); d.Allowed || d.RetryAfter != 900*time.Millisecond {
				t.Fatalf("cost 3: %+v, want retry after 900ms (both entries gone)", d)
			}
			clk.Advance(399 * time.Millisecond)
			if d := allow(t, in, "ns", "k", 1, l); d.Allowed || d.RetryAfter != time.Millisecond {
				t.Fatalf("1 ms before: %+v", d)
			}
			clk.Advance(time.Millisecond)
			if d := allow(t, in, "ns", "k", 2.5, l); !d.Allowed || d.Limits[0].Rate != 4 {
				t.Fatalf("at RetryAfter: %+v, want allowed, rate 4", d)
			}
		})
	}
}

func TestPrecision(t *testing.T) {
	for _, mode := range []string{"local", "synchronous"} {
		t.Run(mode, func(t *testing.T) {
			clk := newClock(t0.Add(40 * time.Second))
			in := instanceIn(t, clk, mode)
			l := ratelimiting.Limit{Limit: 10, Window: 3 * time.Second, Precision: time.Second}
			// Sub-windows, oldest first: 4, 2, 1, then the current one.
			for _, n := range []float64{4, 2, 1} {
				if d := allow(t, in, "ns", "k", n, l); !d.Allowed {
					t.Fatalf("seeding %v: %+v", n, d)
				}
				clk.Advance(time.Second)
			}
			allow(t, in, "ns", "k", 1, l)
			// 249 ms in: 1 + 1 + 2 + 4*0.751 > 7, so a cost of 3 waits 1 ms.
			clk.Advance(249 * time.Millisecond)
			d := allow(t, in, "ns", "k", 3, l)
			if d.Allowed || d.RetryAfter != time.Millisecond {
				t.Fatalf("1 ms early: %+v, want denied, retry after 1ms", d)
			}
			if st := d.Limits[0]; !near(st.Rate, 7.004) || st.Remaining != 2 || st.Reset != 751*time.Millisecond+3*time.Second {
				t.Fatalf("state %+v, want rate 7.004, 2 remaining, reset 3.751s", st)
			}
			clk.Advance(time.Millisecond)
			if d := allow(t, in, "ns", "k", 3, l); !d.Allowed || d.Limits[0].Rate != 10 {
				t.Fatalf("an exact fit: %+v", d)
			}
			// The precision's counters are the namespace's own windows of 1s.
			if w := slide(t, in, "ns", "k", time.Second); w.Current != 4 || w.Previous != 1 {
				t.Fatalf("SlidingWindow(1s): %+v, want current 4, previous 1", w)
			}
			// Precision equal to the window is Kong's two-window rate.
			kong := ratelimiting.Limit{Limit: 10, Window: time.Second}
			same := ratelimiting.Limit{Limit: 10, Window: time.Second, Precision: time.Second}
			a, b := allow(t, in, "ns", "k", 0, kong), allow(t, in, "ns", "k", 0, same)
			if a.Limits[0].Rate != b.Limits[0].Rate || a.Limits[0].Remaining != b.Limits[0].Remaining {
				t.Fatalf("precision = window: %+v, want Kong's %+v", b.Limits[0], a.Limits[0])
			}
		})
	}
}

// instanceIn returns an instance on clk with namespace "ns" of windows 1s
// and 1m, local-only or synchronous on the memory store.
func instanceIn(t *testing.T, clk *fakeClock, mode string) *ratelimiting.Instance {
	t.Helper()
	in := newInstance(t, clk)
	cfg := local("ns", time.Second, time.Minute)
	if mode == "synchronous" {
		cfg = synced("ns", namespace.Synchronous, memory.New(), time.Second, time.Minute)
	}
	mustNew(t, in, cfg)
	return in
}

func TestKeyedRacesAreExact(t *testing.T) {
	for _, mode := range []string{"local", "synchronous"} {
		for _, a := range []ratelimiting.Algorithm{ratelimiting.AnchoredWindow, ratelimiting.SlidingLog} {
			t.Run(mode+"/"+a.String(), func(t *testing.T) {
				in := instanceIn(t, newClock(t0), mode)
				l := ratelimiting.Limit{Limit: 100, Window: time.Minute, Algorithm: a}
				// With a window limit beside, so that both are taken or neither.
				w := ratelimiting.Limit{Limit: 1000, Window: time.Minute}
				var passed atomic.Int64
				var wg sync.WaitGroup
				for range 8 {
					wg.Go(func() {
						for range 50 {
							d, err := in.Allow(context.Background(), "ns", "k", 1, l, w)
							if err != nil {
								t.Error(err)
								return
							}
							if d.Allowed {
								passed.Add(1)
							}
						}
					})
				}
				wg.Wait()
				if passed.Load() != 100 {
					t.Fatalf("%d of 400 passed, want exactly 100", passed.Load())
				}
				if win := slide(t, in, "ns", "k", time.Minute); win.Current != 100 {
					t.Fatalf("the window beside counted %v, want 100", win.Current)
				}
			})
		}
	}
}

func TestKeyedRefusedInPeriodicNamespaces(t *testing.T) {
	in := newInstance(t, newClock(t0))
	mustNew(t, in, synced("ns", time.Second, memory.New(), time.Minute))
	for a, instead := range map[ratelimiting.Algorithm]string{ratelimiting.SlidingLog: "precision", ratelimiting.AnchoredWindow: "fixed_window"} {
		_, err := in.Allow(context.Background(), "ns", "k", 1, ratelimiting.Limit{Limit: 5, Window: time.Minute, Algorithm: a})
		var ie *ratelimiting.InputError
		if !errors.As(err, &ie) || ie.Field != "limits[0].algorithm" || !strings.Contains(err.Error(), a.String()) || !strings.Contains(err.Error(), instead) {
			t.Errorf("%s in a periodic namespace: %v, want an InputError naming it and %q", a, err, instead)
		}
	}
	// Precision syncs periodically.
	if _, err := in.Allow(context.Background(), "ns", "k", 1, ratelimiting.Limit{Limit: 5, Window: 3 * time.Minute, Precision: time.Minute}); err != nil {
		t.Fatalf("precision in a periodic namespace: %v", err)
	}
}

func TestSynchronousKeyedPeekAsksTheStore(t *testing.T) {
	st := memory.New()
	a, b := instanceOn(t, st), instanceOn(t, st)
	for _, algo := range []ratelimiting.Algorithm{ratelimiting.AnchoredWindow, ratelimiting.SlidingLog} {
		l := ratelimiting.Limit{Limit: 5, Window: time.Minute, Algorithm: algo}
		allow(t, a, "ns", "k", 3, l)
		if d := allow(t, b, "ns", "k", 0, l); d.Limits[0].Remaining != 2 || d.Limits[0].Rate != 3 {
			t.Errorf("%s: a peek on another node: %+v, want the store's 3 counted, 2 remaining", algo, d.Limits[0])
		}
	}
}

// instanceOn returns an instance with a synchronous namespace "ns" on s.
func instanceOn(t *testing.T, s *memory.Store) *ratelimiting.Instance {
	in := newInstance(t, newClock(t0))
	mustNew(t, in, synced("ns", namespace.Synchronous, s, time.Minute))
	return in
}

func TestSynchronousKeyedHitsWhileTheStoreIsDownReachIt(t *testing.T) {
	clk := newClock(t0)
	mem := memory.New()
	store := strategytest.NewFaulty(mem)
	in := newInstance(t, clk)
	// A lone node decides on its own view while down (StoreDownLocal:
	// sharing, a node that reached the store but has not counted the nodes
	// yet refuses).
	cfg := synced("ns", namespace.Synchronous, store, time.Minute)
	cfg.StoreDown = namespace.StoreDownLocal
	mustNew(t, in, cfg)
	other := instanceOn(t, mem)
	for _, algo := range []ratelimiting.Algorithm{ratelimiting.AnchoredWindow, ratelimiting.SlidingLog} {
		l := ratelimiting.Limit{Limit: 10, Window: time.Hour, Algorithm: algo}
		allow(t, in, "ns", "k", 1, l)
		store.SetDown(true)
		for range 3 {
			if d := allow(t, in, "ns", "k", 2, l); !d.Allowed {
				t.Fatalf("%s while down: %+v, want decided locally, allowed", algo, d)
			}
		}
		store.SetDown(false)
		clk.Advance(6 * time.Second) // past the longest back-off
		eventually(t, 5*time.Second, "hits counted while down reach the store", func() bool {
			d := allow(t, other, "ns", "k", 0, l)
			return d.Limits[0].Rate == 7
		})
		// Pushed once: nothing more arrives.
		clk.Advance(6 * time.Second)
		if err := in.Sync(context.Background(), "ns"); err != nil {
			t.Fatal(err)
		}
		if d := allow(t, other, "ns", "k", 0, l); d.Limits[0].Rate != 7 {
			t.Fatalf("%s: the store holds %v, want 7", algo, d.Limits[0].Rate)
		}
	}
}

func TestPeriodicPrecisionReadsTheWholeSpan(t *testing.T) {
	clk := newClock(t0)
	store := memory.New()
	a, b := newInstance(t, clk), newInstance(t, clk)
	for _, in := range []*ratelimiting.Instance{a, b} {
		mustNew(t, in, synced("ns", time.Hour, store, time.Second))
	}
	l := ratelimiting.Limit{Limit: 20, Window: 4 * time.Second, Precision: time.Second}
	// Node a counts 3, 4 and 5 in three sub-windows, pushing each.
	for _, n := range []float64{3, 4, 5} {
		if d := allow(t, a, "ns", "k", n, l); !d.Allowed {
			t.Fatalf("node a, %v: %+v", n, d)
		}
		syncNS(t, a, "ns")
		clk.Advance(time.Second)
	}
	// Node b counted the key in the current sub-window only; its fetch
	// reads the span's five sub-windows.
	clk.Advance(500 * time.Millisecond)
	allow(t, b, "ns", "k", 1, l)
	syncNS(t, b, "ns")
	d := allow(t, b, "ns", "k", 0, l)
	// Sub-windows, newest first: 1, 5, 4, 3, 0 (the oldest, weighted 0.5).
	if st := d.Limits[0]; st.Rate != 13 || st.Remaining != 7 {
		t.Fatalf("node b after a fetch: %+v, want rate 13, 7 remaining", st)
	}
	clk.Advance(time.Second) // sub-windows 0, 1, 5, 4 and 3 at weight 0.5
	allow(t, b, "ns", "k", 0.5, l)
	syncNS(t, b, "ns")
	if st := allow(t, b, "ns", "k", 0, l).Limits[0]; st.Rate != 12 {
		t.Fatalf("a second later: %+v, want rate 0.5 + 1 + 5 + 4 + 3*0.5 = 12", st)
	}
}

// A peek (cost 0) locks a key's anchored windows and logs in the order of
// its limits, and without the key's stripe lock; two requests naming the
// same log and anchored window in the opposite order then each hold one
// slot and wait for the other's. Both orders must finish.
func TestKeyedPeeksInOppositeOrdersDoNotDeadlock(t *testing.T) {
	clk := newClock(t0)
	// Not closed at the end: Close would wait on the deadlocked slots.
	in := ratelimiting.NewInstance(t.Name(), ratelimiting.WithClock(clk.Now), quiet)
	mustNew(t, in, local("ns", time.Minute))
	lg := ratelimiting.Limit{Limit: 100, Window: time.Minute, Algorithm: ratelimiting.SlidingLog}
	an := ratelimiting.Limit{Limit: 100, Window: time.Minute, Algorithm: ratelimiting.AnchoredWindow}
	var wg sync.WaitGroup
	for _, req := range []struct {
		cost   float64
		limits []ratelimiting.Limit
	}{{0, []ratelimiting.Limit{lg, an}}, {0, []ratelimiting.Limit{an, lg}}, {1, []ratelimiting.Limit{lg, an}}} {
		for range 4 {
			wg.Go(func() {
				for range 20000 {
					if _, err := in.Allow(context.Background(), "ns", "k", req.cost, req.limits...); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("requests on one key's log and anchored window in opposite orders deadlocked")
	}
}

// A precision limit's sub-windows are the namespace's own counters of that
// size: hits counted in them before the first precision request (here by
// Increment) weigh in its rate like later ones. Expiry must not have
// dropped them because no precision limit had asked the series to keep
// them yet.
