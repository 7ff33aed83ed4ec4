package syncer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// health is the store's state as the namespace sees it: a breaker. While
// the store is up, synchronous calls and near-limit checks go to it, each
// caller waiting at most HitTimeout. An exchange that fails or times out
// marks it down (markDown): from then on callers decide on the node at
// once, without asking the store or waiting, until a probe succeeds. In
// synchronous mode the worker probes once a back-off has passed (retryMin,
// doubling up to retryMax): it pushes what was counted meanwhile, and
// marks the store up when that succeeds. In periodic mode each sync is the
// probe. A sync that takes longer than HitTimeout marks the store down
// while it runs (watch), so a hung store is seen within one HitTimeout of
// the exchange it holds up.
type health struct {
	// Read without a lock by Hit and Check.
	down atomic.Bool  // true: callers decide on the node
	next atomic.Int64 // Config.Clock, Unix ns: when the next probe is due

	lastSync atomic.Int64 // ns: how long the last successful sync took (watch)
	lastOK   atomic.Int64 // Config.Clock, Unix ns: when an exchange last succeeded
	upAt     atomic.Int64 // Config.Clock, Unix ns: when the store was last marked up after an outage of a call timeout or more
	downAt   atomic.Int64 // Config.Clock, Unix ns: when the store went down; 0 while it is up

	mu      sync.Mutex    // a leaf of the lock order; guards what follows
	backoff time.Duration // the current back-off (synchronous mode)
}

// isDown reports whether callers decide on the node without asking the
// store. Lock-free.
func (s *Syncer) isDown() bool { return s.health.down.Load() }

// probeDue reports whether the store is down and its back-off has passed:
// the synchronous worker then probes it.
func (s *Syncer) probeDue() bool {
	return s.health.down.Load() && s.clock.now().UnixNano() >= s.health.next.Load()
}

// retryIn returns the wait until the next probe is due; 0 when it is.
func (s *Syncer) retryIn() time.Duration {
	return max(0, time.Duration(s.health.next.Load()-s.clock.now().UnixNano()))
}

// markDown records a failed exchange (op, err): the store is down until a
// probe succeeds; the back-off before the next probe doubles, from
// retryMin up to retryMax. The first failure logs one WARN line.
func (s *Syncer) markDown(op string, err error) {
	h := &s.health
	now := s.clock.now()
	h.mu.Lock()
	h.backoff = min(max(h.backoff*2, retryMin), retryMax)
	h.next.Store(now.Add(h.backoff).UnixNano())
	was := h.down.Swap(true)
	if !was {
		h.downAt.Store(now.UnixNano())
	}
	h.mu.Unlock()
	s.queue.wake() // the synchronous worker arms its probe
	if !was {
		c := s.conf.Load()
		c.Logger.Warn("ratesync: store down: deciding on this node until it answers",
			"namespace", c.Namespace, "op", op, "timeout", c.HitTimeout.String(), "err", err)
	}
}

// markUp records a successful exchange. After a failure it logs one INFO
// line: how long the store was down and what was pending then (pushed now,
// or about to be), and resets the back-off. An outage of a call timeout or
// more, counted from the last exchange that succeeded, starts a recovery
// (Recovering): other nodes may have decided on their shares meanwhile.
func (s *Syncer) markUp(pending int) {
	h := &s.health
	now := s.clock.now()
	last := h.lastOK.Swap(now.UnixNano())
	if !h.down.Load() {
		return
	}
	h.mu.Lock()
	was := h.down.Swap(false)
	since := time.Unix(0, h.downAt.Load())
	h.backoff = 0
	h.next.Store(0)
	if was {
		h.downAt.Store(0)
		if now.UnixNano()-last >= int64(s.conf.Load().HitTimeout) {
			h.upAt.Store(now.UnixNano())
		}
	}
	h.mu.Unlock()
	if was {
		c := s.conf.Load()
		c.Logger.Info("ratesync: store back up",
			"namespace", c.Namespace, "down_for", now.Sub(since).Round(time.Millisecond).String(),
			"pending", pending, "local_hits", s.stats.local.Load())
	}
}

