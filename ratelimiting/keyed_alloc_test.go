//go:build !race

package ratelimiting_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratesync/ratesync/ratelimiting"
)

// AllowOne on an existing key allocates nothing, for a sliding log too:
// neither when the log empties between hits (a key hit less often than
// its window) nor in a steady state where each hit trims the oldest entry.
func TestSlidingLogAllowOneAllocatesNothing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		window time.Duration
		step   time.Duration // between two hits
	}{
		{"log empties between hits", time.Second, time.Second},
		{"steady, one entry in one out", 5 * time.Millisecond, time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock(t0)
			in := instanceIn(t, clk, "local")
			ctx := context.Background()
			l := ratelimiting.Limit{Limit: 100, Window: tc.window, Algorithm: ratelimiting.SlidingLog}
			hit := func() {
				clk.Advance(tc.step)
				if st, err := in.AllowOne(ctx, "ns", "k", 1, l); err != nil || !st.Allowed {
					t.Fatalf("AllowOne: %+v, %v", st, err)
				}
			}
			for range 100 {
				hit()
			}
			// Ten hits a run, so that an allocation every few hits shows.
			if n := testing.AllocsPerRun(100, func() {
				for range 10 {
					hit()
				}
			}); n != 0 {
				t.Fatalf("%v allocations per 10 hits on an existing key, want 0", n)
			}
		})
	}
}

// AllowOne on an existing key allocates nothing, for every algorithm.
func TestAllowOneAllocatesNothing(t *testing.T) {
	clk := newClock(t0)
	in := newInstance(t, clk)
	mustNew(t, in, local("ns", time.Second, time.Minute))
	for _, l := range []ratelimiting.Limit{
		{Limit: 1e9, Window: time.Minute},
		{Limit: 1e9, Window: time.Minute, Algorithm: ratelimiting.FixedWindow},
		{Limit: 1e9, Window: time.Minute, Algorithm: ratelimiting.AnchoredWindow},
		{Limit: 1e9, Window: time.Minute, Precision: time.Second},
		{Limit: 1e9, Window: time.Minute, Algorithm: ratelimiting.TokenBucket},
		{Limit: 1e9, Window: time.Minute, Algorithm: ratelimiting.LeakyBucket},
	} {
		hit := func() {
			clk.Advance(time.Millisecond)
			if _, err := in.AllowOne(context.Background(), "ns", "k", 1, l); err != nil {
				t.Fatal(err)
			}
		}
		hit()
		if n := testing.AllocsPerRun(200, hit); n != 0 {
			t.Errorf("%s (precision %v): %v allocations per AllowOne, want 0", l.Algorithm, l.Precision, n)
		}
	}
}
