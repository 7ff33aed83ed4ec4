package syncer

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Report describes one exchange with the store, for metrics.
type Report struct {
	Namespace string
	Op        string // "sync", "fetch", "hits", "checks", "purge"
	Duration  time.Duration
	Pushed    int // diffs pushed
	Fetched   int // counters read
	Late      int // late diffs dropped
	Err       error
}

// Stats is a snapshot of a syncer's state. Its times are read from the
// syncer's Config.Clock.
type Stats struct {
	LastGood      time.Time // end of the last successful exchange with the store
	LastError     error
	LastErrorAt   time.Time
	StoreUp       bool   // the store answers: no exchange failed or hangs since the last that succeeded (see health)
	InFlight      int    // batches pushed and not acknowledged (>= 0)
	InFlightDiffs int    // diffs in those batches (>= 0)
	InDoubt       int    // check calls the store may have applied, to be sent again (ErrInDoubt)
	Dirty         int    // counters listed with a diff to push
	Pushes        uint64 // batches acknowledged
	Checks        uint64 // check calls answered by the store (strategy.Checker)
	PushErrors    uint64
	FetchErrors   uint64
	LateDropped   uint64 // diffs dropped because their window was over
	LocalHits     uint64 // synchronous hits counted locally while the store failed

	// The store's clock (offset.go): its time minus the node's, as last
	// estimated; 0 until measured, and for stores that do not tell time.
	ClockOffset   time.Duration
	ClockMeasured bool // the store tells time (strategy.Clock) and ClockOffset was measured
}

// stats holds what Stats reports. This file is the only writer of it.
type stats struct {
	mu    sync.Mutex // guards st; a leaf of the lock order
	st    Stats      // the fields below are filled in by Stats
	late  atomic.Uint64
	local atomic.Uint64
	rtt   atomic.Int64 // ns: moving average of store call durations
}

// callKind is a kind of store call, for the call counters of Stats.
type callKind uint8

const (
	callPush  callKind = iota // PushDiffs, PushAndCount
	callFetch                 // GetCounters
	callCheck                 // CheckAndCount
)

// countCall counts one store call of kind k that ended with err.
func (s *Syncer) countCall(k callKind, err error) {
	st := &s.stats
	st.mu.Lock()
	switch {
	case err != nil && k == callFetch:
		st.st.FetchErrors++
	case err != nil:
		st.st.PushErrors++
	case k == callPush:
		st.st.Pushes++
	case k == callCheck:
		st.st.Checks++
	}
	st.mu.Unlock()
}

// countLocal counts n hits counted on the node while the store failed.
func (s *Syncer) countLocal(n int) { s.stats.local.Add(uint64(n)) }

// report records the end of one exchange with the store: the RTT, the
// times of Stats, the store's state (markUp, markDown: the breaker and its
// log lines), and the observer's call.
func (s *Syncer) report(r Report) { s.record(r, true) }

// record is report; a failure marks the store down only when down is true
// (see fellShort).
func (s *Syncer) record(r Report, down bool) {
	c := s.conf.Load()
	r.Namespace = c.Namespace
	st := &s.stats
	if r.Err == nil && r.Op != "purge" {
		old := st.rtt.Load()
		if old == 0 {
			old = int64(r.Duration)
		}
		st.rtt.Store(old + (int64(r.Duration)-old)/8)
	}
	if r.Err != nil && errors.Is(r.Err, context.Canceled) && s.loop.stopping.Load() {
		return // our own cancellation while stopping says nothing of the store
	}
	if r.Op != "purge" {
		now := s.clock.now()
		// The store's state first: whoever sees the times of Stats move
		// sees the breaker as this exchange left it.
		switch {
		case r.Err == nil:
			s.markUp(r.Pushed)
		case down && !errors.Is(r.Err, context.Canceled): // a caller giving up says nothing of the store
			s.markDown(r.Op, r.Err)
		}
		st.mu.Lock()
		if r.Err != nil {
			st.st.LastError, st.st.LastErrorAt = r.Err, now
		} else {
			st.st.LastGood = now
		}
		st.mu.Unlock()
	}
	if c.Observe != nil {
		c.Observe(r)
	}
}

// RTT returns a moving average of the duration of the store calls that
// succeeded (pushes with their fetch, synchronous calls).
func (s *Syncer) RTT() time.Duration { return time.Duration(s.stats.rtt.Load()) }

// Stats returns a snapshot of the syncer's state. It never waits for a sync
// in progress.
func (s *Syncer) Stats() Stats {
	s.stats.mu.Lock()
	st := s.stats.st
	s.stats.mu.Unlock()
	st.StoreUp = !s.isDown()
	st.LateDropped = s.stats.late.Load()
	st.LocalHits = s.stats.local.Load()
	st.InFlight, st.InFlightDiffs = int(s.lane.nBatches.Load()), int(s.lane.nDiffs.Load())
	st.InDoubt = int(s.lane.nDoubts.Load())
	st.ClockOffset, st.ClockMeasured = s.clockStats()
	for _, sr := range s.conf.Load().Series {
		st.Dirty += sr.Dirty()
	}
	return st
}
