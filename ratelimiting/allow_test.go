package ratelimiting_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratesync/ratesync/ratelimiting"
)

func allow(t *testing.T, in *ratelimiting.Instance, ns, key string, cost float64, limits ...ratelimiting.Limit) ratelimiting.Decision {
	t.Helper()
	d, err := in.Allow(context.Background(), ns, key, cost, limits...)
	if err != nil {
		t.Fatalf("Allow: %v", err)
	}
	return d
}

func TestAllowCountsOnlyWhatPasses(t *testing.T) {
	clk := newClock(t0)
	in := newInstance(t, clk)
	mustNew(t, in, local("ns", time.Second))
	lim := ratelimiting.Limit{Limit: 3, Window: time.Second, Fixed: true}
	var got []bool
	for range 5 {
		got = append(got, allow(t, in, "ns", "k", 1, lim).Allowed)
	}
	if want := []bool{true, true, true, false, false}; !slices.Equal(got, want) {
		t.Fatalf("decisions %v, want %v", got, want)
	}
	if w := slide(t, in, "ns", "k", time.Second); w.Current != 3 {
		t.Fatalf("counted %v, want 3 (denied requests are not counted)", w.Current)
	}
}

func TestFixedAgainstSliding(t *testing.T) {
	clk := newClock(t0.Add(-time.Minute))
	in := newInstance(t, clk)
	mustNew(t, in, local("ns", time.Minute))
	incr(t, in, "ns", "k", time.Minute, 10)
	clk.Set(t0.Add(15 * time.Second)) // sliding rate 10 * 0.75 = 7.5
	fixed := ratelimiting.Limit{Limit: 10, Window: time.Minute, Fixed: true}
	sliding := ratelimiting.Limit{Limit: 10, Window: time.Minute}
	d := allow(t, in, "ns", "k", 0, fixed, sliding)
	if !d.Allowed || d.Limits[0].Rate != 0 || d.Limits[1].Rate != 7.5 {
		t.Fatalf("peek: %+v, want allowed, fixed rate 0, sliding rate 7.5", d)
	}
	if d.Limits[0].Remaining != 10 || d.Limits[1].Remaining != 2 {
		t.Fatalf("remaining fixed %v sliding %v, want 10 and 2", d.Limits[0].Remaining, d.Limits[1].Remaining)
	}
	// Fixed resets at the window's end; sliding at the end of the next one.
	if d.Limits[0].Reset != 45*time.Second || d.Limits[1].Reset != 45*time.Second {
		t.Fatalf("reset fixed %v sliding %v, want 45s and 45s (only the previous window holds hits)", d.Limits[0].Reset, d.Limits[1].Reset)
	}
	d = allow(t, in, "ns", "k", 2.5, fixed, sliding)
	if !d.Allowed || d.Limits[1].Rate != 10 {
		t.Fatalf("cost 2.5: %+v, want allowed with sliding rate exactly 10", d)
	}
	d = allow(t, in, "ns", "k", 1, fixed, sliding)
	if d.Allowed || !d.Limits[0].Allowed || d.Limits[1].Allowed {
		t.Fatalf("%+v: want denied by the sliding limit only", d)
	}
	// rate = 2.5 + 10 (60 - x)/60 + 1 <= 10 from x = 21 s: 6 s after 15 s.
	if d.RetryAfter != 6*time.Second || d.Limits[1].RetryAfter != d.RetryAfter || d.Limits[0].RetryAfter != 0 {
		t.Fatalf("retry after %v (fixed %v, sliding %v), want 6s (fixed 0, sliding 6s)", d.RetryAfter, d.Limits[0].RetryAfter, d.Limits[1].RetryAfter)
	}
	if d.Limits[1].Reset != 105*time.Second {
		t.Fatalf("sliding reset %v, want 1m45s (end of the next window)", d.Limits[1].Reset)
	}
}

func TestRetryAfterIsExact(t *testing.T) {
	tests := []struct {
		name       string
		prev, cur  float64
		at         time.Duration
		cost, lim  float64
		fixed      bool
		retryAfter time.Duration
	}{
		{"fixed: end of window", 0, 5, 10 * time.Second, 1, 5, true, 50 * time.Second},
		{"sliding: previous decays within the window", 60, 0, 0, 1, 30, false, 31 * time.Second},
		{"sliding: millisecond resolution", 7, 0, 0, 1, 5, false, 25715 * time.Millisecond},
		{"sliding: current alone is over: next window", 0, 10, 59 * time.Second, 1, 10, false, time.Second + 6*time.Second},
		{"sliding: current exactly at the limit", 0, 9, 30 * time.Second, 1, 9, false, 30*time.Second + 6*time.Second + 667*time.Millisecond},
		{"sliding: cost equal to limit waits for the count to decay fully", 0, 4, 0, 4, 4, false, 2 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock(t0.Add(-time.Minute))
			in := newInstance(t, clk)
			mustNew(t, in, local("ns", time.Minute))
			if tt.prev > 0 {
				incr(t, in, "ns", "k", time.Minute, tt.prev)
			}
			clk.Set(t0)
			if tt.cur > 0 {
				incr(t, in, "ns", "k", time.Minute, tt.cur)
			}
			clk.Set(t0.Add(tt.at))
			lim := ratelimiting.Limit{Limit: tt.lim, Window: time.Minute, Fixed: tt.fixed}
			d := allow(t, in, "ns", "k", tt.cost, lim)
			if d.Allowed {
				t.Fatalf("allowed: %+v", d)
			}
			if d.RetryAfter != tt.retryAfter {
				t.Fatalf("RetryAfter = %v, want %v", d.RetryAfter, tt.retryAfter)
			}
			// The same request fails one millisecond earlier and passes then.
			clk.Set(t0.Add(tt.at + tt.retryAfter - time.Millisecond))
			if d := allow(t, in, "ns", "k", tt.cost, lim); d.Allowed {
				t.Fatalf("allowed 1ms before RetryAfter: %+v", d)
			}
			clk.Set(t0.Add(tt.at + tt.retryAfter))
			if d := allow(t, in, "ns", "k", tt.cost, lim); !d.Allowed {
				t.Fatalf("denied at RetryAfter: %+v", d)
			}
		})
	}
}

