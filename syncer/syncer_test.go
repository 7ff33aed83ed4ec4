package syncer_test

import (
	"context"
	"fmt"
	"iter"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/strategytest"
	"github.com/ratesync/ratesync/shm"
	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/memory"
	"github.com/ratesync/ratesync/syncer"
)

var t0 = time.Date(2030, 1, 1, 0, 30, 0, 0, time.UTC)

func newSyncer(t *testing.T, rate time.Duration, st strategy.Strategy, hitTimeout time.Duration) (*syncer.Syncer, *shm.Series) {
	t.Helper()
	d, err := shm.NewDict("d", 0)
	if err != nil {
		t.Fatal(err)
	}
	sr := d.Series("ns", time.Hour)
	var seq atomic.Uint64
	s := syncer.New(syncer.Config{
		Namespace: "ns", Node: "ns|n1", Rate: rate, Strategy: st, Series: []*shm.Series{sr},
		// Windows stand still at t0; the back-off runs on real time.
		Now: func() int64 { return t0.UnixMilli() }, Clock: time.Now, Seq: &seq, HitTimeout: hitTimeout,
		Logger: slog.New(slog.DiscardHandler),
	})
	s.Start()
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	return s, sr
}

// A public Sync that fails while synchronous hits flow leaves a batch in
// flight; the next hit batch pushes it first, in order, and nothing is lost
// or counted twice.
func TestFailedSyncDuringSynchronousHits(t *testing.T) {
	store := strategytest.NewFaulty(memory.New())
	s, sr := newSyncer(t, 0, store, 0)
	w := sr.Current(t0.UnixMilli())
	ctx := context.Background()
	var hits atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for !stop.Load() {
				if _, err := s.Hit(ctx, w, "k", 1); err == nil {
					hits.Add(1)
				}
			}
		})
	}
	added := 0.0
	for range 40 {
		w.Add("d", 1, t0.UnixMilli()) // a diff counted on the node
		added++
		store.FailPushes(1)
		_ = s.Sync(ctx)
		time.Sleep(200 * time.Microsecond)
	}
	stop.Store(true)
	wg.Wait()
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.UnixMilli(sr.StartOf(t0.UnixMilli()))
	k, _ := store.GetWindow(ctx, "ns", "k", start, time.Hour)
	d, _ := store.GetWindow(ctx, "ns", "d", start, time.Hour)
	if k != float64(hits.Load()) || d != added {
		t.Fatalf("store k=%v d=%v, want %d and %v", k, d, hits.Load(), added)
	}
}

// slowFetch answers GetCounters after 300ms: a node holding many keys.
type slowFetch struct {
	*strategytest.Faulty
}

func (s slowFetch) GetCounters(ctx context.Context, q strategy.Query) iter.Seq2[strategy.Counter, error] {
	return func(yield func(strategy.Counter, error) bool) {
		select {
		case <-time.After(300 * time.Millisecond):
		case <-ctx.Done():
			yield(strategy.Counter{}, ctx.Err())
			return
		}
		for c, err := range s.Faulty.GetCounters(ctx, q) {
			if !yield(c, err) {
				return
			}
		}
	}
}

// A synchronous namespace recovers from a store failure with a push alone:
// a fetch slower than HitTimeout must not keep it deciding locally.
func TestSynchronousRecoversWhenFetchIsSlow(t *testing.T) {
	store := slowFetch{strategytest.NewFaulty(memory.New())}
	s, sr := newSyncer(t, 0, store, 200*time.Millisecond)
	w := sr.Current(t0.UnixMilli())
	ctx := context.Background()
	if _, err := s.Hit(ctx, w, "k", 1); err != nil {
		t.Fatal(err)
	}
	store.FailPushes(1)
	_, _ = s.Hit(ctx, w, "k", 1) // fails: the store is marked down
	deadline := time.Now().Add(10 * time.Second)
	for !s.Stats().StoreUp || s.Stats().InFlight > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("still down after 10s of a healthy store: %+v", s.Stats())
		}
		_, _ = s.Hit(ctx, w, "k", 1)
		time.Sleep(20 * time.Millisecond)
	}
	before := s.Stats().LocalHits
	if _, err := s.Hit(ctx, w, "k", 1); err != nil {
		t.Fatal(err)
	}
	if s.Stats().LocalHits != before {
		t.Fatal("a hit was counted locally with the store up")
	}
}

