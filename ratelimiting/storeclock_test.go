package ratelimiting_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/memory"
)

// timeStore is a memory store that tells time: the store's clock is
// skew away from the node's (clk). It records the Now of the checks it
// decides.
type timeStore struct {
	*memory.Store
	clk  *fakeClock
	skew atomic.Int64 // ms

	mu     sync.Mutex
	checks []time.Time
}

func newTimeStore(clk *fakeClock, skew time.Duration) *timeStore {
	s := &timeStore{Store: memory.New(), clk: clk}
	s.skew.Store(skew.Milliseconds())
	return s
}

func (s *timeStore) Time(context.Context) (time.Time, error) {
	return s.clk.Now().Add(time.Duration(s.skew.Load()) * time.Millisecond), nil
}

func (s *timeStore) CheckAndCount(ctx context.Context, node string, seq uint64, checks []strategy.Check) ([]strategy.CheckResult, error) {
	s.mu.Lock()
	for _, c := range checks {
		s.checks = append(s.checks, c.Now)
	}
	s.mu.Unlock()
	return s.Store.CheckAndCount(ctx, node, seq, checks)
}

var _ strategy.Clock = (*timeStore)(nil)

// measured waits until the namespace's syncer has read its store's clock
// (it does when its background work starts).
func measured(t *testing.T, in *ratelimiting.Instance, ns string) ratelimiting.SyncStats {
	t.Helper()
	var st ratelimiting.SyncStats
	eventually(t, 10*time.Second, "the store's clock measured", func() bool {
		for _, s := range in.Stats() {
			if s.Config.Name == ns {
				st = s.Sync
			}
		}
		return st.ClockMeasured
	})
	return st
}

// A node whose clock is 1.5 s ahead of its store's counts in the store's
// windows: Increment, SlidingWindow and the pushed diffs name the window
// the store's clock is in, not the node's. With Clock: NodeClock it counts
// in its own.
func TestStoreClockCountsInTheStoresWindows(t *testing.T) {
	for _, tt := range []struct {
		name  string
		clock namespace.Clock
		start time.Time // the window a hit at node time t0+1.7s goes to
	}{
		{"store clock", namespace.StoreClock, t0},
		{"node clock", namespace.NodeClock, t0.Add(time.Second)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock(t0.Add(1700 * time.Millisecond)) // the store reads t0+200ms
			store := newTimeStore(clk, -1500*time.Millisecond)
			in := newInstance(t, clk)
			cfg := synced("ns", manual, store, time.Second)
			cfg.Clock = tt.clock
			mustNew(t, in, cfg)
			if st := measured(t, in, "ns"); st.ClockOffset != -1500*time.Millisecond {
				t.Fatalf("offset %v, want -1.5s", st.ClockOffset)
			}
			w := incr(t, in, "ns", "k", time.Second, 1)
			if !w.Start.Equal(tt.start) {
				t.Fatalf("Increment's window starts at %v, want %v", w.Start, tt.start)
			}
			if s := slide(t, in, "ns", "k", time.Second); !s.Start.Equal(tt.start) || s.Current != 1 {
				t.Fatalf("SlidingWindow: %+v, want the window of %v with the hit", s, tt.start)
			}
			syncNS(t, in, "ns")
			if got := stored(t, store, "ns", "k", tt.start, time.Second); got != 1 {
				t.Fatalf("the store's window of %v holds %v, want the hit", tt.start, got)
			}
		})
	}
}

// A synchronous check is decided as of the store's time: the Now the store
// judges at, and the Reset of a fixed window, are the store's clock's.
func TestStoreClockDecidesAtTheStoresTime(t *testing.T) {
	clk := newClock(t0.Add(1700 * time.Millisecond))
	store := newTimeStore(clk, -1500*time.Millisecond)
	in := newInstance(t, clk)
	mustNew(t, in, synced("ns", namespace.Synchronous, store, time.Second))
	measured(t, in, "ns")
	d, err := in.Allow(context.Background(), "ns", "k", 1, ratelimiting.Limit{Limit: 10, Window: time.Second, Fixed: true})
	if err != nil || !d.Allowed {
		t.Fatalf("Allow = %+v, %v", d, err)
	}
	store.mu.Lock()
	checks := store.checks
	store.mu.Unlock()
	if want := t0.Add(200 * time.Millisecond); len(checks) != 1 || !checks[0].Equal(want) {
		t.Fatalf("the store judged at %v, want its own time %v", checks, want)
	}
	if got := d.Limits[0].Reset; got != 800*time.Millisecond {
		t.Fatalf("Reset %v, want 800ms: the rest of the store's window", got)
	}
}

// Update switches a namespace between the store's clock and the node's
// while it runs; the namespace keeps its counts.
func TestUpdateSwitchesTheClock(t *testing.T) {
	clk := newClock(t0.Add(1700 * time.Millisecond))
	store := newTimeStore(clk, -1500*time.Millisecond)
	in := newInstance(t, clk)
	cfg := synced("ns", manual, store, time.Second)
	mustNew(t, in, cfg)
	measured(t, in, "ns")
	start := func() time.Time { return slide(t, in, "ns", "k", time.Second).Start }
	if !start().Equal(t0) {
		t.Fatalf("store clock: window %v, want %v", start(), t0)
	}
	cfg.Clock = namespace.NodeClock
	if err := in.Update(cfg); err != nil {
		t.Fatal(err)
	}
	if want := t0.Add(time.Second); !start().Equal(want) {
		t.Fatalf("node clock: window %v, want %v", start(), want)
	}
	cfg.Clock = namespace.StoreClock
	if err := in.Update(cfg); err != nil {
		t.Fatal(err)
	}
	if !start().Equal(t0) {
		t.Fatalf("store clock again: window %v, want %v", start(), t0)
	}
}
