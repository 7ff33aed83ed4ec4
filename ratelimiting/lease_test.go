package ratelimiting_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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

// leasedNode is one node of a leased namespace "ls" on store, on clock ms.
func leasedNode(t *testing.T, store strategy.Strategy, ms *atomic.Int64, id string) *ratelimiting.Instance {
	t.Helper()
	in := ratelimiting.NewInstance(t.Name()+id, ratelimiting.WithNodeID(id),
		ratelimiting.WithClock(func() time.Time { return time.UnixMilli(ms.Load()) }),
		ratelimiting.WithLogger(slog.New(slog.DiscardHandler)), ratelimiting.WithSyncTimeout(10*time.Second, 2*time.Second))
	if err := in.New(namespace.Config{Name: "ls", SyncRate: time.Hour, Strategy: store, Leases: true, Clock: namespace.NodeClock,
		WindowSizes: []time.Duration{time.Second, time.Minute}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = in.Close(context.Background()) })
	return in
}

func leaseStats(in *ratelimiting.Instance) ratelimiting.LeaseStats {
	for _, st := range in.Stats() {
		if st.Config.Name == "ls" {
			return st.Leases
		}
	}
	return ratelimiting.LeaseStats{}
}

// A hot key is decided from what the store granted: few store calls, the
// limit held exactly between two nodes, and what a node did not use given
// back when it closes.
func TestLeasesDecideOnTheNode(t *testing.T) {
	store := memory.New()
	var ms atomic.Int64
	ms.Store(1_900_000_000_000) // a window start of 1s and 1m
	a, b := leasedNode(t, store, &ms, "a"), leasedNode(t, store, &ms, "b")
	limit := ratelimiting.Limit{Limit: 1000, Window: time.Minute, Algorithm: ratelimiting.FixedWindow}
	ctx := context.Background()
	admitted := 0
	for i := range 3000 {
		in := a
		if i%4 == 3 {
			in = b
		}
		st, err := in.AllowOne(ctx, "ls", "hot", 1, limit)
		if err != nil {
			t.Fatal(err)
		}
		if st.Allowed {
			admitted++
			if st.Remaining < 0 || st.Remaining > limit.Limit || st.Reset <= 0 {
				t.Fatalf("decision %d: state %+v", i, st)
			}
		} else if st.RetryAfter <= 0 {
			t.Fatalf("decision %d: refused without a RetryAfter: %+v", i, st)
		}
	}
	sa, sb := leaseStats(a), leaseStats(b)
	if admitted != 1000 {
		t.Fatalf("two nodes admitted %d of a fixed window of 1000, want exactly 1000 (a %+v, b %+v)", admitted, sa, sb)
	}
	if calls := sa.StoreCalls + sb.StoreCalls; calls > 60 {
		t.Errorf("%d store calls for 3000 decisions (a %+v, b %+v)", calls, sa, sb)
	}
	t.Logf("a %+v; b %+v", sa, sb)

	// A key used a little: the node holds more than it uses, and gives it
	// back when it closes.
	for range 3 {
		if st, err := a.AllowOne(ctx, "ls", "cold", 1, limit); err != nil || !st.Allowed {
			t.Fatalf("cold key: %+v, %v", st, err)
		}
	}
	start := time.UnixMilli(ms.Load()).Truncate(time.Minute)
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := store.GetWindow(ctx, "ls", "cold", start, time.Minute); err != nil || got != 3 {
		t.Fatalf("the store counts %v for a key that admitted 3 (err %v): what the node held and did not use must go back", got, err)
	}
}

