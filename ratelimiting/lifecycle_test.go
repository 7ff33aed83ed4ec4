package ratelimiting_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/strategytest"
	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/memory"
)

// Hits counted while a namespace was local-only are pushed once it syncs,
// and so are later hits of the same keys.
func TestLocalToSyncedPushesEveryHit(t *testing.T) {
	clk := newClock(t0)
	store := memory.New()
	in := newInstance(t, clk)
	mustNew(t, in, local("ns", time.Hour))
	for range 5 {
		incr(t, in, "ns", "k", time.Hour, 1)
	}
	if err := in.Update(synced("ns", manual, store, time.Hour)); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		incr(t, in, "ns", "k", time.Hour, 1)
		incr(t, in, "ns", "fresh", time.Hour, 1)
	}
	syncNS(t, in, "ns")
	if k, f := stored(t, store, "ns", "k", t0, time.Hour), stored(t, store, "ns", "fresh", t0, time.Hour); k != 8 || f != 3 {
		t.Fatalf("store k=%v fresh=%v, want 8 and 3", k, f)
	}
}

// Synchronous callers racing Update (to periodic), Close or Remove always
// return: counted locally or refused, never stuck on a stopped worker.
func TestSynchronousCallersNeverHangOnReconfiguration(t *testing.T) {
	ops := map[string]func(in *ratelimiting.Instance, store strategy.Strategy){
		"update to periodic": func(in *ratelimiting.Instance, store strategy.Strategy) {
			if err := in.Update(synced("ns", manual, store, time.Second)); err != nil {
				t.Error(err)
			}
		},
		"close":  func(in *ratelimiting.Instance, _ strategy.Strategy) { _ = in.Close(context.Background()) },
		"remove": func(in *ratelimiting.Instance, _ strategy.Strategy) { _ = in.Remove(context.Background(), "ns") },
	}
	for name, op := range ops {
		t.Run(name, func(t *testing.T) {
			for range 5 {
				store := memory.New()
				in := ratelimiting.NewInstance("t", ratelimiting.WithClock(time.Now), quiet)
				mustNew(t, in, synced("ns", namespace.Synchronous, store, time.Second))
				var stop atomic.Bool
				var wg sync.WaitGroup
				for range 16 {
					wg.Go(func() {
						for !stop.Load() {
							_, _ = in.Increment(context.Background(), "ns", "k", time.Second, 1)
						}
					})
				}
				time.Sleep(10 * time.Millisecond)
				op(in, store)
				time.Sleep(10 * time.Millisecond)
				stop.Store(true)
				done := make(chan struct{})
				go func() { wg.Wait(); close(done) }()
				select {
				case <-done:
				case <-time.After(5 * time.Second):
					t.Fatal("Increment calls did not return")
				}
				_ = in.Close(context.Background())
			}
		})
	}
}

// pushGate is a store whose pushes fail while fail is set, and whose next
// push waits on gate once armed.
type pushGate struct {
	*memory.Store
	fail    atomic.Bool
	armed   atomic.Bool
	entered chan struct{}
	gate    chan struct{}
}

func (p *pushGate) PushDiffs(ctx context.Context, b strategy.Batch) error {
	if p.fail.Load() {
		return strategytest.ErrInjected
	}
	if p.armed.CompareAndSwap(true, false) {
		close(p.entered)
		<-p.gate
	}
	return p.Store.PushDiffs(ctx, b)
}

func (p *pushGate) GetCounters(ctx context.Context, q strategy.Query) iter.Seq2[strategy.Counter, error] {
	return p.Store.GetCounters(ctx, q)
}

