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

// TestDecisionsMatchTheReference runs random traces of windows and buckets
// through local, synchronous and periodic namespaces, and compares every
// decision with the reference model's exact arithmetic: allowed, each
// limit's verdict, Remaining and RetryAfter to the millisecond.
func TestDecisionsMatchTheReference(t *testing.T) {
	all := []refmodel.Kind{refmodel.Sliding, refmodel.Fixed, refmodel.Token, refmodel.Leaky}
	matchReference(t, 12, all, all, func(r *rand.Rand, _ int, _ []refmodel.Kind) []refmodel.Step { return refmodel.Trace(r, 200) })
}

// matchReference runs random traces (drawn from the given kinds, stream
// seeding each trace's generator) through local-only, synchronous and
// periodic namespaces on the memory store, comparing every decision with
// the reference model; periodic namespaces take the kinds of periodic.
func matchReference(t *testing.T, stream uint64, all, periodic []refmodel.Kind, draw func(r *rand.Rand, seed int, kinds []refmodel.Kind) []refmodel.Step) {
	modes := []struct {
		name  string
		cfg   func() namespace.Config
		sync  bool
		kinds []refmodel.Kind
	}{
		{"local", func() namespace.Config { return local("ns", refmodel.Windows...) }, false, all},
		{"synchronous", func() namespace.Config { return synced("ns", namespace.Synchronous, memory.New(), refmodel.Windows...) }, false, all},
		{"periodic", func() namespace.Config { return synced("ns", time.Hour, memory.New(), refmodel.Windows...) }, true, periodic},
	}
	traces := 150
	if testing.Short() {
		traces = 30
	}
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			for seed := range traces {
				r := rand.New(rand.NewPCG(uint64(seed), stream))
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
				advance := func(d time.Duration) int64 { clk.Advance(d); return clk.Now().UnixMilli() }
				refmodel.Run(t, in, advance, "ns", "k", draw(r, seed, mode.kinds), sync)
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

// TestEveryAlgorithmMatchesTheReference runs random traces that mix
// anchored windows, sliding logs and precision limits with windows and
// buckets, one to four limits a request, and compares every field of every
// decision with the reference model: local-only and synchronous
// namespaces take every algorithm; periodic ones (pushed and read back
// after each step) every one but anchored windows and logs, which they
// refuse.
func TestEveryAlgorithmMatchesTheReference(t *testing.T) {
	all := []refmodel.Kind{refmodel.Sliding, refmodel.Fixed, refmodel.Token, refmodel.Leaky, refmodel.Anchored, refmodel.Log, refmodel.Precision}
	periodic := []refmodel.Kind{refmodel.Sliding, refmodel.Fixed, refmodel.Token, refmodel.Leaky, refmodel.Precision}
	matchReference(t, 13, all, periodic, func(r *rand.Rand, seed int, kinds []refmodel.Kind) []refmodel.Step {
		return refmodel.Mix{Kinds: kinds, Most: 4, Probes: true, Subsets: seed%2 == 1}.Trace(r, 200)
	})
}
