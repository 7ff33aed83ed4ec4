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

// within fails the test when fn takes longer than d, and returns its error.
func within(t *testing.T, d time.Duration, what string, fn func() error) error {
	t.Helper()
	start := time.Now()
	err := fn()
	if took := time.Since(start); took > d {
		t.Errorf("%s took %v, want at most %v", what, took.Round(time.Millisecond), d)
	}
	return err
}

// A store that stops answering holds back only its own namespace: New,
// Update and Remove of the others return at once, even while an Update of
// the hung namespace waits for its final push; and that Update, or one that
// restarts the hung namespace's syncer, waits at most the sync timeout.
func TestHungStoreBlocksOnlyItsNamespace(t *testing.T) {
	const syncTimeout = 2 * time.Second
	const prompt = 500 * time.Millisecond
	hung := strategytest.NewHang(memory.New())
	healthy := memory.New()
	in := ratelimiting.NewInstance("hang", ratelimiting.WithClock(time.Now), quiet, ratelimiting.WithSyncTimeout(syncTimeout, 200*time.Millisecond))
	t.Cleanup(func() {
		hung.Release()
		_ = in.Close(context.Background())
	})
	mustNew(t, in, synced("slow", 10*time.Millisecond, hung, time.Minute))
	mustNew(t, in, synced("other", 10*time.Millisecond, healthy, time.Minute))
	ctx := context.Background()
	if _, err := in.Increment(ctx, "slow", "k", time.Minute, 1); err != nil {
		t.Fatal(err)
	}

	hung.Block()
	eventually(t, 5*time.Second, "a sync of the slow namespace hangs", func() bool { return hung.Waiting() > 0 })
	if _, err := in.Increment(ctx, "slow", "k", time.Minute, 1); err != nil {
		t.Fatal(err) // a diff the final push below must wait on
	}

	// The hung namespace's own Update: a new rate restarts its syncer,
	// canceling the hung exchange; the same rate changes nothing of it.
	if err := within(t, prompt, "Update of the hung namespace (new rate)", func() error {
		return in.Update(synced("slow", 20*time.Millisecond, hung, time.Minute))
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the restarted sync hangs again", func() bool { return hung.Waiting() > 0 })
	if err := within(t, prompt, "Update of the hung namespace (same rate)", func() error {
		return in.Update(synced("slow", 20*time.Millisecond, hung, time.Minute, time.Hour))
	}); err != nil {
		t.Fatal(err)
	}

	// Going local-only waits for the final push, at most the sync timeout,
	// and meanwhile the other namespaces are not held back.
	localDone := make(chan error, 1)
	go func() {
		localDone <- within(t, syncTimeout+prompt, "Update of the hung namespace to local-only", func() error {
			return in.Update(namespace.Config{Name: "slow", SyncRate: namespace.LocalOnly, WindowSizes: []time.Duration{time.Minute}})
		})
	}()
	eventually(t, 5*time.Second, "the final push hangs", func() bool { return hung.Waiting() > 0 })
	if err := within(t, prompt, "New of another namespace", func() error {
		return in.New(synced("third", 10*time.Millisecond, healthy, time.Minute))
	}); err != nil {
		t.Fatal(err)
	}
	if err := within(t, prompt, "Update of another namespace", func() error {
		return in.Update(synced("other", 30*time.Millisecond, healthy, time.Minute))
	}); err != nil {
		t.Fatal(err)
	}
	if err := within(t, prompt, "Remove of another namespace", func() error {
		return in.Remove(ctx, "other")
	}); err != nil {
		t.Fatal(err)
	}
	if err := <-localDone; err != nil {
		t.Fatal(err)
	}
	if cfg := in.Namespaces(); len(cfg) != 2 || cfg[0].Name != "slow" || !cfg[0].Local() || cfg[1].Name != "third" {
		t.Fatalf("namespaces %+v, want slow (local-only) and third", cfg)
	}
}
