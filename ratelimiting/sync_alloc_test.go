//go:build !race

package ratelimiting_test

import (
	"bytes"
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/ratesync/ratesync/strategy/memory"
)

// In a periodic namespace, the first increment of a key after a sync lists
// its counter for the next one; in a steady state (the same keys every
// period) that allocates nothing: the dirty lists' arrays are reused.
func TestPeriodicIncrementAfterSyncAllocatesNothing(t *testing.T) {
	clk := newClock(t0)
	in := newInstance(t, clk)
	mustNew(t, in, synced("ns", manual, memory.New(), time.Minute))
	loopParked(t)
	ctx := context.Background()
	keys := benchKeys(200)
	period := func() uint64 {
		syncNS(t, in, "ns")
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for _, k := range keys {
			if _, err := in.Increment(ctx, "ns", k, time.Minute, 1); err != nil {
				t.Fatal(err)
			}
		}
		runtime.ReadMemStats(&after)
		return after.Mallocs - before.Mallocs
	}
	period() // the keys' counters are made, the lists grow
	period()
	for i := range 10 {
		if n := period(); n != 0 {
			t.Fatalf("period %d: %d allocations for %d increments after a sync, want 0", i, n, len(keys))
		}
	}
	if st := in.Stats()[0].Sync; st.Dirty != len(keys) {
		t.Fatalf("%d counters listed, want %d", st.Dirty, len(keys))
	}
}

// loopParked waits until every periodic loop has started and waits for its
// timer. A loop's start allocates (the timer), and on a loaded machine it
// can first run long after New returns, inside a measured period.
func loopParked(t *testing.T) {
	t.Helper()
	buf := make([]byte, 1<<20)
	eventually(t, 10*time.Second, "the periodic loop waiting for its timer", func() bool {
		stacks := buf[:runtime.Stack(buf, true)]
		loops := 0
		for g := range bytes.SplitSeq(stacks, []byte("\n\n")) {
			if bytes.Contains(g, []byte("syncer.(*Syncer).periodic(")) {
				if !bytes.Contains(g, []byte("[select")) {
					return false
				}
				loops++
			}
		}
		return loops > 0
	})
}
