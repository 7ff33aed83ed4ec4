package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/strategytest"
	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/memory"
)

func TestContract(t *testing.T) {
	strategytest.Run(t, func(t *testing.T) strategy.Strategy { return memory.New() })
}

func TestFaultyWrapperPassesTheContract(t *testing.T) {
	strategytest.Run(t, func(t *testing.T) strategy.Strategy { return strategytest.NewFaulty(memory.New()) })
}

// A hit a node counted on its own while the store was down (a diff) is
// dated: when its anchored window closed before the store's current window
// opened, it no longer counts anywhere, and must not be added to the
// store's current window.
func TestAnchoredDiffOfAClosedWindowIsNotCountedInANewerOne(t *testing.T) {
	s := memory.New()
	ctx := context.Background()
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	lim := []strategy.CheckLimit{{WindowSize: time.Minute, Limit: 5, Kind: strategy.KindAnchored}}
	check := func(seq uint64, now time.Time, cost float64) strategy.CheckResult {
		t.Helper()
		res, err := s.CheckAndCount(ctx, "b", seq, []strategy.Check{{Namespace: "ns", Key: "k", Cost: cost, Now: now, Limits: lim}})
		if err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	// Node b opens the store's window at base+100s: [100s, 160s).
	if r := check(1, base.Add(100*time.Second), 1); !r.Allowed || r.Buckets[0].Level != 1 {
		t.Fatalf("first hit: %+v", r)
	}
	// Node a, cut off from the store, counted 4 at base: its window was
	// [0s, 60s), closed 40 s before the store's opened. It pushes them late.
	if err := s.PushDiffs(ctx, strategy.Batch{Node: "a", Seq: 1, Buckets: []strategy.BucketDiff{
		{Namespace: "ns", Key: "k", Kind: strategy.KindAnchored, Window: time.Minute, At: base.UnixMilli(), Cost: 4, Rate: 1},
	}}); err != nil {
		t.Fatal(err)
	}
	r := check(2, base.Add(110*time.Second), 0)
	if got := r.Buckets[0]; got.Level != 1 || got.At != base.Add(100*time.Second).UnixMilli() {
		t.Fatalf("the store's window after a late diff of a closed window: %+v, want the window opened at +100s holding 1", got)
	}
}
