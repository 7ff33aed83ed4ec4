package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/refmodel"
	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
)

// TestStoresDecideAsTheReference runs random traces of windows and buckets
// through a node whose namespaces are synchronous (each decision made by the
// store) and periodic (decided on the node, pushed and read back after each
// step), on Redis and PostgreSQL, and compares every decision with the
// reference model's exact arithmetic.
func TestStoresDecideAsTheReference(t *testing.T) {
	storesMatch(t, "exact", 7, func(r *rand.Rand, _ int, _ time.Duration) []refmodel.Step { return refmodel.Trace(r, 120) })
}

// storesMatch runs random traces (stream seeding each trace's generator)
// through synchronous and periodic namespaces (named prefix-seed-rate) on
// each store, comparing every decision with the reference model.
func storesMatch(t *testing.T, prefix string, stream uint64, draw func(r *rand.Rand, seed int, rate time.Duration) []refmodel.Step) {
	traces := 40
	if testing.Short() {
		traces = 8
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			store := st.open(t)
			var ms atomic.Int64
			ms.Store(time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli())
			in := ratelimiting.NewInstance(t.Name(), ratelimiting.WithClock(func() time.Time { return time.UnixMilli(ms.Load()) }))
			t.Cleanup(func() { _ = in.Close(context.Background()) })
			advance := func(d time.Duration) int64 { return ms.Add(d.Milliseconds()) }
			for seed := range traces {
				for _, rate := range []time.Duration{namespace.Synchronous, time.Hour} {
					ns := fmt.Sprintf("%s-%d-%v", prefix, seed, rate)
					// The traces move the node's clock by hand: count on it.
					cfg := namespace.Config{Name: ns, SyncRate: rate, Strategy: store, WindowSizes: refmodel.Windows, Clock: namespace.NodeClock}
					if err := in.New(cfg); err != nil {
						t.Fatal(err)
					}
					var sync func()
					if rate > 0 {
						sync = func() {
							if err := in.Sync(context.Background(), ns); err != nil {
								t.Fatalf("Sync: %v", err)
							}
						}
					}
					r := rand.New(rand.NewPCG(uint64(seed), stream))
					ms.Add(r.Int64N(3_600_000))
					refmodel.Run(t, in, advance, ns, "k", draw(r, seed, rate), sync)
				}
			}
		})
	}
}

// TestStoresDecideEveryAlgorithmAsTheReference runs random traces that mix
// anchored windows, sliding logs and precision limits with windows and
// buckets, one to four limits a request, through a node whose namespaces
// are synchronous (every algorithm, decided by the store) and periodic
// (every one but anchored windows and logs, pushed and read back after
// each step), on Redis and PostgreSQL, and compares every field of every
// decision with the reference model.
func TestStoresDecideEveryAlgorithmAsTheReference(t *testing.T) {
	kinds := map[time.Duration][]refmodel.Kind{
		namespace.Synchronous: {refmodel.Sliding, refmodel.Fixed, refmodel.Token, refmodel.Leaky, refmodel.Anchored, refmodel.Log, refmodel.Precision},
		time.Hour:             {refmodel.Sliding, refmodel.Fixed, refmodel.Token, refmodel.Leaky, refmodel.Precision},
	}
	storesMatch(t, "every", 8, func(r *rand.Rand, seed int, rate time.Duration) []refmodel.Step {
		return refmodel.Mix{Kinds: kinds[rate], Most: 4, Probes: true, Subsets: seed%2 == 1}.Trace(r, 120)
	})
}