// Concurrent callers on several nodes never admit more than the limit.
func TestLeasesConcurrentCallers(t *testing.T) {
	store := memory.New()
	var ms atomic.Int64
	ms.Store(1_900_000_000_000)
	nodes := []*ratelimiting.Instance{leasedNode(t, store, &ms, "a"), leasedNode(t, store, &ms, "b"), leasedNode(t, store, &ms, "c")}
	limits := []ratelimiting.Limit{
		{Limit: 500, Window: time.Minute, Algorithm: ratelimiting.FixedWindow},
		{Limit: 300, Window: time.Second, Algorithm: ratelimiting.TokenBucket, Burst: 300},
	}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 12 {
		wg.Go(func() {
			in := nodes[g%len(nodes)]
			for range 200 {
				d, err := in.Allow(context.Background(), "ls", "k", 1, limits...)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	// The last tokens, fewer than a tenth of the bucket, wait for more to
	// refill rather than cost a store call each.
	if got := admitted.Load(); got > 300 || got < 270 {
		t.Fatalf("admitted %d at one instant with a bucket of 300 (and a window of 500), want 270 to 300", got)
	}
}

// With the store down, the node spends what it holds, then decides on
// its own view; the store's count is right once it is back.
func TestLeasesStoreDown(t *testing.T) {
	store := strategytest.NewFaulty(memory.New())
	var ms atomic.Int64
	ms.Store(1_900_000_000_000)
	a := leasedNode(t, store, &ms, "a")
	limit := ratelimiting.Limit{Limit: 100, Window: time.Minute, Algorithm: ratelimiting.FixedWindow}
	ctx := context.Background()
	// A node shares only once it has counted the nodes: alone, its share
	// is the whole limit.
	deadline := time.Now().Add(10 * time.Second)
	for a.Stats()[0].Nodes != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the node counts %d nodes, want 1", a.Stats()[0].Nodes)
		}
		if err := a.Sync(ctx, "ls"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for range 10 {
		if st, err := a.AllowOne(ctx, "ls", "k", 1, limit); err != nil || !st.Allowed {
			t.Fatalf("%+v, %v", st, err)
		}
	}
	store.SetDown(true)
	admitted := 0
	for range 200 {
		st, err := a.AllowOne(ctx, "ls", "k", 1, limit)
		if err != nil {
			t.Fatal(err)
		}
		if st.Allowed {
			admitted++
		}
	}
	if admitted != 90 {
		t.Fatalf("admitted %d more with the store down, want 90 (the rest of the limit, decided on the node)", admitted)
	}
	if s := leaseStats(a); s.Fallbacks == 0 {
		t.Fatalf("no decision counted as the store-down behaviour's: %+v", s)
	}
	store.SetDown(false)
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.UnixMilli(ms.Load()).Truncate(time.Minute)
	if got, _ := store.GetWindow(ctx, "ls", "k", start, time.Minute); got != 100 {
		t.Fatalf("the store counts %v, want 100: every admission counted once", got)
	}
}

// Bad input is refused in a leased namespace as anywhere, before any
// lease; sliding logs are decided in the store.
func TestLeasesInput(t *testing.T) {
	store := memory.New()
	var ms atomic.Int64
	ms.Store(1_900_000_000_000)
	a, b := leasedNode(t, store, &ms, "a"), leasedNode(t, store, &ms, "b")
	ctx := context.Background()
	limit := ratelimiting.Limit{Limit: 10, Window: time.Second}
	if _, err := a.AllowOne(ctx, "ls", "k", 1, limit); err != nil {
		t.Fatal(err)
	}
	if _, err := a.AllowOne(ctx, "ls", "k", 11, limit); !errors.Is(err, ratelimiting.ErrInvalidInput) {
		t.Fatalf("cost above the limit: err %v, want ErrInvalidInput", err)
	}
	if _, err := a.AllowOne(ctx, "ls", "k", 1, ratelimiting.Limit{Limit: 10, Window: 3 * time.Second}); !errors.Is(err, ratelimiting.ErrInvalidInput) {
		t.Fatalf("a window the namespace does not keep: err %v, want ErrInvalidInput", err)
	}
	// Limits beyond 2^53, where whole floats are no longer every integer:
	// sizing a grant ends all the same.
	huge := ratelimiting.Limit{Limit: 1e18, Window: time.Second, Algorithm: ratelimiting.FixedWindow}
	done := make(chan error, 1)
	go func() {
		for range 50 {
			if st, err := a.AllowOne(ctx, "ls", "huge", 1e6, huge); err != nil || !st.Allowed {
				done <- fmt.Errorf("%+v, %v", st, err)
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("decisions on a limit of 1e18 did not return")
	}
	log := ratelimiting.Limit{Limit: 5, Window: time.Second, Algorithm: ratelimiting.SlidingLog}
	admitted := 0
	for i := range 20 {
		in := a
		if i%2 == 1 {
			in = b
		}
		st, err := in.AllowOne(ctx, "ls", "log", 1, log)
		if err != nil {
			t.Fatal(err)
		}
		if st.Allowed {
			admitted++
		}
	}
	if admitted != 5 {
		t.Fatalf("a log of 5 admitted %d across two nodes, want 5", admitted)
	}
}

// With the store down, what the nodes admit between them follows the
// namespace's store-down behaviour: share divides each limit among the
// nodes seen using the store, local gives each node the whole limit, deny
// refuses; in leased and in synchronous namespaces alike.
func TestStoreDownBehaviours(t *testing.T) {
	for _, c := range []struct {
		down namespace.StoreDown
		rate time.Duration
		want int
	}{
		{namespace.StoreDownShare, time.Hour, 100},
		{namespace.StoreDownLocal, time.Hour, 400},
		{namespace.StoreDownDeny, time.Hour, 0},
		{namespace.StoreDownShare, namespace.Synchronous, 100},
		{namespace.StoreDownDeny, namespace.Synchronous, 0},
	} {
		mode := "leased"
		if c.rate == namespace.Synchronous {
			mode = "synchronous"
		}
		t.Run(mode+"/"+c.down.String(), func(t *testing.T) {
			store := strategytest.NewFaulty(memory.New())
			var ms atomic.Int64
			ms.Store(1_900_000_000_000)
			cfg := namespace.Config{Name: "ls", SyncRate: c.rate, Strategy: store, Leases: c.rate > 0, StoreDown: c.down,
				Clock: namespace.NodeClock, WindowSizes: []time.Duration{time.Minute}}
			ctx := context.Background()
			var nodes []*ratelimiting.Instance
			for _, id := range []string{"a", "b", "c", "d"} {
				in := ratelimiting.NewInstance(t.Name()+id, ratelimiting.WithNodeID(id),
					ratelimiting.WithClock(func() time.Time { return time.UnixMilli(ms.Load()) }),
					ratelimiting.WithLogger(slog.New(slog.DiscardHandler)), ratelimiting.WithSyncTimeout(10*time.Second, 400*time.Millisecond))
				if err := in.New(cfg); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = in.Close(ctx) })
				nodes = append(nodes, in)
			}
			limit := ratelimiting.Limit{Limit: 100, Window: time.Minute, Algorithm: ratelimiting.FixedWindow}
			// Every node decides once and syncs while the store answers: the
			// nodes count each other.
			for round := range 2 {
				for _, in := range nodes {
					if _, err := in.AllowOne(ctx, "ls", "warm", 1, limit); err != nil {
						t.Fatal(err)
					}
					if err := in.Sync(ctx, "ls"); err != nil {
						t.Fatalf("round %d: %v", round, err)
					}
				}
				ms.Add(6000)
			}
			if c.down == namespace.StoreDownShare {
				// A synchronous node may count beside its worker: its count
				// lands a moment later.
				deadline := time.Now().Add(10 * time.Second)
				for _, in := range nodes {
					for st := in.Stats()[0]; st.Nodes != 4; st = in.Stats()[0] {
						if time.Now().After(deadline) {
							t.Fatalf("a node counts %d nodes using the store, want 4", st.Nodes)
						}
						ms.Add(1500)
						if err := in.Sync(ctx, "ls"); err != nil {
							t.Fatal(err)
						}
						time.Sleep(10 * time.Millisecond)
					}
				}
			}
			store.SetDown(true)
			decide := func() int {
				admitted := 0
				for range 200 {
					for _, in := range nodes {
						st, err := in.AllowOne(ctx, "ls", "k", 1, limit)
						if err != nil {
							t.Fatal(err)
						}
						if st.Allowed {
							admitted++
						} else if st.RetryAfter <= 0 {
							t.Fatalf("refused without a RetryAfter: %+v", st)
						}
					}
				}
				return admitted
			}
			want := c.want
			if c.down == namespace.StoreDownShare {
				// No node knows what the others took before the store went
				// down: none decides on its share in the window under way.
				want = 0
			}
			if admitted := decide(); admitted != want {
				t.Fatalf("4 nodes cut off from the store admitted %d of a limit of 100, want %d", admitted, want)
			}
			if c.down == namespace.StoreDownShare {
				// A window that starts once the outage has lasted a probe
				// interval and two call timeouts is shared.
				ms.Add(c.rate.Milliseconds() + 2*time.Minute.Milliseconds())
				if admitted := decide(); admitted != c.want {
					t.Fatalf("in a window that started after the outage, 4 nodes cut off from the store admitted %d of a limit of 100, want %d", admitted, c.want)
				}
			}
		})
	}
}

// hangingChecks is a memory store whose CheckAndCount waits for gate (or
// its context) first: a store that hangs on grants.
type hangingChecks struct {
	*memory.Store
	gate chan struct{}
}

func (h *hangingChecks) CheckAndCount(ctx context.Context, node string, seq uint64, checks []strategy.Check) ([]strategy.CheckResult, error) {
	select {
	case <-h.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return h.Store.CheckAndCount(ctx, node, seq, checks)
}

// A request that waits behind another's grant request gives up when its
// context ends, while the other still waits for the store.
func TestLeaseWaitEndsWithTheCaller(t *testing.T) {
	store := &hangingChecks{Store: memory.New(), gate: make(chan struct{})}
	a := ratelimiting.NewInstance(t.Name(), ratelimiting.WithNodeID("a"), ratelimiting.WithLogger(slog.New(slog.DiscardHandler)),
		ratelimiting.WithSyncTimeout(time.Minute, time.Minute)) // the first request waits for the gate
	if err := a.New(namespace.Config{Name: "ls", SyncRate: time.Hour, Strategy: store, Leases: true, WindowSizes: []time.Duration{time.Minute}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(context.Background()) })
	var release sync.Once
	open := func() { release.Do(func() { close(store.gate) }) }
	t.Cleanup(open) // before the node closes: its last sync asks the store
	limit := ratelimiting.Limit{Limit: 100, Window: time.Minute, Algorithm: ratelimiting.FixedWindow}
	first := make(chan error, 1)
	go func() {
		_, err := a.AllowOne(context.Background(), "ls", "k", 1, limit)
		first <- err
	}()
	time.Sleep(50 * time.Millisecond) // the first request waits for its grant
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	second := make(chan error, 1)
	go func() {
		_, err := a.AllowOne(ctx, "ls", "k", 1, limit)
		second <- err
	}()
	select {
	case err := <-second:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the second request: %v, want its context's deadline", err)
		}
	case err := <-first:
		t.Fatalf("the first request returned (%v) before the second, whose context ended: the second waited for it", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the second request still waits after its context ended")
	}
	select {
	case err := <-first:
		t.Fatalf("the first request returned (%v) while the store hangs", err)
	default:
	}
	open()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
}
