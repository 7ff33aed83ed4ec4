// Package gcfloor keeps the Go garbage collector's heap goal at or above a
// floor, for a process whose live heap is small but which allocates fast:
// a limiter node keeps a few MiB live while its requests allocate tens of
// MiB a second, and with GOGC's default (the goal twice the live heap) it
// would collect dozens of times a second. Each collection costs the same
// fixed work (stacks, roots, the stop phases, idle mark workers on every
// P), so their number, not their size, is the cost.
//
// After every collection the tuner sets GOGC (debug.SetGCPercent) so that
// the next goal is max(floor, live × (1 + base/100)): above the floor the
// collector runs as GOGC=base would have it. The heap therefore peaks near
// max(floor, twice the live heap), and a memory limit (GOMEMLIMIT,
// debug.SetMemoryLimit) still caps it: the runtime takes the lower goal.
package gcfloor

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// Tuner keeps the heap goal at or above its floor until Stop.
type Tuner struct {
	floor atomic.Int64 // bytes; 0: GOGC stays base
	base  int          // the GOGC in force when the tuner started

	seen atomic.Uint64 // collections the tuner has adjusted after

	mu      sync.Mutex // serializes adjust and Stop
	stopped bool
	percent int // the GOGC last set
	samples []metrics.Sample
}

// Start sets the heap floor at floor bytes (0: none until Set) and adjusts
// GOGC after each collection until Stop. base is the GOGC to keep where
// the floor does not matter: the value in force at start (100 unless the
// GOGC environment variable or debug.SetGCPercent changed it). With GOGC
// off, or 0, the tuner does nothing.
func Start(floor int64) *Tuner {
	t := &Tuner{samples: []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/gogc:percent"}}}
	metrics.Read(t.samples)
	t.floor.Store(max(floor, 0))
	t.base = -1 // off
	if v := t.samples[1].Value; v.Kind() == metrics.KindUint64 && v.Uint64() <= math.MaxInt32 {
		t.base = int(v.Uint64())
	}
	t.percent = t.base
	if t.base <= 0 { // GOGC off (or 0): the user's choice stands
		t.stopped = true
		return t
	}
	t.adjust()
	t.arm()
	return t
}

// Set changes the floor; 0 removes it. It takes effect at once.
func (t *Tuner) Set(floor int64) {
	t.floor.Store(max(floor, 0))
	t.adjust()
}

// Floor returns the floor in bytes.
func (t *Tuner) Floor() int64 { return t.floor.Load() }

// Percent returns the GOGC the tuner set last (base when the floor does
// not matter, or when the tuner is stopped).
func (t *Tuner) Percent() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.percent
}

// Stop ends the adjustments and puts GOGC back at base.
func (t *Tuner) Stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	t.stopped = true
	if t.percent != t.base {
		debug.SetGCPercent(t.base)
		t.percent = t.base
	}
}

// sentinel is an object that nothing references: the collection that
// finds it unreachable runs its cleanup, which adjusts GOGC and allocates
// the next one. Its pointer keeps it out of the tiny allocator, whose
// batched objects may never be collected.
type sentinel struct {
	_ *byte
	_ [2]uint64
}

// arm allocates the sentinel of the next collection.
func (t *Tuner) arm() {
	runtime.AddCleanup(new(sentinel), (*Tuner).collected, t)
}

// collected runs after a collection: it adjusts GOGC and arms the next
// one, unless the tuner stopped.
func (t *Tuner) collected() {
	t.seen.Add(1)
	if t.adjust() {
		t.arm()
	}
}

// adjust sets GOGC for the live heap of the last collection and the
// floor; false once the tuner stopped.
func (t *Tuner) adjust() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return false
	}
	metrics.Read(t.samples)
	p := percentFor(t.floor.Load(), t.samples[0].Value.Uint64(), t.base)
	if p != t.percent {
		debug.SetGCPercent(p)
		t.percent = p
	}
	return true
}

// heapMinimum is the runtime's smallest heap goal at GOGC=100 (4 MiB); it
// scales with GOGC, so a GOGC set for a live heap below it would put the
// goal above the floor: percentFor bounds GOGC by it too.
const heapMinimum = 4 << 20

// percentFor is the GOGC whose goal reaches floor: live × (1 + p/100) for
// the live heap, but no lower than heapMinimum × p/100, so that bound
// holds p to floor too. It is base where base's goal already reaches the
// floor.
func percentFor(floor int64, live uint64, base int) int {
	if floor <= 0 || live >= uint64(floor) {
		return base
	}
	p := float64(floor) * 100 / heapMinimum
	if live > 0 {
		p = min(p, math.Ceil(float64(uint64(floor)-live)*100/float64(live)))
	}
	return max(base, int(min(p, math.MaxInt32)))
}
