package syncer

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratesync/ratesync/strategy"
)

// Measuring the store's clock (strategy.Clock) and counting in it.
const (
	// clockOffsetWarn is the offset between a node's clock and its
	// store's beyond which the syncer logs a warning, once when the
	// estimate crosses it, and a notice once it is back within 90% of it.
	clockOffsetWarn = time.Second
	// offsetSamples is how many recent measurements the estimate is chosen
	// from: the one with the shortest round trip.
	offsetSamples = 8
	// measureEvery is the least time between two measurements of the
	// synchronous worker, which measures while calls flow.
	measureEvery = time.Second
	// maxHold bounds how far a lower estimate holds the namespace clock
	// still rather than moving it back; a bigger change steps it back.
	maxHold = 100 * time.Millisecond
	// intervalSlack widens each sample's interval by the resolution of the
	// clocks involved: a node clock read in whole milliseconds.
	intervalSlack = time.Millisecond
)

// sample is one measurement of the store's clock.
type sample struct {
	offset time.Duration // store time minus the node's halfway through the call
	rtt    time.Duration // the call's round trip
}

// consistent reports whether a and b can describe the same pair of clocks:
// the store read its clock somewhere within each round trip, so the true
// offset lies within rtt/2 of each sample's; samples whose intervals are
// disjoint prove that a clock moved between them.
func consistent(a, b sample) bool {
	d := a.offset - b.offset
	if d < 0 {
		d = -d
	}
	return d <= (a.rtt+b.rtt)/2+2*intervalSlack
}

// estimator chooses the offset estimate from recent samples, as NTP's
// clock filter does: of the last offsetSamples samples, the one with the
// shortest round trip, whose offset is the least uncertain (one slow reply
// does not move the estimate). A sample inconsistent with the current
// estimate (a node's clock was stepped, the store failed over to a server
// with another clock) replaces the older ones. Its zero value is empty;
// it is not safe for concurrent use.
type estimator struct {
	ring [offsetSamples]sample
	n    int // samples held, up to offsetSamples
	next int // where the next sample goes
}

// add records s and returns the estimate.
func (e *estimator) add(s sample) sample {
	if e.n > 0 && !consistent(s, e.best()) {
		e.reset()
	}
	e.ring[e.next] = s
	e.next = (e.next + 1) % offsetSamples
	e.n = min(e.n+1, offsetSamples)
	return e.best()
}

// best returns the held sample with the shortest round trip, the newest of
// equals; the zero sample when none is held.
func (e *estimator) best() sample {
	var b sample
	for i := range e.n {
		// Newest first: the sample before next, going back.
		s := e.ring[(e.next-1-i+2*offsetSamples)%offsetSamples]
		if i == 0 || s.rtt < b.rtt {
			b = s
		}
	}
	return b
}

// reset forgets every sample.
func (e *estimator) reset() { *e = estimator{} }

// nsClock is the namespace clock's adjustment of the node's: immutable,
// swapped whole, read with one atomic load.
type nsClock struct {
	off   int64 // ms added to the node's clock
	floor int64 // the namespace clock reads no less: it never goes back on a small change of off
}

// at returns the namespace clock at node, the node's clock (Unix ms).
func (c *nsClock) at(node int64) int64 { return max(node+c.off, c.floor) }

// offset is the syncer's measure of the store's clock, and the adjustment
// it makes to the namespace clock (see the package documentation, Time).
type offset struct {
	cur atomic.Pointer[nsClock] // applied; never nil once newClock returned

	mu       sync.Mutex // guards what follows; a leaf of the lock order
	est      estimator
	measured sample    // the estimate, when known
	known    bool      // a measurement succeeded
	enabled  bool      // Config.StoreClock: the namespace counts in store time
	tried    time.Time // Config.Clock: the last measurement the worker started
	downSeen bool      // the worker saw the store down since its last measurement
	gen      uint64    // Reconfigures so far: a measurement that spans one is dropped
	beyond   bool      // the estimate is beyond clockOffsetWarn, and was logged so
}

func (o *offset) init(enabled bool) {
	o.enabled = enabled
	o.cur.Store(&nsClock{floor: math.MinInt64})
}

// target returns the offset the namespace clock should have, ms: the
// estimate rounded to the millisecond, kept at cur unless it moved a whole
// millisecond away from it (so that noise below the clock's resolution does
// not flip it); 0 when the namespace counts on the node's clock or no
// measurement succeeded. Callers hold mu.
func (o *offset) target(cur int64) int64 {
	if !o.enabled || !o.known {
		return 0
	}
	m := o.measured.offset
	if d := m - time.Duration(cur)*time.Millisecond; d > -time.Millisecond && d < time.Millisecond {
		return cur
	}
	return m.Round(time.Millisecond).Milliseconds()
}

