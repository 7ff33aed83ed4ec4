package syncer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/strategytest"
	"github.com/ratesync/ratesync/shm"
	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/memory"
	"github.com/ratesync/ratesync/syncer"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Millis() int64           { return c.Now().UnixMilli() }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// counting counts the store calls that push, failed ones included.
type counting struct {
	*strategytest.Faulty
	pushes atomic.Int64
}

func (c *counting) PushDiffs(ctx context.Context, b strategy.Batch) error {
	c.pushes.Add(1)
	return c.Faulty.PushDiffs(ctx, b)
}

func (c *counting) PushAndCount(ctx context.Context, b strategy.Batch) ([]strategy.Totals, error) {
	c.pushes.Add(1)
	return c.Faulty.PushAndCount(ctx, b)
}

// newFakeClockSyncer returns a started syncer of rate whose every time
// comes from clk.
func newFakeClockSyncer(t *testing.T, rate time.Duration, st strategy.Strategy, clk *fakeClock, purgeEvery time.Duration) (*syncer.Syncer, *shm.Series) {
	t.Helper()
	d, err := shm.NewDict("d", 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	sr := d.Series("ns", time.Hour)
	var seq atomic.Uint64
	s := syncer.New(syncer.Config{
		Namespace: "ns", Node: "ns|n1", Rate: rate, Strategy: st, Series: []*shm.Series{sr},
		Now: clk.Millis, Clock: clk.Now, Seq: &seq, PurgeEvery: purgeEvery,
		Logger: slog.New(slog.DiscardHandler),
	})
	s.Start()
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	return s, sr
}

// waitUntil fails the test unless cond holds within 5s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within 5s: %s", what)
		}
	}
}

// A failed store call marks the store down (a breaker): hits are counted
// on the node at once, without asking it, until a probe succeeds. The
// probe comes when the clock passes the back-off, however long that takes
// in real time; it pushes every hit counted meanwhile, and the next hits
// go to the store again. Stats' times are the clock's.
func TestDownStateFollowsTheClock(t *testing.T) {
	clk := &fakeClock{}
	clk.ns.Store(t0.UnixNano())
	store := &counting{Faulty: strategytest.NewFaulty(memory.New())}
	s, sr := newFakeClockSyncer(t, 0, store, clk, -1)
	w := sr.Current(clk.Millis())
	ctx := context.Background()
	if _, err := s.Hit(ctx, w, "k", 1); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); !st.StoreUp || !st.LastGood.Equal(t0) {
		t.Fatalf("after a good hit: %+v, want the store up, LastGood %v", st, t0)
	}

	clk.Advance(time.Second)
	failedAt := clk.Now()
	store.SetDown(true)
	if _, err := s.Hit(ctx, w, "k", 1); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.StoreUp || !st.LastErrorAt.Equal(failedAt) || !st.LastGood.Equal(t0) || st.LocalHits != 1 {
		t.Fatalf("after a failed hit: %+v, want the store down since %v, LastGood %v, 1 local hit", st, failedAt, t0)
	}
	store.SetDown(false)

	// Down until the clock passes the first back-off (100ms), even after
	// more than that in real time.
	pushes := store.pushes.Load()
	time.Sleep(150 * time.Millisecond)
	clk.Advance(99 * time.Millisecond)
	for i := range 3 {
		tot, err := s.Hit(ctx, w, "k", 1)
		if err != nil {
			t.Fatal(err)
		}
		if want := float64(3 + i); tot.Current != want {
			t.Fatalf("local hit %d: current %v, want %v", i, tot.Current, want)
		}
	}
	if got := store.pushes.Load(); got != pushes {
		t.Fatalf("%d store calls while down, want none", got-pushes)
	}
	if st := s.Stats(); st.LocalHits != 4 || st.StoreUp {
		t.Fatalf("while down: %+v, want 4 local hits and the store down", st)
	}

	// Past the back-off: the hit is still counted on the node, at once,
	// and the probe it wakes brings every hit to the store.
	clk.Advance(time.Millisecond)
	tot, err := s.Hit(ctx, w, "k", 1)
	if err != nil {
		t.Fatal(err)
	}
	if tot.Current != 6 {
		t.Fatalf("hit at the back-off's end: current %v, want 6 (counted on the node)", tot.Current)
	}
	waitUntil(t, "the probe brings the store back up", func() bool { return s.Stats().StoreUp })
	start := time.UnixMilli(sr.StartOf(clk.Millis()))
	if got, _ := store.GetWindow(ctx, "ns", "k", start, time.Hour); got != 6 {
		t.Fatalf("after the probe: store %v, want 6", got)
	}
	if st := s.Stats(); !st.LastGood.Equal(clk.Now()) || st.LocalHits != 5 || st.InFlight != 0 {
		t.Fatalf("after recovery: %+v, want LastGood %v, 5 local hits, nothing in flight", st, clk.Now())
	}
	if tot, err := s.Hit(ctx, w, "k", 1); err != nil || tot.Current != 7 {
		t.Fatalf("hit after recovery: %v, %v; want the store's total 7", tot.Current, err)
	}
	if got, _ := store.GetWindow(ctx, "ns", "k", start, time.Hour); got != 7 {
		t.Fatalf("after recovery: store %v, want 7", got)
	}
}

