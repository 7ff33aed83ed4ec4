// Package gcfloor keeps the Go garbage collector's heap goal at or above a
// floor, for a process whose live heap is small beside what it allocates:
// with GOGC's default (the goal twice the live heap) a limiter node under
// load collected about 30 times a second (BENCHMARKS.md, section 19), and
// once or twice a second with the floor. Each collection costs the same
// fixed work (stacks, roots, the stop phases, idle mark workers on every
// P), so their number, not their size, is the cost.
//
// After each collection (the tuner looks every PollEvery) it sets GOGC
// (debug.SetGCPercent) so that the next goal is the larger of the floor
// and GOGC=base's own goal: above the floor the collector runs as base
// would have it. The runtime's goal is live + (live + stacks + globals) ×
// GOGC/100, and no less than its heap minimum, 4 MiB × GOGC/100; the tuner
// holds both to the floor. The heap therefore peaks near the larger of the
// floor and base's goal, but for one lag: a goal is set when a collection
// ends, from the GOGC in force, and the tuner corrects it within PollEvery.
// A live heap that grows many times over within one collection's span
// (from under 4 MiB) gets, until then, a goal of up to live × (1 +
// floor/4 MiB). A memory limit (GOMEMLIMIT, debug.SetMemoryLimit) still
// caps the goal: the runtime takes the lower one.
package gcfloor

import (
	"math"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// PollEvery is how often the tuner reads what the last collection found.
const PollEvery = 50 * time.Millisecond

// Tuner keeps the heap goal at or above its floor until Stop.
type Tuner struct {
	floor atomic.Int64 // bytes; 0: GOGC stays base
	base  int          // the GOGC in force when the tuner started; -1: off

	mu      sync.Mutex // serializes adjust and Stop; guards what follows
	stopped bool
	percent int // the GOGC last set
	samples []metrics.Sample

	stop chan struct{} // closed by Stop
	done chan struct{} // closed when the poller returns
}

// The metrics adjust reads, in this order.
var sampleNames = []string{
	"/gc/heap/live:bytes",
	"/gc/scan/stack:bytes",
	"/gc/scan/globals:bytes",
	"/gc/gogc:percent",
}

// Start sets the heap floor at floor bytes (0: none until Set) and adjusts
// GOGC after each collection until Stop. base is the GOGC to keep where
// the floor does not matter: the value in force at start (100 unless the
// GOGC environment variable or debug.SetGCPercent changed it). With GOGC
// off, or 0, the tuner does nothing.
func Start(floor int64) *Tuner {
	t := &Tuner{stop: make(chan struct{}), done: make(chan struct{})}
	for _, name := range sampleNames {
		t.samples = append(t.samples, metrics.Sample{Name: name})
	}
	metrics.Read(t.samples)
	t.floor.Store(max(floor, 0))
	t.base = -1 // off
	if v := t.samples[3].Value; v.Kind() == metrics.KindUint64 && v.Uint64() <= math.MaxInt32 {
		t.base = int(v.Uint64())
	}
	t.percent = t.base
	if t.base <= 0 { // GOGC off (or 0): the user's choice stands
		t.stopped = true
		close(t.done)
		return t
	}
	t.adjust()
	go t.poll()
	return t
}

// Set changes the floor; 0 removes it. It takes effect at once.
func (t *Tuner) Set(floor int64) {
	t.floor.Store(max(floor, 0))
	t.adjust()
}

// Floor returns the floor in bytes.
func (t *Tuner) Floor() int64 { return t.floor.Load() }

// Stop ends the adjustments and puts GOGC back at base.
func (t *Tuner) Stop() {
	t.mu.Lock()
	if t.stopped {
		t.mu.Unlock()
		<-t.done
		return
	}
	t.stopped = true
	close(t.stop)
	if t.percent != t.base {
		debug.SetGCPercent(t.base)
		t.percent = t.base
	}
	t.mu.Unlock()
	<-t.done
}

// poll adjusts GOGC every PollEvery until Stop: the live heap, stacks and
// globals it reads change only when a collection ends, and GOGC is set
// only when the percentage changes.
func (t *Tuner) poll() {
	defer close(t.done)
	tick := time.NewTicker(PollEvery)
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-tick.C:
			t.adjust()
		}
	}
}

// adjust sets GOGC for the last collection's live heap, stacks and
// globals, and the floor.
func (t *Tuner) adjust() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	metrics.Read(t.samples)
	roots := t.samples[1].Value.Uint64() + t.samples[2].Value.Uint64()
	p := percentFor(t.floor.Load(), t.samples[0].Value.Uint64(), roots, t.base)
	if p != t.percent {
		debug.SetGCPercent(p)
		t.percent = p
	}
}

// heapMinimum is the runtime's smallest heap goal at GOGC=100 (4 MiB, but
// 512 KiB under GOEXPERIMENT=heapminimum512kib, where a small live heap
// then gets a goal under the floor); it scales with GOGC, so a GOGC set
// for a live heap below it would put the goal above the floor: percentFor
// bounds GOGC by it too.
const heapMinimum = 4 << 20

// percentFor is the GOGC whose goal reaches floor: live + (live + roots)
// × p/100 for the live heap and the stacks and globals the collector
// scans, but no lower than heapMinimum × p/100, so that bound holds p to
// floor too. It is base where base's goal already reaches the floor.
func percentFor(floor int64, live, roots uint64, base int) int {
	if floor <= 0 || live >= uint64(floor) {
		return base
	}
	p := float64(floor) * 100 / heapMinimum
	if scanned := live + roots; scanned > 0 {
		p = min(p, math.Ceil(float64(uint64(floor)-live)*100/float64(scanned)))
	}
	return max(base, int(min(p, math.MaxInt32)))
}