// New of a namespace being removed waits for the removal, so the two never
// share a push lane: every hit lands.
func TestNewWaitsForTheRemovalOfTheSameName(t *testing.T) {
	clk := newClock(t0)
	store := &pushGate{Store: memory.New(), entered: make(chan struct{}), gate: make(chan struct{})}
	in := newInstance(t, clk)
	cfg := synced("ns", manual, store, time.Hour)
	mustNew(t, in, cfg)
	for range 5 {
		incr(t, in, "ns", "k", time.Hour, 1)
	}
	store.fail.Store(true)
	_ = in.Sync(context.Background(), "ns") // 5 in flight
	store.fail.Store(false)
	store.armed.Store(true)
	removed := make(chan error, 1)
	go func() { removed <- in.Remove(context.Background(), "ns") }()
	<-store.entered // the final push is in the store
	created := make(chan error, 1)
	go func() { created <- in.New(cfg) }()
	select {
	case err := <-created:
		t.Fatalf("New returned (%v) while the removal of the same name was still pushing", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(store.gate)
	if err := <-removed; err != nil {
		t.Fatal(err)
	}
	if err := <-created; err != nil {
		t.Fatal(err)
	}
	for range 3 {
		incr(t, in, "ns", "k", time.Hour, 1)
	}
	syncNS(t, in, "ns")
	if got := stored(t, store, "ns", "k", t0, time.Hour); got != 8 {
		t.Fatalf("store = %v, want 8", got)
	}
}

// Close returns only after the final push of a Remove under way: when it
// returns, every hit counted before it is in the store.
func TestCloseWaitsForTheFinalPushOfARemove(t *testing.T) {
	clk := newClock(t0)
	store := &pushGate{Store: memory.New(), entered: make(chan struct{}), gate: make(chan struct{})}
	in := newInstance(t, clk)
	mustNew(t, in, synced("ns", manual, store, time.Hour))
	incr(t, in, "ns", "k", time.Hour, 3)
	store.armed.Store(true)
	removed := make(chan error, 1)
	go func() { removed <- in.Remove(context.Background(), "ns") }()
	<-store.entered // the final push is in the store
	closed := make(chan error, 1)
	go func() { closed <- in.Close(context.Background()) }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while the final push of a Remove was under way", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(store.gate)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if got := stored(t, store, "ns", "k", t0, time.Hour); got != 3 {
		t.Fatalf("store = %v when Close returned, want 3", got)
	}
	if err := <-removed; err != nil {
		t.Fatal(err)
	}
}

// While batches are in flight (the store is failing), eviction leaves the
// namespace's counters alone: their in-flight amounts live in them.
func TestEvictionKeepsInFlightAmounts(t *testing.T) {
	clk := newClock(t0)
	store := strategytest.NewFaulty(memory.New())
	in := newInstance(t, clk)
	cfg := synced("ns", manual, store, time.Hour)
	cfg.DictCapacity = 20
	mustNew(t, in, cfg)
	for i := range 17 {
		incr(t, in, "ns", fmt.Sprint("k", i), time.Hour, 5)
	}
	store.FailPushes(1)
	if err := in.Sync(context.Background(), "ns"); err == nil {
		t.Fatal("want a failed push")
	}
	for i := range 30 { // over 90%: background sweeps run
		clk.Advance(200 * time.Millisecond)
		_, _ = in.Increment(context.Background(), "ns", fmt.Sprint("n", i), time.Hour, 10)
	}
	time.Sleep(50 * time.Millisecond)
	for i := range 17 {
		if w := slide(t, in, "ns", fmt.Sprint("k", i), time.Hour); w.Current != 5 {
			t.Fatalf("k%d = %v, want 5: an in-flight amount vanished from the view", i, w.Current)
		}
	}
}

// Increments racing an Update that drops their window size, or racing
// Close, are never lost: either counted and pushed, or refused with
// ErrClosed (and then at most over-counted, never under).
func TestIncrementsRacingUpdateAndClose(t *testing.T) {
	fixed := newClock(t0.Add(30 * time.Second))
	for _, op := range []string{"update", "close"} {
		t.Run(op, func(t *testing.T) {
			for trial := range 30 {
				store := memory.New()
				in := ratelimiting.NewInstance("t", ratelimiting.WithClock(fixed.Now), quiet)
				mustNew(t, in, synced("ns", manual, store, time.Second, time.Minute))
				var ok, attempts atomic.Int64
				var stop atomic.Bool
				var wg sync.WaitGroup
				for range 8 {
					wg.Go(func() {
						for !stop.Load() {
							attempts.Add(1)
							_, err := in.Increment(context.Background(), "ns", "k", time.Minute, 1)
							switch {
							case err == nil:
								ok.Add(1)
							case !errors.Is(err, ratelimiting.ErrClosed) && !errors.Is(err, ratelimiting.ErrInvalidInput):
								t.Error(err)
							}
						}
					})
				}
				time.Sleep(time.Millisecond)
				if op == "update" {
					if err := in.Update(synced("ns", manual, store, time.Second)); err != nil {
						t.Fatal(err)
					}
				} else {
					_ = in.Close(context.Background())
				}
				stop.Store(true)
				wg.Wait()
				_ = in.Close(context.Background())
				got := stored(t, store, "ns", "k", t0, time.Minute)
				if got < float64(ok.Load()) || got > float64(attempts.Load()) {
					t.Fatalf("trial %d: %d increments succeeded of %d, store holds %v", trial, ok.Load(), attempts.Load(), got)
				}
			}
		})
	}
}
