package ratelimiting_test

import (
	"context"
	"errors"
	"iter"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/arith"
	"github.com/ratesync/ratesync/internal/strategytest"
	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/memory"
)

// manual is a periodic sync rate whose ticker never fires during a test:
// tests call Sync themselves.
const manual = time.Hour

func stored(t *testing.T, s strategy.Strategy, ns, key string, start time.Time, size time.Duration) float64 {
	t.Helper()
	v, err := s.GetWindow(context.Background(), ns, key, start, size)
	if err != nil {
		t.Fatalf("GetWindow: %v", err)
	}
	return v
}

func syncNS(t *testing.T, in *ratelimiting.Instance, ns string) {
	t.Helper()
	if err := in.Sync(context.Background(), ns); err != nil {
		t.Fatalf("Sync(%q): %v", ns, err)
	}
}

func TestLostReplyIsCountedOnce(t *testing.T) {
	clk := newClock(t0)
	store := strategytest.NewFaulty(memory.New())
	in := newInstance(t, clk)
	mustNew(t, in, synced("ns", manual, store, time.Minute))
	incr(t, in, "ns", "k", time.Minute, 5)

	store.LoseReplies(1) // the store applies the batch, the reply is lost
	if err := in.Sync(context.Background(), "ns"); !errors.Is(err, strategytest.ErrInjected) {
		t.Fatalf("Sync = %v, want the injected fault", err)
	}
	if w := slide(t, in, "ns", "k", time.Minute); w.Current != 5 {
		t.Fatalf("view after a lost reply = %v, want 5", w.Current)
	}
	incr(t, in, "ns", "k", time.Minute, 1)
	syncNS(t, in, "ns") // retries the same batch, then pushes the new hit
	if got := stored(t, store, "ns", "k", t0, time.Minute); got != 6 {
		t.Fatalf("store = %v, want 6 (no double count, no loss)", got)
	}
	if w := slide(t, in, "ns", "k", time.Minute); w.Current != 6 {
		t.Fatalf("view = %v, want 6", w.Current)
	}
	b := store.Batches()
	if len(b) != 3 || b[0].Seq != b[1].Seq || b[0].Node != b[1].Node || b[2].Seq <= b[1].Seq {
		t.Fatalf("batches %+v: want the lost one retried with the same (node, seq), then a newer one", b)
	}
}

func TestFailedPushKeepsDiffsAndView(t *testing.T) {
	clk := newClock(t0)
	store := strategytest.NewFaulty(memory.New())
	in := newInstance(t, clk)
	mustNew(t, in, synced("ns", manual, store, time.Minute))
	incr(t, in, "ns", "k", time.Minute, 5)
	store.FailPushes(2)
	for range 2 {
		if err := in.Sync(context.Background(), "ns"); err == nil {
			t.Fatal("Sync with a failing store: no error")
		}
		if w := slide(t, in, "ns", "k", time.Minute); w.Current != 5 {
			t.Fatalf("view after a failed push = %v, want 5", w.Current)
		}
	}
	st := in.Stats()[0].Sync
	if st.InFlight != 1 || st.InFlightDiffs != 1 || st.PushErrors != 2 || st.StoreUp {
		t.Fatalf("stats %+v: want 1 batch of 1 diff in flight, 2 push errors, store down", st)
	}
	incr(t, in, "ns", "k", time.Minute, 3)
	if err := in.Fetch(context.Background(), "ns"); err != nil { // a fetch keeps in-flight diffs in view
		t.Fatal(err)
	}
	if w := slide(t, in, "ns", "k", time.Minute); w.Current != 8 {
		t.Fatalf("view after a fetch with a batch in flight = %v, want 8", w.Current)
	}
	syncNS(t, in, "ns")
	if got := stored(t, store, "ns", "k", t0, time.Minute); got != 8 {
		t.Fatalf("store = %v, want 8", got)
	}
	if st := in.Stats()[0].Sync; st.InFlight != 0 || !st.StoreUp {
		t.Fatalf("stats %+v after recovery", st)
	}
}