// Each failed probe doubles the back-off, from 100ms up to 5s, on the
// clock; meanwhile hits never wait for the store.
func TestBackoffDoublesUpToMax(t *testing.T) {
	clk := &fakeClock{}
	clk.ns.Store(t0.UnixNano())
	store := &counting{Faulty: strategytest.NewFaulty(memory.New())}
	s, sr := newFakeClockSyncer(t, 0, store, clk, -1)
	w := sr.Current(clk.Millis())
	ctx := context.Background()
	store.SetDown(true)
	if _, err := s.Hit(ctx, w, "k", 1); err != nil { // fails: down for 100ms
		t.Fatal(err)
	}
	backoffs := []time.Duration{100, 200, 400, 800, 1600, 3200, 5000, 5000}
	for _, b := range backoffs {
		b *= time.Millisecond
		calls := store.pushes.Load()
		clk.Advance(b - time.Millisecond)
		if _, err := s.Hit(ctx, w, "k", 1); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // a probe, if one were due, would have started
		if got := store.pushes.Load(); got != calls {
			t.Fatalf("back-off %v: the store was asked %v before its end", b, b-time.Millisecond)
		}
		clk.Advance(time.Millisecond)
		if _, err := s.Hit(ctx, w, "k", 1); err != nil {
			t.Fatal(err)
		}
		// The probe has failed, and set the next back-off from this clock,
		// once its error is in Stats.
		waitUntil(t, fmt.Sprintf("back-off %v: a probe at its end, failed", b), func() bool {
			return store.pushes.Load() == calls+1 && s.Stats().LastErrorAt.Equal(clk.Now())
		})
	}
	store.SetDown(false)
	clk.Advance(5 * time.Second)
	if _, err := s.Hit(ctx, w, "k", 1); err != nil {
		t.Fatal(err)
	}
	start := time.UnixMilli(sr.StartOf(clk.Millis()))
	want := float64(2 + 2*len(backoffs))
	waitUntil(t, "every hit in the store after recovery", func() bool {
		got, _ := store.GetWindow(ctx, "ns", "k", start, time.Hour)
		return got == want
	})
}

// purgeCounter counts Purge calls.
type purgeCounter struct {
	*strategytest.Faulty
	purges atomic.Int64
}

func (p *purgeCounter) Purge(ctx context.Context, ns string, sizes []time.Duration, now time.Time) error {
	p.purges.Add(1)
	return p.Faulty.Purge(ctx, ns, sizes, now)
}

