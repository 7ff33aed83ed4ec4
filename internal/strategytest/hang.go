package strategytest

import (
	"context"
	"iter"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratesync/ratesync/strategy"
)

// Hang wraps a strategy and, once Block is called, holds every call until
// its context ends or Release is called: a store that stopped answering
// without closing its connections. PushAndCount and CheckAndCount need an
// inner strategy that has them (strategy/memory does). It is safe for
// concurrent use.
type Hang struct {
	inner strategy.Strategy

	mu        sync.Mutex
	release   chan struct{}  // nil: calls pass
	waitingIn map[string]int // calls hanging now, by method
	waiting   atomic.Int64
}

var (
	_ strategy.Strategy    = (*Hang)(nil)
	_ strategy.PushCounter = (*Hang)(nil)
	_ strategy.Checker     = (*Hang)(nil)
)

// NewHang wraps inner.
func NewHang(inner strategy.Strategy) *Hang { return &Hang{inner: inner} }

// Block makes the calls from now on hang.
func (h *Hang) Block() {
	h.mu.Lock()
	if h.release == nil {
		h.release = make(chan struct{})
	}
	h.mu.Unlock()
}

// Release lets the hanging calls, and the later ones, through.
func (h *Hang) Release() {
	h.mu.Lock()
	if h.release != nil {
		close(h.release)
		h.release = nil
	}
	h.mu.Unlock()
}

// Waiting returns the number of calls hanging now.
func (h *Hang) Waiting() int { return int(h.waiting.Load()) }

// WaitingIn returns the number of calls of method (such as "PushDiffs")
// hanging now.
func (h *Hang) WaitingIn(method string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.waitingIn[method]
}

// wait hangs a call of method while the store is blocked; it returns
// ctx.Err() when ctx ends first.
func (h *Hang) wait(ctx context.Context, method string) error {
	h.mu.Lock()
	release := h.release
	if release != nil {
		if h.waitingIn == nil {
			h.waitingIn = make(map[string]int)
		}
		h.waitingIn[method]++
		h.waiting.Add(1)
	}
	h.mu.Unlock()
	if release == nil {
		return nil
	}
	defer func() {
		h.mu.Lock()
		h.waitingIn[method]--
		h.waiting.Add(-1)
		h.mu.Unlock()
	}()
	select {
	case <-release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// PushDiffs hangs, then forwards b.
func (h *Hang) PushDiffs(ctx context.Context, b strategy.Batch) error {
	if err := h.wait(ctx, "PushDiffs"); err != nil {
		return err
	}
	return h.inner.PushDiffs(ctx, b)
}

// GetCounters hangs, then forwards q.
func (h *Hang) GetCounters(ctx context.Context, q strategy.Query) iter.Seq2[strategy.Counter, error] {
	return func(yield func(strategy.Counter, error) bool) {
		if err := h.wait(ctx, "GetCounters"); err != nil {
			yield(strategy.Counter{}, err)
			return
		}
		for c, err := range h.inner.GetCounters(ctx, q) {
			if !yield(c, err) {
				return
			}
		}
	}
}

// GetWindow hangs, then forwards.
func (h *Hang) GetWindow(ctx context.Context, ns, key string, start time.Time, size time.Duration) (float64, error) {
	if err := h.wait(ctx, "GetWindow"); err != nil {
		return 0, err
	}
	return h.inner.GetWindow(ctx, ns, key, start, size)
}

// Purge hangs, then forwards.
func (h *Hang) Purge(ctx context.Context, ns string, sizes []time.Duration, now time.Time) error {
	if err := h.wait(ctx, "Purge"); err != nil {
		return err
	}
	return h.inner.Purge(ctx, ns, sizes, now)
}

// PushAndCount hangs, then forwards to the inner strategy's PushAndCount.
func (h *Hang) PushAndCount(ctx context.Context, b strategy.Batch) ([]strategy.Totals, error) {
	if err := h.wait(ctx, "PushAndCount"); err != nil {
		return nil, err
	}
	return h.inner.(strategy.PushCounter).PushAndCount(ctx, b)
}

// CheckAndCount hangs, then forwards to the inner strategy's CheckAndCount.
func (h *Hang) CheckAndCount(ctx context.Context, node string, seq uint64, checks []strategy.Check) ([]strategy.CheckResult, error) {
	if err := h.wait(ctx, "CheckAndCount"); err != nil {
		return nil, err
	}
	return h.inner.(strategy.Checker).CheckAndCount(ctx, node, seq, checks)
}

// GetBuckets hangs, then forwards to the inner strategy's GetBuckets.
func (h *Hang) GetBuckets(ctx context.Context, ns string, refs []strategy.BucketRef) ([]strategy.BucketState, error) {
	if err := h.wait(ctx, "GetBuckets"); err != nil {
		return nil, err
	}
	return h.inner.(strategy.BucketStore).GetBuckets(ctx, ns, refs)
}