func TestTwoInstancesOnOneStoreAgree(t *testing.T) {
	clk := newClock(t0)
	store := memory.New()
	a, b := newInstance(t, clk), newInstance(t, clk)
	mustNew(t, a, synced("ns", manual, store, time.Second, time.Minute))
	mustNew(t, b, synced("ns", manual, store, time.Second, time.Minute))
	incr(t, a, "ns", "k", time.Minute, 3)
	incr(t, b, "ns", "k", time.Minute, 4)
	incr(t, b, "ns", "only-b", time.Second, 1)
	syncNS(t, a, "ns")
	syncNS(t, b, "ns")
	if err := a.Fetch(context.Background(), "ns"); err != nil {
		t.Fatal(err)
	}
	for _, in := range []*ratelimiting.Instance{a, b} {
		if w := slide(t, in, "ns", "k", time.Minute); w.Current != 7 {
			t.Errorf("%s sees %v, want 7", in.Name(), w.Current)
		}
	}
	// a never saw only-b: a node fetches the keys it holds (see README).
	if w := slide(t, a, "ns", "only-b", time.Second); w.Current != 0 {
		t.Errorf("a sees only-b = %v, want 0", w.Current)
	}
}

func TestSynchronousSeesTheOtherNodesHits(t *testing.T) {
	clk := newClock(t0)
	store := memory.New()
	a, b := newInstance(t, clk), newInstance(t, clk)
	mustNew(t, a, synced("ns", namespace.Synchronous, store, time.Minute))
	mustNew(t, b, synced("ns", namespace.Synchronous, store, time.Minute))
	if w := incr(t, a, "ns", "k", time.Minute, 2); w.Current != 2 {
		t.Fatalf("a: %v, want 2", w.Current)
	}
	if w := incr(t, b, "ns", "k", time.Minute, 1); w.Current != 3 {
		t.Fatalf("b: %v, want 3 (a's hits included)", w.Current)
	}
	if got := stored(t, store, "ns", "k", t0, time.Minute); got != 3 {
		t.Fatalf("store = %v, want 3", got)
	}
	// The view keeps the store's totals as of the last hit.
	if w := slide(t, a, "ns", "k", time.Minute); w.Current != 2 {
		t.Fatalf("a's view = %v, want 2 (as of its own last hit)", w.Current)
	}
	d, err := b.Allow(context.Background(), "ns", "k", 1, ratelimiting.Limit{Limit: 4, Window: time.Minute})
	if err != nil || !d.Allowed || d.Limits[0].Rate != 4 {
		t.Fatalf("Allow: %+v, %v; want allowed at rate 4", d, err)
	}
}

func TestSynchronousCountsLocallyWhileTheStoreIsDown(t *testing.T) {
	clk := newClock(t0)
	store := strategytest.NewFaulty(memory.New())
	in := newInstance(t, clk)
	mustNew(t, in, synced("ns", namespace.Synchronous, store, time.Minute))
	incr(t, in, "ns", "k", time.Minute, 1)
	store.SetDown(true)
	for i := range 20 {
		if w := incr(t, in, "ns", "k", time.Minute, 1); w.Current != float64(i+2) {
			t.Fatalf("hit %d while down: current %v, want %d", i, w.Current, i+2)
		}
	}
	if st := in.Stats()[0].Sync; st.StoreUp || st.LocalHits == 0 {
		t.Fatalf("stats %+v: want the store down and local hits counted", st)
	}
	store.SetDown(false)
	clk.Advance(6 * time.Second) // past the longest back-off: the instance's clock drives it
	eventually(t, 5*time.Second, "hits counted while down reach the store", func() bool {
		return stored(t, store, "ns", "k", t0, time.Minute) == 21
	})
	if w := incr(t, in, "ns", "k", time.Minute, 1); w.Current != 22 {
		t.Fatalf("after recovery: %v, want 22", w.Current)
	}
	if got := stored(t, store, "ns", "k", t0, time.Minute); got != 22 {
		t.Fatalf("store = %v, want 22", got)
	}
}

func TestSynchronousCoalescesConcurrentHits(t *testing.T) {
	clk := newClock(t0)
	// Each store call takes 1 ms, as a network round trip would: the hits
	// that arrive meanwhile queue, so coalescing does not hang on how the
	// goroutines happen to be scheduled.
	store := strategytest.NewFaulty(strategytest.NewLateReply(memory.New(), time.Millisecond))
	in := newInstance(t, clk)
	mustNew(t, in, synced("ns", namespace.Synchronous, store, time.Minute))
	var wg sync.WaitGroup
	seen := make([]float64, 64*20)
	var i atomic.Int64
	for range 64 {
		wg.Go(func() {
			for range 20 {
				w, err := in.Increment(context.Background(), "ns", "k", time.Minute, 1)
				if err != nil {
					t.Error(err)
					return
				}
				seen[i.Add(1)-1] = w.Current
			}
		})
	}
	wg.Wait()
	if got := stored(t, store, "ns", "k", t0, time.Minute); got != 1280 {
		t.Fatalf("store = %v, want 1280", got)
	}
	// Each caller got the total as of its own hit: all distinct, 1..1280.
	distinct := make(map[float64]bool)
	for _, v := range seen {
		distinct[v] = true
	}
	if len(distinct) != 1280 {
		t.Fatalf("%d distinct totals returned, want 1280 (one per hit)", len(distinct))
	}
	if n := len(store.Batches()); n >= 1280 {
		t.Fatalf("%d store calls for 1280 hits: not coalesced", n)
	}
}