// The in-flight amounts of acknowledged batches never leak into later
// totals: after synchronous hits (whose in-flight map is emptied and kept)
// and after a failed then retried push of 5,000 diffs (whose map is let
// go), a Sync sets every counter to the store's count exactly, another
// node's pushes included.
func TestInflightAmountsEndWithTheirBatch(t *testing.T) {
	store := strategytest.NewFaulty(memory.New())
	s, sr := newSyncer(t, 0, store, 0)
	now := t0.UnixMilli()
	w := sr.Current(now)
	ctx := context.Background()
	start := time.UnixMilli(sr.StartOf(now))
	key := func(i int) string { return fmt.Sprintf("k%d", i) }

	for round := range 3 {
		for i := range 10 {
			if _, err := s.Hit(ctx, w, key(i), 1); err != nil {
				t.Fatal(err)
			}
		}
		if round == 1 {
			for i := range 5000 {
				w.Add(key(i), 1, now) // counted on the node, pushed by Sync
			}
			store.SetDown(true) // a failed push is sent again while the call timeout lasts
			if err := s.Sync(ctx); err == nil {
				t.Fatal("Sync with a failing push returned nil")
			}
			store.SetDown(false)
			if st := s.Stats(); st.InFlightDiffs != 5000 {
				t.Fatalf("after the failed push: %d diffs in flight, want 5000", st.InFlightDiffs)
			}
		}
	}
	var diffs []strategy.Diff
	for i := range 10 {
		diffs = append(diffs, strategy.Diff{Namespace: "ns", Key: key(i), WindowStart: start, WindowSize: time.Hour, Value: 100})
	}
	if err := store.PushDiffs(ctx, strategy.Batch{Node: "ns|other", Seq: 1, Diffs: diffs}); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.InFlight != 0 {
		t.Fatalf("%d batches still in flight after a good Sync", st.InFlight)
	}
	for i := range 5000 {
		want, err := store.GetWindow(ctx, "ns", key(i), start, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if got := w.Value(key(i)); got != want {
			t.Fatalf("%s: node view %v, store %v", key(i), got, want)
		}
	}
}

// A background sync whose push reply is lost sends the same batch again
// within the call timeout: the store counts it once, and the store stays
// up (a lossy link costs round trips, not decisions on the node). A
// caller's Sync tries once and reports the failure.
func TestPeriodicSyncRidesOutALostReply(t *testing.T) {
	inner := memory.New()
	store := strategytest.NewFaulty(inner)
	s, sr := newSyncer(t, 20*time.Millisecond, store, time.Second)
	ctx := context.Background()
	w := sr.Current(t0.UnixMilli())
	start := time.UnixMilli(sr.StartOf(t0.UnixMilli()))
	stored := func() float64 {
		got, err := inner.GetWindow(ctx, "ns", "k", start, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	store.LoseReplies(1)
	w.Add("k", 3, t0.UnixMilli())
	deadline := time.Now().Add(5 * time.Second)
	for stored() != 3 || s.Stats().InFlight != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the store counts %v, %d batches in flight", stored(), s.Stats().InFlight)
		}
		if st := s.Stats(); !st.StoreUp {
			t.Fatalf("a lost reply sent again marked the store down: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if b := store.Batches(); len(b) < 2 || b[0].Seq != b[1].Seq {
		t.Fatalf("batches %+v: want the lost one sent again with its seq", b)
	}
	if got := stored(); got != 3 {
		t.Fatalf("the store counts %v, want 3: once", got)
	}
}