// watch marks the store down when a sync started now is still under way
// after HitTimeout and twice the last successful sync's duration (a sync
// of many diffs may rightly take longer than one call): a hang of the
// store shows within that, not only when the sync's Timeout ends it. Call
// the returned function when the sync ends.
func (s *Syncer) watch(op string) (stop func()) {
	c := s.conf.Load()
	d := max(c.HitTimeout, 2*time.Duration(s.health.lastSync.Load()))
	if d >= c.Timeout {
		return func() {} // the sync's own timeout comes first
	}
	t := time.AfterFunc(d, func() {
		s.markDown(op, fmt.Errorf("syncer: namespace %q: the store has not answered for %v", c.Namespace, d))
	})
	return func() { t.Stop() }
}

// fellShort reports whether a synchronous call that failed after trying
// since start (retrying) tried for less than half the call timeout: its
// requests had waited most of their timeout in the queue, behind slower
// calls. Such a failure does not mark the store down: a store that loses
// replies, or answers slowly, keeps answering the next calls; one that
// does not answer at all fails a call that had its whole timeout.
func (s *Syncer) fellShort(start time.Time) bool {
	return time.Since(start) < s.conf.Load().HitTimeout/2
}

// storeFailed reports whether err, which ended an exchange run within ctx,
// is a failure of the store (an error it returned, or a timeout), as
// opposed to the cancellation of ctx, by halt or by a caller giving up,
// which says nothing of the store and never marks it down.
func storeFailed(ctx context.Context, err error) bool {
	return err != nil && !(errors.Is(err, context.Canceled) && errors.Is(ctx.Err(), context.Canceled))
}

// RetryIn returns, while the store is down, the wait until its next probe
// is due (0 when it is, or when the store is up).
func (s *Syncer) RetryIn() time.Duration {
	if !s.isDown() {
		return 0
	}
	return s.retryIn()
}

// Recovering reports whether the store came back up, after an outage of a
// call timeout or more, less than one probe interval (the sync interval,
// or the longest back-off in synchronous mode) and one call timeout ago:
// the other nodes may not have seen it yet, nor pushed what they decided
// on their shares meanwhile, so the store's counts may still miss it. A
// shorter outage (a lost reply, a slow call) cannot have let any node
// decide on its share (ShareIn).
func (s *Syncer) Recovering() bool {
	at := s.health.upAt.Load()
	if at == 0 {
		return false
	}
	c := s.conf.Load()
	return s.clock.now().UnixNano()-at < int64(probeEvery(c.Rate)+c.HitTimeout)
}

// probeEvery bounds how long a node whose store is down takes to try it
// again: its next sync in periodic mode, the longest back-off in
// synchronous mode.
func probeEvery(rate time.Duration) time.Duration {
	if rate > 0 {
		return rate
	}
	return retryMax
}

// ShareIn returns, while the store is down, how long from now until a node
// may decide on its share of the limits in windows that start from then on
// (negative once that instant has passed; see ratelimiting's store-down
// behaviour): one probe interval (Recovering) and two call timeouts after
// the store was marked down. Every node that could still reach the store
// then would have seen it (each probe tries, and a store that answers one
// node answers all), and a node that sees the store back after an outage
// that long decides in the store against the shares until the others have
// too (Recovering). So a store that loses some replies, or answers one node
// late, never lets a node decide on its own while the others take quota
// from the store. ok is false while the store is up.
func (s *Syncer) ShareIn() (d time.Duration, ok bool) {
	at := s.health.downAt.Load()
	if at == 0 || !s.isDown() {
		return 0, false
	}
	c := s.conf.Load()
	from := at + int64(probeEvery(c.Rate)+2*c.HitTimeout)
	return time.Duration(from - s.clock.now().UnixNano()), true
}

// Answered reports whether the store has answered this namespace at least
// once since it started.
func (s *Syncer) Answered() bool { return s.health.lastOK.Load() != 0 }