func TestAllowIsAllOrNothing(t *testing.T) {
	clk := newClock(t0)
	in := newInstance(t, clk)
	mustNew(t, in, local("ns", time.Second, time.Minute, time.Hour))
	perSec := ratelimiting.Limit{Limit: 100, Window: time.Second}
	perMin := ratelimiting.Limit{Limit: 5, Window: time.Minute}
	perHour := ratelimiting.Limit{Limit: 1000, Window: time.Hour}
	for range 5 {
		if d := allow(t, in, "ns", "k", 1, perSec, perMin, perHour); !d.Allowed {
			t.Fatalf("denied early: %+v", d)
		}
	}
	d := allow(t, in, "ns", "k", 1, perSec, perMin, perHour)
	if d.Allowed || !d.Limits[0].Allowed || d.Limits[1].Allowed || !d.Limits[2].Allowed {
		t.Fatalf("%+v: want denied by the per-minute limit alone", d)
	}
	for _, size := range []time.Duration{time.Second, time.Minute, time.Hour} {
		if w := slide(t, in, "ns", "k", size); w.Current != 5 {
			t.Errorf("%v window counted %v, want 5: a denied request was counted somewhere", size, w.Current)
		}
	}
}

func TestPenaltyCountsLikeKong(t *testing.T) {
	clk := newClock(t0)
	in := newInstance(t, clk)
	mustNew(t, in, local("ns", time.Second, time.Minute, time.Hour))
	perSec := ratelimiting.Limit{Limit: 100, Window: time.Second}
	perMin := ratelimiting.Limit{Limit: 2, Window: time.Minute}
	perHour := ratelimiting.Limit{Limit: 1000, Window: time.Hour}
	req := ratelimiting.Request{Namespace: "ns", Key: "k", Cost: 1, Limits: []ratelimiting.Limit{perSec, perMin, perHour}, Penalty: true}
	var got []bool
	for range 4 {
		d, err := in.Check(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, d.Allowed)
	}
	if want := []bool{true, true, false, false}; !slices.Equal(got, want) {
		t.Fatalf("decisions %v, want %v", got, want)
	}
	// By ascending limit: per minute (2) first, counted and denying; the
	// others after a denial are not counted.
	want := map[time.Duration]float64{time.Minute: 4, time.Second: 2, time.Hour: 2}
	for size, n := range want {
		if w := slide(t, in, "ns", "k", size); w.Current != n {
			t.Errorf("%v window counted %v, want %v", size, w.Current, n)
		}
	}
}

// N goroutines racing for the last L slots get exactly L passes, for one
// limit (lock-free) and for several (per-key lock).
func TestAllowRaceForTheLastSlots(t *testing.T) {
	for _, multi := range []bool{false, true} {
		name := "one limit"
		if multi {
			name = "three limits"
		}
		t.Run(name, func(t *testing.T) {
			clk := newClock(t0)
			in := newInstance(t, clk)
			mustNew(t, in, local("ns", time.Second, time.Minute, time.Hour))
			limits := []ratelimiting.Limit{{Limit: 1000, Window: time.Minute}}
			if multi {
				limits = append(limits, ratelimiting.Limit{Limit: 1e6, Window: time.Second}, ratelimiting.Limit{Limit: 1e6, Window: time.Hour, Fixed: true})
			}
			incr(t, in, "ns", "k", time.Minute, 900)
			var passes atomic.Int64
			var wg sync.WaitGroup
			for range 32 {
				wg.Go(func() {
					for range 50 {
						d, err := in.Allow(context.Background(), "ns", "k", 1, limits...)
						if err != nil {
							t.Error(err)
							return
						}
						if d.Allowed {
							passes.Add(1)
						}
					}
				})
			}
			wg.Wait()
			if got := passes.Load(); got != 100 {
				t.Fatalf("%d passes, want exactly 100", got)
			}
			if w := slide(t, in, "ns", "k", time.Minute); w.Current != 1000 {
				t.Fatalf("counted %v, want 1000", w.Current)
			}
		})
	}
}

func TestZeroCostPeeks(t *testing.T) {
	clk := newClock(t0)
	in := newInstance(t, clk)
	mustNew(t, in, local("ns", time.Second))
	lim := ratelimiting.Limit{Limit: 1, Window: time.Second}
	if d := allow(t, in, "ns", "k", 0, lim); !d.Allowed || d.Limits[0].Remaining != 1 {
		t.Fatalf("peek on a fresh key: %+v", d)
	}
	if n := in.Stats()[0].Dict.Entries; n != 0 {
		t.Fatalf("a peek created %d counters", n)
	}
}
