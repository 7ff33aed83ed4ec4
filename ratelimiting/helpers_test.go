package ratelimiting_test

import (
	"context"
	"log/slog"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
	"github.com/ratesync/ratesync/strategy"
)

// t0 is the start of a minute, an hour and a day: windows of those sizes
// start there.
var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// fakeClock is a clock tests move by hand.
type fakeClock struct{ ms atomic.Int64 }

func newClock(t time.Time) *fakeClock {
	c := &fakeClock{}
	c.Set(t)
	return c
}
func (c *fakeClock) Now() time.Time          { return time.UnixMilli(c.ms.Load()) }
func (c *fakeClock) Set(t time.Time)         { c.ms.Store(t.UnixMilli()) }
func (c *fakeClock) Advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }

// quiet silences the instance's logs of injected store failures.
var quiet = ratelimiting.WithLogger(slog.New(slog.DiscardHandler))

// newInstance returns an instance on clk, closed at the end of the test.
func newInstance(t *testing.T, clk *fakeClock, opts ...ratelimiting.Option) *ratelimiting.Instance {
	t.Helper()
	in := ratelimiting.NewInstance(t.Name(), append([]ratelimiting.Option{ratelimiting.WithClock(clk.Now), quiet}, opts...)...)
	t.Cleanup(func() { _ = in.Close(context.Background()) })
	return in
}

func mustNew(t *testing.T, in *ratelimiting.Instance, cfg namespace.Config) {
	t.Helper()
	if err := in.New(cfg); err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
}

func local(name string, sizes ...time.Duration) namespace.Config {
	return namespace.Config{Name: name, SyncRate: namespace.LocalOnly, WindowSizes: sizes}
}

func synced(name string, rate time.Duration, s strategy.Strategy, sizes ...time.Duration) namespace.Config {
	return namespace.Config{Name: name, SyncRate: rate, Strategy: s, WindowSizes: sizes}
}

func incr(t *testing.T, in *ratelimiting.Instance, ns, key string, size time.Duration, v float64) ratelimiting.Window {
	t.Helper()
	w, err := in.Increment(context.Background(), ns, key, size, v)
	if err != nil {
		t.Fatalf("Increment(%q, %q, %v, %v): %v", ns, key, size, v, err)
	}
	return w
}

func slide(t *testing.T, in *ratelimiting.Instance, ns, key string, size time.Duration) ratelimiting.Window {
	t.Helper()
	w, err := in.SlidingWindow(context.Background(), ns, key, size)
	if err != nil {
		t.Fatalf("SlidingWindow(%q, %q, %v): %v", ns, key, size, err)
	}
	return w
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// eventually polls cond every few milliseconds until it holds or the
// deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
