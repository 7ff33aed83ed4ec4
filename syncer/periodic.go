package syncer

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// loop owns the syncer's one background goroutine: the periodic loop, or the
// synchronous worker (coalescer.go). Start starts it; halt stops it and
// waits for it.
type loop struct {
	mu       sync.Mutex // first in the lock order; guards what follows
	stop     chan struct{}
	done     chan struct{}
	cancel   context.CancelFunc
	stopping atomic.Bool // halt is canceling the background work
}

// Start starts the background work of the mode: the periodic ticker, or the
// synchronous hit worker. It does nothing when already started.
func (s *Syncer) Start() {
	l := &s.loop
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stop != nil {
		return
	}
	rate := s.conf.Load().Rate
	if rate < 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.stop, l.done, l.cancel = make(chan struct{}), make(chan struct{}), cancel
	if rate > 0 {
		go s.periodic(ctx, l.stop, l.done, rate)
	} else {
		s.queue.open()
		go s.synchronous(ctx, l.stop, l.done)
	}
}

// halt stops the background work without a final sync, and waits for it.
// A periodic sync under way is canceled: its batch stays in flight and is
// pushed again, with the same (Node, Seq), by the next exchange. The
// synchronous worker's turn under way is not: its store calls (checks and
// hits the store counts as it applies them) run within HitTimeout under a
// context halt does not cancel, so halt waits for that turn, at most
// HitTimeout, and the worker stops after it. Requests the worker has not
// taken are answered on the node.
func (s *Syncer) halt() {
	l := &s.loop
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stop == nil {
		return
	}
	l.stopping.Store(true)
	close(l.stop)
	l.cancel()
	<-l.done
	l.stopping.Store(false)
	l.stop, l.done, l.cancel = nil, nil, nil
}

// periodic is the loop of periodic mode. Each sync starts one period after
// the previous one started, or at once when that one overran: syncs never
// overlap or pile up.
func (s *Syncer) periodic(ctx context.Context, stop <-chan struct{}, done chan<- struct{}, rate time.Duration) {
	defer close(done)
	s.measureOffset(ctx)             // offset.go: the namespace clock before the first sync
	t := time.NewTimer(rand.N(rate)) // stagger: nodes do not sync in lockstep
	defer t.Stop()
	nextPurge := s.nextPurge()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		t.Reset(rate) // the next sync's start, measured from this one's
		if !s.lane.mu.lockCtx(ctx) {
			return // halting
		}
		c := s.conf.Load()
		sctx, cancel := context.WithTimeout(ctx, c.Timeout)
		_ = s.syncLocked(sctx, "sync", true)
		cancel()
		s.lane.mu.unlock()
		nextPurge = s.purgeIfDue(ctx, nextPurge)
	}
}

// nextPurge returns when (Config.Clock) the next purge is due, the mean
// interval ±25% from now; zero when the namespace never purges.
func (s *Syncer) nextPurge() time.Time {
	every := s.conf.Load().PurgeEvery
	if every < 0 {
		return time.Time{}
	}
	return s.clock.now().Add(every*3/4 + rand.N(every/2+1))
}

// purgeIfDue purges when next has passed and returns when the next purge
// is due.
func (s *Syncer) purgeIfDue(ctx context.Context, next time.Time) time.Time {
	if next.IsZero() || !s.clock.now().After(next) {
		return next
	}
	s.purge(ctx)
	return s.nextPurge()
}

// purge asks the store to drop the namespace's windows that can no longer
// affect a rate.
func (s *Syncer) purge(ctx context.Context) {
	c := s.conf.Load()
	now := s.clock.ms()
	// Sizes read over a longer span are purged as of now moved back by
	// the span's extra windows, so that the span's windows stay.
	var sizes []time.Duration
	var err error
	back := int64(0)
	pctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	t0 := s.clock.now()
	purge := func() {
		if len(sizes) > 0 && err == nil {
			err = c.Strategy.Purge(pctx, c.Namespace, sizes, time.UnixMilli(now-back))
		}
	}
	for _, sr := range c.Series {
		if b := sr.Span() - sr.Size(); b != back {
			purge()
			sizes, back = sizes[:0], b
		}
		sizes = append(sizes, time.Duration(sr.Size())*time.Millisecond)
	}
	purge()
	if c.CountNodes && err == nil {
		err = c.Strategy.Purge(pctx, c.Namespace+"|nodes", []time.Duration{membersWindow}, time.UnixMilli(now))
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		c.Logger.Warn("ratesync: purge failed", "namespace", c.Namespace, "err", err)
	}
	s.report(Report{Op: "purge", Duration: s.clock.since(t0), Err: err})
}
