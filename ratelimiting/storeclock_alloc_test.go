//go:build !race

package ratelimiting_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratesync/ratesync/ratelimiting"
)

// Reading the store's clock on the hot path is an atomic load: Increment
// and AllowOne of a namespace counting in store time allocate nothing.
func TestStoreClockAllocatesNothing(t *testing.T) {
	clk := newClock(t0)
	in := newInstance(t, clk)
	mustNew(t, in, synced("ns", manual, newTimeStore(clk, 2500*time.Millisecond), time.Second, time.Minute))
	measured(t, in, "ns")
	ctx := context.Background()
	limit := ratelimiting.Limit{Limit: 1e9, Window: time.Minute}
	hit := func() {
		clk.Advance(time.Millisecond)
		if _, err := in.Increment(ctx, "ns", "k", time.Second, 1); err != nil {
			t.Fatal(err)
		}
		if _, err := in.AllowOne(ctx, "ns", "k", 1, limit); err != nil {
			t.Fatal(err)
		}
	}
	hit()
	if n := testing.AllocsPerRun(200, hit); n != 0 {
		t.Fatalf("%v allocations per Increment and AllowOne, want 0", n)
	}
}