func TestRemoveAndCloseFlush(t *testing.T) {
	clk := newClock(t0)
	store := memory.New()
	in := ratelimiting.NewInstance("flush", ratelimiting.WithClock(clk.Now), quiet)
	mustNew(t, in, synced("a", manual, store, time.Minute))
	mustNew(t, in, synced("b", manual, store, time.Minute))
	incr(t, in, "a", "k", time.Minute, 2)
	incr(t, in, "b", "k", time.Minute, 3)
	if err := in.Remove(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	if got := stored(t, store, "a", "k", t0, time.Minute); got != 2 {
		t.Fatalf("after Remove, store has %v of a, want 2", got)
	}
	if err := in.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := stored(t, store, "b", "k", t0, time.Minute); got != 3 {
		t.Fatalf("after Close, store has %v of b, want 3", got)
	}
}

func TestCloseReportsAFailedFinalSync(t *testing.T) {
	clk := newClock(t0)
	store := strategytest.NewFaulty(memory.New())
	in := ratelimiting.NewInstance("flush", ratelimiting.WithClock(clk.Now), quiet)
	mustNew(t, in, synced("a", manual, store, time.Minute))
	incr(t, in, "a", "k", time.Minute, 2)
	store.SetDown(true)
	if err := in.Close(context.Background()); !errors.Is(err, strategytest.ErrInjected) {
		t.Fatalf("Close = %v, want the store's error", err)
	}
}

func TestLateDiffsAreDroppedAndCounted(t *testing.T) {
	clk := newClock(t0)
	store := strategytest.NewFaulty(memory.New())
	in := newInstance(t, clk)
	mustNew(t, in, synced("ns", manual, store, time.Second))
	incr(t, in, "ns", "in-flight", time.Second, 1)
	store.FailPushes(1)
	if err := in.Sync(context.Background(), "ns"); err == nil {
		t.Fatal("want a failed push")
	}
	incr(t, in, "ns", "unpushed", time.Second, 1)
	clk.Advance(1500 * time.Millisecond)
	incr(t, in, "ns", "new", time.Second, 1)
	clk.Advance(time.Second) // the first window is now older than the previous one
	incr(t, in, "ns", "newer", time.Second, 1)
	if n := in.Stats()[0].Dict.Entries; n != 4 {
		t.Fatalf("%d counters held, want 4: expiry dropped a window with an unpushed diff", n)
	}
	syncNS(t, in, "ns")
	st := in.Stats()[0].Sync
	if st.LateDropped != 2 {
		t.Fatalf("late diffs dropped = %d, want 2 (the in-flight one and the unpushed one)", st.LateDropped)
	}
	for _, key := range []string{"in-flight", "unpushed"} {
		if got := stored(t, store, "ns", key, t0, time.Second); got != 0 {
			t.Fatalf("late diff of %q reached the store: %v", key, got)
		}
	}
	for key, start := range map[string]time.Time{"new": t0.Add(time.Second), "newer": t0.Add(2 * time.Second)} {
		if got := stored(t, store, "ns", key, start, time.Second); got != 1 {
			t.Errorf("%s = %v in its own window, want 1", key, got)
		}
		if got := stored(t, store, "ns", key, start.Add(time.Second), time.Second); got != 0 {
			t.Errorf("%s folded into a newer window: %v", key, got)
		}
	}
	if n := in.Stats()[0].Dict.Entries; n != 2 {
		t.Fatalf("%d counters held after the sync, want 2: the old window should have expired", n)
	}
}

func TestSeqIsUniqueAcrossNamespacesAndLives(t *testing.T) {
	clk := newClock(t0)
	store := strategytest.NewFaulty(memory.New())
	first := ratelimiting.NewInstance("x", ratelimiting.WithClock(clk.Now), ratelimiting.WithNodeID("node-1"), quiet)
	for _, ns := range []string{"a", "b"} {
		mustNew(t, first, synced(ns, manual, store, time.Minute))
	}
	for range 3 {
		for _, ns := range []string{"a", "b"} {
			incr(t, first, ns, "k", time.Minute, 1)
			syncNS(t, first, ns)
		}
	}
	_ = first.Close(context.Background())
	second := newInstance(t, clk, ratelimiting.WithNodeID("node-1")) // the same node, restarted
	mustNew(t, second, synced("a", manual, store, time.Minute))
	incr(t, second, "a", "k", time.Minute, 1)
	syncNS(t, second, "a")
	seqs := map[uint64]bool{}
	nodes := map[string]bool{}
	for _, b := range store.Batches() {
		if seqs[b.Seq] && nodes[b.Node] {
			t.Fatalf("seq %d reused by %s", b.Seq, b.Node)
		}
		seqs[b.Seq], nodes[b.Node] = true, true
	}
	if first.Node() == second.Node() {
		t.Fatalf("a restarted node reuses its identity %q", first.Node())
	}
	if got := stored(t, store, "a", "k", t0, time.Minute); got != 4 {
		t.Fatalf("store has %v, want 4: the restarted node's batch was taken for a retry", got)
	}
}

func TestUpdateKeepsDiffsOfDroppedWindowSizes(t *testing.T) {
	clk := newClock(t0)
	store := memory.New()
	in := newInstance(t, clk)
	mustNew(t, in, synced("ns", manual, store, time.Second, time.Minute))
	incr(t, in, "ns", "k", time.Second, 2)
	incr(t, in, "ns", "k", time.Minute, 3)
	if err := in.Update(synced("ns", manual, store, time.Minute, time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Increment(context.Background(), "ns", "k", time.Second, 1); !errors.Is(err, ratelimiting.ErrInvalidInput) {
		t.Fatalf("Increment on a dropped size: %v, want ErrInvalidInput", err)
	}
	incr(t, in, "ns", "k", time.Hour, 4)
	syncNS(t, in, "ns")
	for size, want := range map[time.Duration]float64{time.Second: 2, time.Minute: 3, time.Hour: 4} {
		if got := stored(t, store, "ns", "k", t0, size); got != want {
			t.Errorf("%v: store has %v, want %v", size, got, want)
		}
	}
}

func TestPeriodicSyncRunsByItself(t *testing.T) {
	store := memory.New()
	a := ratelimiting.NewInstance("a", ratelimiting.WithClock(time.Now))
	b := ratelimiting.NewInstance("b", ratelimiting.WithClock(time.Now))
	t.Cleanup(func() { _ = a.Close(context.Background()); _ = b.Close(context.Background()) })
	mustNew(t, a, synced("ns", 20*time.Millisecond, store, time.Hour))
	mustNew(t, b, synced("ns", 20*time.Millisecond, store, time.Hour))
	incr(t, a, "ns", "k", time.Hour, 5)
	incr(t, b, "ns", "k", time.Hour, 7)
	eventually(t, 5*time.Second, "both nodes see 12", func() bool {
		return slide(t, a, "ns", "k", time.Hour).Current == 12 && slide(t, b, "ns", "k", time.Hour).Current == 12
	})
}

// slowStore blocks every push and records how many run at once.
type slowStore struct {
	strategy.Strategy
	delay            time.Duration
	running, maxSeen atomic.Int32
}

func (s *slowStore) PushDiffs(ctx context.Context, b strategy.Batch) error {
	n := s.running.Add(1)
	defer s.running.Add(-1)
	for {
		m := s.maxSeen.Load()
		if n <= m || s.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.Strategy.PushDiffs(ctx, b)
}

func (s *slowStore) GetCounters(ctx context.Context, q strategy.Query) iter.Seq2[strategy.Counter, error] {
	return s.Strategy.GetCounters(ctx, q)
}

func TestSlowStoreNeverPilesSyncsUp(t *testing.T) {
	store := &slowStore{Strategy: memory.New(), delay: 100 * time.Millisecond}
	in := ratelimiting.NewInstance("slow", ratelimiting.WithClock(time.Now), quiet)
	mustNew(t, in, synced("ns", 5*time.Millisecond, store, time.Hour))
	stop := time.Now().Add(600 * time.Millisecond)
	for time.Now().Before(stop) {
		incr(t, in, "ns", "k", time.Hour, 1)
		time.Sleep(time.Millisecond)
	}
	if err := in.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := store.maxSeen.Load(); got != 1 {
		t.Fatalf("%d pushes ran at once, want 1", got)
	}
	if got := stored(t, store, "ns", "k", arith.WindowStart(time.Now(), time.Hour), time.Hour); got == 0 {
		t.Fatal("nothing reached the store")
	}
}

// Synchronous Allow decides in the store: nodes racing for the last slots
// admit exactly the limit between them.
func TestSynchronousAllowIsAtomicAcrossNodes(t *testing.T) {
	clk := newClock(t0.Add(30 * time.Second))
	store := memory.New()
	var nodes []*ratelimiting.Instance
	for range 3 {
		in := newInstance(t, clk)
		mustNew(t, in, synced("ns", namespace.Synchronous, store, time.Second, time.Minute))
		nodes = append(nodes, in)
	}
	limits := []ratelimiting.Limit{{Limit: 100, Window: time.Minute}, {Limit: 1000, Window: time.Second}}
	var passed atomic.Int64
	var wg sync.WaitGroup
	for _, in := range nodes {
		for range 8 {
			wg.Go(func() {
				for range 20 {
					d, err := in.Allow(context.Background(), "ns", "k", 1, limits...)
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						passed.Add(1)
						if d.Limits[0].Rate > 100 {
							t.Errorf("allowed at rate %v", d.Limits[0].Rate)
						}
					}
				}
			})
		}
	}
	wg.Wait()
	if got := passed.Load(); got != 100 {
		t.Fatalf("%d requests admitted across 3 nodes, want exactly 100", got)
	}
	if got := stored(t, store, "ns", "k", t0, time.Minute); got != 100 {
		t.Fatalf("store = %v, want 100", got)
	}
}

func TestSynchronousAllowDecidesLocallyWhileTheStoreIsDown(t *testing.T) {
	clk := newClock(t0)
	store := strategytest.NewFaulty(memory.New())
	in := newInstance(t, clk)
	mustNew(t, in, synced("ns", namespace.Synchronous, store, time.Minute))
	lim := ratelimiting.Limit{Limit: 5, Window: time.Minute}
	for range 2 {
		if d, err := in.Allow(context.Background(), "ns", "k", 1, lim); err != nil || !d.Allowed {
			t.Fatalf("Allow: %+v %v", d, err)
		}
	}
	store.SetDown(true)
	var got []bool
	for range 5 {
		d, err := in.Allow(context.Background(), "ns", "k", 1, lim)
		if err != nil {
			t.Fatalf("Allow while down: %v", err)
		}
		got = append(got, d.Allowed)
	}
	if want := []bool{true, true, true, false, false}; !slices.Equal(got, want) {
		t.Fatalf("decisions while down %v, want %v (local counts continue from the store's)", got, want)
	}
	store.SetDown(false)
	clk.Advance(6 * time.Second) // past the longest back-off: the instance's clock drives it
	eventually(t, 5*time.Second, "local decisions reach the store", func() bool {
		return stored(t, store, "ns", "k", t0, time.Minute) == 5
	})
}

// NearLimit: far from the limit nodes decide alone; near it, the store
// decides, so nodes racing for the last slots admit exactly the limit.
func TestNearLimitDecidesInTheStoreNearTheLimit(t *testing.T) {
	clk := newClock(t0.Add(50 * time.Second))
	store := memory.New()
	lim := ratelimiting.Limit{Limit: 100, Window: time.Minute, Fixed: true}
	var nodes []*ratelimiting.Instance
	for range 3 {
		in := newInstance(t, clk)
		cfg := synced("ns", 100*time.Millisecond, store, time.Minute) // reach: 100ms of traffic
		cfg.NearLimit = true
		mustNew(t, in, cfg)
		nodes = append(nodes, in)
	}
	checks := func() (n uint64) {
		for _, in := range nodes {
			n += in.Stats()[0].Sync.Checks
		}
		return n
	}
	for _, in := range nodes { // until a node's first fetch in a window, every key is "near"
		if err := in.Fetch(context.Background(), "ns"); err != nil {
			t.Fatal(err)
		}
	}
	for i, in := range nodes { // 30 + 30 + 20: every view stays under 75
		for range []int{30, 30, 20}[i] {
			if d := allow(t, in, "ns", "k", 1, lim); !d.Allowed {
				t.Fatalf("denied far from the limit: %+v", d)
			}
		}
	}
	if n := checks(); n != 0 {
		t.Fatalf("%d store checks far from the limit, want 0", n)
	}
	for _, in := range nodes {
		syncNS(t, in, "ns")
	}
	for _, in := range nodes { // every view now holds the 80: all in the zone
		if err := in.Fetch(context.Background(), "ns"); err != nil {
			t.Fatal(err)
		}
	}
	var passed atomic.Int64
	var wg sync.WaitGroup
	for _, in := range nodes {
		for range 4 {
			wg.Go(func() {
				for range 10 {
					if d, err := in.Allow(context.Background(), "ns", "k", 1, lim); err == nil && d.Allowed {
						passed.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	if got := passed.Load(); got != 20 {
		t.Fatalf("%d admitted near the limit, want exactly the 20 left", got)
	}
	if checks() == 0 {
		t.Fatal("no store check near the limit")
	}
	for _, in := range nodes {
		syncNS(t, in, "ns")
	}
	if got := stored(t, store, "ns", "k", t0, time.Minute); got != 100 {
		t.Fatalf("store = %v, want 100", got)
	}
}

// A node entering the zone first pushes its own hits of the key the store
// has not seen, so the store decides on every hit this node admitted.
func TestNearLimitFlushesTheNodesOwnHitsFirst(t *testing.T) {
	clk := newClock(t0.Add(50 * time.Second))
	store := memory.New()
	in := newInstance(t, clk)
	cfg := synced("ns", 100*time.Millisecond, store, time.Minute)
	cfg.NearLimit = true
	mustNew(t, in, cfg)
	lim := ratelimiting.Limit{Limit: 10, Window: time.Minute, Fixed: true}
	if err := in.Fetch(context.Background(), "ns"); err != nil { // see above
		t.Fatal(err)
	}
	// Far while rate + 1 <= 7.5 (10 - 10/4): 7 local hits, then 3 near.
	for i := range 10 {
		if d := allow(t, in, "ns", "k", 1, lim); !d.Allowed {
			t.Fatalf("hit %d denied", i)
		}
	}
	if d := allow(t, in, "ns", "k", 1, lim); d.Allowed {
		t.Fatal("the 11th hit was allowed")
	}
	if got := stored(t, store, "ns", "k", t0, time.Minute); got != 10 {
		t.Fatalf("store = %v before any sync, want 10: the local hits were flushed with the first check", got)
	}
	st := in.Stats()[0].Sync
	if st.Checks != 3 {
		t.Fatalf("%d checks, want 3: the near-limit hits only", st.Checks)
	}
}

// A sync with nothing to push and no key to fetch still asks the store, so
// an idle namespace reports an unreachable store.
func TestIdleSyncProbesTheStore(t *testing.T) {
	clk := newClock(t0)
	store := strategytest.NewFaulty(memory.New())
	in := newInstance(t, clk)
	mustNew(t, in, synced("ns", manual, store, time.Minute))
	syncNS(t, in, "ns")
	if st := in.Stats()[0].Sync; !st.StoreUp || st.LastGood.IsZero() {
		t.Fatalf("stats %+v after an idle sync on a working store", st)
	}
	store.SetDown(true)
	if err := in.Sync(context.Background(), "ns"); err == nil {
		t.Fatal("an idle sync against a down store succeeded")
	}
	if st := in.Stats()[0].Sync; st.StoreUp {
		t.Fatalf("stats %+v: store reported up while down", st)
	}
}

// Until a node's first fetch in a window, its view of the previous window
// may miss other nodes' last hits: NearLimit then asks the store.
func TestNearLimitAsksTheStoreBeforeTheFirstFetchOfAWindow(t *testing.T) {
	clk := newClock(t0.Add(59 * time.Second))
	store := memory.New()
	lim := ratelimiting.Limit{Limit: 100, Window: time.Minute}
	a, b := newInstance(t, clk), newInstance(t, clk)
	for _, in := range []*ratelimiting.Instance{a, b} {
		cfg := synced("ns", manual, store, time.Minute)
		cfg.NearLimit = true
		mustNew(t, in, cfg)
	}
	for range 90 { // a burst on a at the end of the window, unseen by b
		if d := allow(t, a, "ns", "k", 1, lim); !d.Allowed {
			t.Fatal("denied")
		}
	}
	syncNS(t, a, "ns")
	clk.Set(t0.Add(time.Minute + time.Second)) // next window: the previous one weighs 59/60
	passed := 0
	for range 20 {
		if d := allow(t, b, "ns", "k", 1, lim); d.Allowed {
			passed++
		}
	}
	// rate = 90 * 59/60 = 88.5, so 11 more fit.
	if passed != 11 {
		t.Fatalf("b admitted %d, want 11: its stale view must not decide alone", passed)
	}
}
