package strategytest

import (
	"context"
	"errors"
	"iter"
	"sync"
	"time"

	"github.com/ratesync/ratesync/strategy"
)

// ErrInjected is the error Faulty returns for the faults it injects.
var ErrInjected = errors.New("strategytest: injected fault")

// Faulty wraps a strategy and injects faults on demand: pushes that fail
// before the store sees them, pushes whose reply is lost after the store
// applied them, and a store that is down (every call fails). It records
// every batch it forwards. It is safe for concurrent use.
type Faulty struct {
	inner strategy.Strategy

	mu       sync.Mutex
	failPush int // next pushes fail without reaching the store
	losePush int // next pushes reach the store, then fail
	down     bool
	batches  []strategy.Batch
}

// NewFaulty wraps inner.
func NewFaulty(inner strategy.Strategy) *Faulty { return &Faulty{inner: inner} }

// FailPushes makes the next n pushes fail before they reach the store.
func (f *Faulty) FailPushes(n int) { f.mu.Lock(); f.failPush = n; f.mu.Unlock() }

// LoseReplies makes the next n pushes reach the store and then fail, as a
// reply lost after the store applied the batch.
func (f *Faulty) LoseReplies(n int) { f.mu.Lock(); f.losePush = n; f.mu.Unlock() }

// SetDown makes every call fail (true) or pass (false).
func (f *Faulty) SetDown(down bool) { f.mu.Lock(); f.down = down; f.mu.Unlock() }

// Batches returns the batches that reached the store, in order.
func (f *Faulty) Batches() []strategy.Batch {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]strategy.Batch(nil), f.batches...)
}

// beforePush decides the fate of a push: fail it before, or lose its reply.
func (f *Faulty) beforePush(b strategy.Batch) (fail, lose bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.down:
		return true, false
	case f.failPush > 0:
		f.failPush--
		return true, false
	case f.losePush > 0:
		f.losePush--
		lose = true
	}
	c := b
	c.Diffs = append([]strategy.Diff(nil), b.Diffs...)
	f.batches = append(f.batches, c)
	return false, lose
}

// PushDiffs forwards b unless a fault says otherwise.
func (f *Faulty) PushDiffs(ctx context.Context, b strategy.Batch) error {
	fail, lose := f.beforePush(b)
	if fail {
		return ErrInjected
	}
	if err := f.inner.PushDiffs(ctx, b); err != nil {
		return err
	}
	if lose {
		return ErrInjected
	}
	return nil
}

// PushAndCount forwards to the inner strategy's PushAndCount.
func (f *Faulty) PushAndCount(ctx context.Context, b strategy.Batch) ([]strategy.Totals, error) {
	pc, ok := f.inner.(strategy.PushCounter)
	if !ok {
		return nil, errors.New("strategytest: inner strategy is not a strategy.PushCounter")
	}
	fail, lose := f.beforePush(b)
	if fail {
		return nil, ErrInjected
	}
	t, err := pc.PushAndCount(ctx, b)
	if err != nil {
		return nil, err
	}
	if lose {
		return nil, ErrInjected
	}
	return t, nil
}

// GetCounters forwards q unless the store is down.
func (f *Faulty) GetCounters(ctx context.Context, q strategy.Query) iter.Seq2[strategy.Counter, error] {
	f.mu.Lock()
	down := f.down
	f.mu.Unlock()
	if down {
		return func(yield func(strategy.Counter, error) bool) { yield(strategy.Counter{}, ErrInjected) }
	}
	return f.inner.GetCounters(ctx, q)
}

// GetWindow forwards unless the store is down.
func (f *Faulty) GetWindow(ctx context.Context, ns, key string, start time.Time, size time.Duration) (float64, error) {
	f.mu.Lock()
	down := f.down
	f.mu.Unlock()
	if down {
		return 0, ErrInjected
	}
	return f.inner.GetWindow(ctx, ns, key, start, size)
}

// Purge forwards unless the store is down.
func (f *Faulty) Purge(ctx context.Context, ns string, sizes []time.Duration, now time.Time) error {
	f.mu.Lock()
	down := f.down
	f.mu.Unlock()
	if down {
		return ErrInjected
	}
	return f.inner.Purge(ctx, ns, sizes, now)
}

// CheckAndCount forwards to the inner strategy's CheckAndCount.
func (f *Faulty) CheckAndCount(ctx context.Context, node string, seq uint64, checks []strategy.Check) ([]strategy.CheckResult, error) {
	ck, ok := f.inner.(strategy.Checker)
	if !ok {
		return nil, errors.New("strategytest: inner strategy is not a strategy.Checker")
	}
	fail, lose := f.beforePush(strategy.Batch{Node: node, Seq: seq})
	if fail {
		return nil, ErrInjected
	}
	r, err := ck.CheckAndCount(ctx, node, seq, checks)
	if err != nil {
		return nil, err
	}
	if lose {
		return nil, ErrInjected
	}
	return r, nil
}

// GetBuckets forwards to the inner strategy's GetBuckets; it fails while the
// store is down.
func (f *Faulty) GetBuckets(ctx context.Context, ns string, refs []strategy.BucketRef) ([]strategy.BucketState, error) {
	bs, ok := f.inner.(strategy.BucketStore)
	if !ok {
		return nil, errors.New("strategytest: inner strategy is not a strategy.BucketStore")
	}
	f.mu.Lock()
	down := f.down
	f.mu.Unlock()
	if down {
		return nil, ErrInjected
	}
	return bs.GetBuckets(ctx, ns, refs)
}
