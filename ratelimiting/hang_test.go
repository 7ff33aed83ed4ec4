package ratelimiting_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/strategytest"
	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
	"github.com/ratesync/ratesync/strategy/memory"
)

const (
	// hangTimeout is the sync timeout of the tests of a hung store: far
	// longer than any of their steps takes unless it waits for the store.
	hangTimeout = 10 * time.Second
	// never is a sync rate whose first sync (after a random stagger in
	// [0, rate)) does not come during a test.
	never = 1000 * time.Hour
)

// returnsBefore fails the test when fn takes as long as d, the bound of a
// store call fn must not wait for.
func returnsBefore(t *testing.T, d time.Duration, what string, fn func() error) {
	t.Helper()
	start := time.Now()
	if err := fn(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if took := time.Since(start); took >= d {
		t.Fatalf("%s took %v: it waited for the hung store (bound %v)", what, took.Round(time.Millisecond), d)
	}
}

// A store that stops answering holds back only its own namespace: New,
// Update and Remove of the others return while an Update of the hung
// namespace waits for its final push; an Update that restarts the hung
// namespace's syncer, or keeps it, does not wait for the hung sync.
func TestHungStoreBlocksOnlyItsNamespace(t *testing.T) {
	hung := strategytest.NewHang(memory.New())
	healthy := memory.New()
	in := ratelimiting.NewInstance("hang", ratelimiting.WithClock(newClock(t0).Now), quiet, ratelimiting.WithSyncTimeout(hangTimeout, 200*time.Millisecond))
	t.Cleanup(func() {
		hung.Release()
		_ = in.Close(context.Background())
	})
	mustNew(t, in, synced("slow", 10*time.Millisecond, hung, time.Minute))
	mustNew(t, in, synced("other", 10*time.Millisecond, healthy, time.Minute))
	ctx := context.Background()
	incr(t, in, "slow", "k", time.Minute, 1)

	// The hung namespace's own Update: a new rate restarts its syncer,
	// canceling the hung sync; the same rate changes nothing of it.
	hung.Block()
	eventually(t, 5*time.Second, "a sync of the slow namespace hangs", func() bool { return hung.WaitingIn("PushDiffs") > 0 })
	returnsBefore(t, hangTimeout, "Update of the hung namespace (new rate)", func() error {
		return in.Update(synced("slow", 20*time.Millisecond, hung, time.Minute))
	})
	eventually(t, 5*time.Second, "the restarted sync hangs again", func() bool { return hung.Waiting() > 0 })
	returnsBefore(t, hangTimeout, "Update of the hung namespace (same rate)", func() error {
		return in.Update(synced("slow", 20*time.Millisecond, hung, time.Minute, time.Hour))
	})
	// No background sync from now on: only the final push below hangs.
	returnsBefore(t, hangTimeout, "Update of the hung namespace (no more syncs)", func() error {
		return in.Update(synced("slow", never, hung, time.Minute))
	})
	eventually(t, 5*time.Second, "the canceled syncs end", func() bool { return hung.Waiting() == 0 })
	incr(t, in, "slow", "k", time.Minute, 1)

	// Going local-only waits for the final push; meanwhile the other
	// namespaces are not held back: their New, Update and Remove return
	// while that push still hangs.
	localDone := make(chan error, 1)
	go func() {
		localDone <- in.Update(namespace.Config{Name: "slow", SyncRate: namespace.LocalOnly, WindowSizes: []time.Duration{time.Minute}})
	}()
	eventually(t, 5*time.Second, "the final push hangs", func() bool { return hung.WaitingIn("PushDiffs") == 1 })
	mustNew(t, in, synced("third", 10*time.Millisecond, healthy, time.Minute))
	if err := in.Update(synced("other", 30*time.Millisecond, healthy, time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := in.Remove(ctx, "other"); err != nil {
		t.Fatal(err)
	}
	if n := hung.WaitingIn("PushDiffs"); n != 1 {
		t.Fatalf("%d hung pushes after New, Update and Remove of other namespaces, want 1: they waited for the final push", n)
	}
	select {
	case err := <-localDone:
		t.Fatalf("the Update to local-only returned (%v) while its final push hangs", err)
	default:
	}

	hung.Release()
	if err := <-localDone; err != nil {
		t.Fatal(err)
	}
	if cfg := in.Namespaces(); len(cfg) != 2 || cfg[0].Name != "slow" || !cfg[0].Local() || cfg[1].Name != "third" {
		t.Fatalf("namespaces %+v, want slow (local-only) and third", cfg)
	}
	if got := stored(t, hung, "slow", "k", t0, time.Minute); got != 2 {
		t.Fatalf("store = %v after the final push, want 2", got)
	}
}

// A rate change of a synchronous namespace whose store hangs in a call
// under way waits for that call at most the hit timeout, not for the
// store: the Update and the hit both return while the store still hangs.
func TestHungSynchronousStoreHoldsUpdateAtMostHitTimeout(t *testing.T) {
	const hitTimeout = 200 * time.Millisecond
	hung := strategytest.NewHang(memory.New())
	in := ratelimiting.NewInstance("hang", ratelimiting.WithClock(newClock(t0).Now), quiet, ratelimiting.WithSyncTimeout(hangTimeout, hitTimeout))
	t.Cleanup(func() {
		hung.Release()
		_ = in.Close(context.Background())
	})
	mustNew(t, in, synced("ns", namespace.Synchronous, hung, time.Minute))
	hung.Block()
	hitDone := make(chan error, 1)
	go func() {
		_, err := in.Increment(context.Background(), "ns", "k", time.Minute, 1)
		hitDone <- err
	}()
	eventually(t, 5*time.Second, "the hit's store call hangs", func() bool { return hung.WaitingIn("PushAndCount") == 1 })
	returnsBefore(t, hangTimeout, "Update of the hung synchronous namespace to periodic", func() error {
		return in.Update(synced("ns", never, hung, time.Minute))
	})
	if err := <-hitDone; err != nil {
		t.Fatal(err)
	}
	if w := slide(t, in, "ns", "k", time.Minute); w.Current != 1 {
		t.Fatalf("view %v after a hit the store did not answer, want 1", w.Current)
	}
}