// The periodic loop purges when the clock says a purge is due, not when
// real time does.
func TestPurgeFollowsTheClock(t *testing.T) {
	clk := &fakeClock{}
	clk.ns.Store(t0.UnixNano())
	store := &purgeCounter{Faulty: strategytest.NewFaulty(memory.New())}
	s, _ := newFakeClockSyncer(t, 5*time.Millisecond, store, clk, time.Hour)
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("not within 5s: %s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor("a few syncs", func() bool { return s.Stats().LastGood.Equal(t0) })
	time.Sleep(100 * time.Millisecond)
	if n := store.purges.Load(); n != 0 {
		t.Fatalf("%d purges with the clock standing still", n)
	}
	clk.Advance(76 * time.Minute) // past the latest a purge can be due
	waitFor("a purge once the clock passed its time", func() bool { return store.purges.Load() == 1 })
}

// An exchange that ends because its context was canceled (a caller giving
// up, or halt stopping the background work) says nothing of the store: it
// is not marked down, and the next hit goes to the store.
func TestCancellationDoesNotMarkTheStoreDown(t *testing.T) {
	clk := &fakeClock{}
	clk.ns.Store(t0.UnixNano())
	store := strategytest.NewHang(memory.New())
	s, sr := newFakeClockSyncer(t, 0, store, clk, -1)
	w := sr.Current(clk.Millis())
	store.Block()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Sync(ctx) }()
	for deadline := time.Now().Add(5 * time.Second); store.Waiting() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the sync never reached the store")
		}
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Sync = %v, want context.Canceled", err)
	}
	store.Release()
	tot, err := s.Hit(context.Background(), w, "k", 1)
	if err != nil {
		t.Fatal(err)
	}
	start := time.UnixMilli(sr.StartOf(clk.Millis()))
	if got, _ := store.GetWindow(context.Background(), "ns", "k", start, time.Hour); got != 1 || tot.Current != 1 {
		t.Fatalf("store %v, hit's total %v; want 1 and 1", got, tot.Current)
	}
	if st := s.Stats(); st.LocalHits != 0 {
		t.Fatalf("%d hits counted locally after a canceled sync, want none: the store is up", st.LocalHits)
	}
}

// A probe that hangs is bounded by Timeout, and a rate change (halt) cuts
// it short at once: its batch stays in flight for the next push. A hit
// meanwhile does not wait for it: it is counted on the node at once.
func TestHaltCutsAHungRecoveryShort(t *testing.T) {
	clk := &fakeClock{}
	clk.ns.Store(t0.UnixNano())
	faulty := strategytest.NewFaulty(memory.New())
	store := strategytest.NewHang(faulty)
	d, err := shm.NewDict("d", 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	sr := d.Series("ns", time.Hour)
	var seq atomic.Uint64
	cfg := syncer.Config{
		Namespace: "ns", Node: "ns|n1", Rate: 0, Strategy: store, Series: []*shm.Series{sr},
		Now: clk.Millis, Clock: clk.Now, Seq: &seq, PurgeEvery: -1,
		Timeout: time.Hour, HitTimeout: 100 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
	}
	s := syncer.New(cfg)
	s.Start()
	t.Cleanup(func() {
		store.Release()
		_ = s.Stop(context.Background())
	})
	w := sr.Current(clk.Millis())
	ctx := context.Background()
	faulty.SetDown(true)
	if _, err := s.Hit(ctx, w, "k", 1); err != nil { // fails: down, 1 in flight
		t.Fatal(err)
	}
	faulty.SetDown(false)
	store.Block()
	clk.Advance(time.Second) // past the back-off: the next hit wakes a probe
	type result struct {
		tot strategy.Totals
		err error
	}
	hit := make(chan result, 1)
	go func() {
		tot, err := s.Hit(ctx, w, "k", 1)
		hit <- result{tot, err}
	}()
	for store.WaitingIn("PushDiffs") == 0 {
		runtime.Gosched()
	}
	cfg.Rate = time.Hour
	s.Reconfigure(cfg) // halts the worker, whose recovery would hang for up to an hour
	r := <-hit
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.tot.Current != 2 {
		t.Fatalf("hit's total %v, want 2 (counted on the node)", r.tot.Current)
	}
	st := s.Stats()
	if st.InFlight != 1 {
		t.Fatalf("stats %+v: want the batch still in flight", st)
	}
	store.Release()
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := faulty.GetWindow(ctx, "ns", "k", w.StartTime(), time.Hour); got != 2 {
		t.Fatalf("store holds %v, want 2", got)
	}
}
