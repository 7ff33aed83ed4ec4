package syncer

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// health is the store's down state as the synchronous path sees it: after
// a failure, hits are counted and checks decided on the node, without
// asking the store, until a back-off has passed (retryMin, doubling up to
// retryMax); the next exchange then tries the store again.
type health struct {
	// downUntil is the clock (Unix ns) until which the store is not asked;
	// 0 when it is up. Read without a lock by Hit and Check.
	downUntil atomic.Int64

	// Guarded by lane.mu.
	down    bool          // the last exchange failed and none has succeeded since
	backoff time.Duration // the current back-off
}

// isDown reports whether the store failed recently enough that hits are
// counted locally without asking it.
func (s *Syncer) isDown() bool {
	until := s.health.downUntil.Load()
	return until != 0 && s.clock.now().UnixNano() < until
}

// retryIn returns the wait until the back-off ends; 0 when it has.
func (s *Syncer) retryIn() time.Duration {
	return max(0, time.Duration(s.health.downUntil.Load()-s.clock.now().UnixNano()))
}

// markDown records a failed exchange: the back-off doubles, from retryMin
// up to retryMax. Callers hold lane.mu.
func (s *Syncer) markDown() {
	h := &s.health
	h.backoff = min(max(h.backoff*2, retryMin), retryMax)
	h.down = true
	h.downUntil.Store(s.clock.now().Add(h.backoff).UnixNano())
}

// markUp records a successful exchange after failures. Callers hold lane.mu.
func (s *Syncer) markUp() {
	h := &s.health
	h.down, h.backoff = false, 0
	h.downUntil.Store(0)
}

// storeFailed reports whether err, which ended an exchange run within ctx,
// is a failure of the store (an error it returned, or a timeout), as
// opposed to the cancellation of ctx, by halt or by a caller giving up,
// which says nothing of the store and never marks it down.
func storeFailed(ctx context.Context, err error) bool {
	return err != nil && !(errors.Is(err, context.Canceled) && errors.Is(ctx.Err(), context.Canceled))
}