// apply sets the namespace clock's offset to target, at node (the node's
// clock, ms). A change forward, or back by at most maxHold, never moves the
// namespace clock back: it is held at its reading of this instant until
// the node's clock catches up. A change back by more (a first measurement
// of a clock far ahead, a node clock stepped) steps back at once: holding
// the clock still for that long would keep counting in windows the store
// has not reached. Callers hold mu.
func (o *offset) apply(node int64) {
	old := o.cur.Load()
	off := o.target(old.off)
	if off == old.off {
		return
	}
	next := &nsClock{off: off, floor: old.at(node)}
	if time.Duration(old.off-off)*time.Millisecond > maxHold {
		next.floor = math.MinInt64
	}
	o.cur.Store(next)
}

// measureOffset asks the store for its time once (within HitTimeout and
// ctx), updates the estimate and the namespace clock, and reports whether
// the store answered. It does nothing, and reports false, when the
// strategy does not tell time. It needs no lock of the syncer's.
func (s *Syncer) measureOffset(ctx context.Context) bool {
	c := s.conf.Load()
	sc, ok := c.Strategy.(strategy.Clock)
	if !ok {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, c.HitTimeout)
	defer cancel()
	o := &s.offset
	o.mu.Lock()
	gen := o.gen
	o.mu.Unlock()
	t0 := s.clock.now()
	st, err := sc.Time(ctx)
	t1 := s.clock.now()
	if err != nil {
		if ctx.Err() == nil || !s.loop.stopping.Load() {
			c.Logger.Debug("ratesync: reading the store's clock failed", "namespace", c.Namespace, "err", err)
		}
		return false
	}
	rtt := t1.Sub(t0)
	smp := sample{offset: st.Sub(t0.Add(rtt / 2)), rtt: rtt}
	o.mu.Lock()
	if o.gen != gen {
		o.mu.Unlock()
		return true // answered, but the store may have been replaced since
	}
	o.measured, o.known = o.est.add(smp), true
	o.tried, o.downSeen = t1, false // a sync's or a probe's measurement counts for measureIfDue
	o.apply(s.clock.node())
	crossed, m, enabled := o.cross()
	o.mu.Unlock()
	if crossed {
		logOffset(c, m, enabled)
	}
	return true
}

// cross reports whether the estimate crossed clockOffsetWarn, out (beyond
// it) or back in (within 90% of it), since it was last logged, and records
// the crossing. Callers hold mu.
func (o *offset) cross() (crossed bool, estimate sample, enabled bool) {
	m := o.measured.offset
	abs := max(m, -m)
	switch {
	case !o.beyond && abs > clockOffsetWarn:
		o.beyond, crossed = true, true
	case o.beyond && abs <= clockOffsetWarn*9/10:
		o.beyond, crossed = false, true
	}
	return crossed, o.measured, o.enabled
}

// logOffset logs a crossing of clockOffsetWarn by the estimate m: WARN
// beyond it, INFO back within.
func logOffset(c *conf, m sample, enabled bool) {
	clock := "node"
	if enabled {
		clock = "store"
	}
	abs := max(m.offset, -m.offset)
	if abs > clockOffsetWarn {
		c.Logger.Warn("ratesync: this node's clock is far from the store's", "namespace", c.Namespace,
			"offset", m.offset, "bound", clockOffsetWarn, "rtt", m.rtt, "windows_in", clock)
		return
	}
	c.Logger.Info("ratesync: this node's clock is near the store's again", "namespace", c.Namespace,
		"offset", m.offset, "bound", clockOffsetWarn, "windows_in", clock)
}

// measureIfDue is the synchronous worker's measurement between its turns:
// at most once per measureEvery while calls flow, and at once after the
// store was seen down (it may have failed over to a server with another
// clock); never while it is down.
func (s *Syncer) measureIfDue(ctx context.Context) {
	o := &s.offset
	if s.isDown() {
		o.mu.Lock()
		o.downSeen = true
		o.mu.Unlock()
		return
	}
	now := s.clock.now()
	o.mu.Lock()
	due := o.downSeen || o.tried.IsZero() || now.Sub(o.tried) >= measureEvery
	if due {
		o.tried, o.downSeen = now, false
	}
	o.mu.Unlock()
	if due {
		s.measureOffset(ctx)
	}
}

// reconfigureOffset follows a new configuration c: whether the namespace
// counts in store time, and a store that may be another one, with another
// clock. The samples so far are forgotten (and a measurement under way is
// dropped); the namespace clock keeps its offset until the store's next
// answer, or goes back to the node's when the store does not tell time.
func (s *Syncer) reconfigureOffset(c *conf) {
	o := &s.offset
	o.mu.Lock()
	defer o.mu.Unlock()
	o.gen++
	o.enabled = c.StoreClock
	o.est.reset()
	if _, ok := c.Strategy.(strategy.Clock); !ok {
		o.known, o.measured, o.beyond = false, sample{}, false
	}
	o.apply(s.clock.node())
}

// clockStats returns the estimate for Stats.
func (s *Syncer) clockStats() (offset time.Duration, measured bool) {
	o := &s.offset
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.measured.offset, o.known
}

// Now returns the namespace clock, Unix ms: Config.Now plus the store's
// offset when the namespace counts in store time (Config.StoreClock) and
// the offset was measured; Config.Now otherwise. One atomic load; it never
// allocates. A small change of the offset never moves it back (see apply).
func (s *Syncer) Now() int64 { return s.clock.ms() }
