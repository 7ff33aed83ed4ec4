package ratelimiting_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/refmodel"
	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
	"github.com/ratesync/ratesync/strategy/memory"
)

// toLimits converts the model's limits.
func toLimits(ls []refmodel.Limit) []ratelimiting.Limit {
	out := make([]ratelimiting.Limit, len(ls))
	for i, l := range ls {
		a := [...]ratelimiting.Algorithm{ratelimiting.SlidingWindow, ratelimiting.FixedWindow, ratelimiting.TokenBucket, ratelimiting.LeakyBucket}[l.Kind]
		out[i] = ratelimiting.Limit{Limit: l.Limit, Window: l.Window, Algorithm: a, Burst: l.Burst}
	}
	return out
}

// sameDecision returns what differs between the instance's decision and the
// model's, "" when nothing does. It also checks that the decision does not
// contradict itself.
func sameDecision(got ratelimiting.Decision, want refmodel.Decision) string {
	if got.Allowed != want.Allowed || got.RetryAfter != want.RetryAfter {
		return fmt.Sprintf("allowed %v retry %v, want %v retry %v", got.Allowed, got.RetryAfter, want.Allowed, want.RetryAfter)
	}
	denies := false
	for i, st := range got.Limits {
		w := want.Limits[i]
		if st.Allowed != w.Allowed || st.Remaining != w.Remaining || st.RetryAfter != w.RetryAfter {
			return fmt.Sprintf("limit %d: allowed %v remaining %v retry %v, want %v %v %v", i, st.Allowed, st.Remaining, st.RetryAfter, w.Allowed, w.Remaining, w.RetryAfter)
		}
		denies = denies || !st.Allowed
	}
	if got.Allowed == denies || (!got.Allowed && got.RetryAfter <= 0) {
		return fmt.Sprintf("contradicts itself: %+v", got)
	}
	return ""
}

// runTrace runs steps for one key against in's namespace ns and the model,
// and fails at the first decision that differs. sync, when set, runs after
// each step (a periodic namespace's push and fetch: with one hit per push,
// a bucket diff dated by its first hit is exact).
func runTrace(t *testing.T, in *ratelimiting.Instance, clk *fakeClock, ns string, steps []refmodel.Step, sync func()) {
	t.Helper()
	m := refmodel.New()
	for i, s := range steps {
		clk.Advance(s.Advance)
		got, err := in.Allow(context.Background(), ns, "k", s.Cost, toLimits(s.Limits)...)
		if err != nil {
			t.Fatalf("step %d: Allow: %v", i, err)
		}
		want := m.Decide(clk.Now().UnixMilli(), s.Cost, s.Limits)
		if diff := sameDecision(got, want); diff != "" {
			t.Fatalf("step %d (cost %v, limits %+v, at %d): %s", i, s.Cost, s.Limits, clk.Now().UnixMilli(), diff)
		}
		if sync != nil {
			sync()
		}
	}
}

// TestDecisionsMatchTheReference runs random traces of windows and buckets
// through local, synchronous and periodic namespaces, and compares every
// decision with the reference model's exact arithmetic: allowed, each
// limit's verdict, Remaining and RetryAfter to the millisecond.
func TestDecisionsMatchTheReference(t *testing.T) {
	modes := []struct {
		name string
		cfg  func() namespace.Config
		sync bool
	}{
		{"local", func() namespace.Config { return local("ns", refmodel.Windows...) }, false},
		{"synchronous", func() namespace.Config { return synced("ns", namespace.Synchronous, memory.New(), refmodel.Windows...) }, false},
		{"periodic", func() namespace.Config { return synced("ns", time.Hour, memory.New(), refmodel.Windows...) }, true},
	}
	traces := 150
	if testing.Short() {
		traces = 30
	}
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			for seed := range traces {
				r := rand.New(rand.NewPCG(uint64(seed), 12))
				clk := newClock(t0.Add(time.Duration(r.Int64N(3_600_000)) * time.Millisecond))
				in := ratelimiting.NewInstance(fmt.Sprint(t.Name(), seed), ratelimiting.WithClock(clk.Now), quiet)
				mustNew(t, in, mode.cfg())
				var sync func()
				if mode.sync {
					sync = func() {
						if err := in.Sync(context.Background(), "ns"); err != nil {
							t.Fatalf("Sync: %v", err)
						}
					}
				}
				runTrace(t, in, clk, "ns", refmodel.Trace(r, 200), sync)
				_ = in.Close(context.Background())
			}
		})
	}
}

// A request that fits exactly passes: 10 + 25 * 0.56 + 1 = 25, though
// 25 * 0.56 is 14.000000000000002 in float64; and the same in quarters.
func TestARequestThatFitsExactlyPasses(t *testing.T) {
	for _, c := range []struct {
		size             time.Duration
		limit, prev, cur float64
		into             time.Duration
	}{
		{time.Second, 25, 25, 10, 440 * time.Millisecond},
		{time.Minute, 7.25, 6.25, 2.75, 26400 * time.Millisecond},
	} {
		clk := newClock(t0)
		in := newInstance(t, clk)
		mustNew(t, in, local("ns", c.size))
		incr(t, in, "ns", "k", c.size, c.prev)
		clk.Advance(c.size)
		incr(t, in, "ns", "k", c.size, c.cur)
		clk.Advance(c.into - time.Millisecond)
		lim := ratelimiting.Limit{Limit: c.limit, Window: c.size}
		d, err := in.Allow(context.Background(), "ns", "k", 1, lim)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed || d.RetryAfter != time.Millisecond || d.Limits[0].Allowed || d.Limits[0].Remaining != 0 {
			t.Fatalf("1 ms before it fits: %+v, want denied, retry after 1ms, remaining 0", d)
		}
		clk.Advance(time.Millisecond)
		if d, _ = in.Allow(context.Background(), "ns", "k", 1, lim); !d.Allowed || d.Limits[0].Remaining != 0 {
			t.Fatalf("a request that fits exactly: %+v, want allowed", d)
		}
	}
}
