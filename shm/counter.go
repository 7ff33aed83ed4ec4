package shm

import (
	"math"
	"runtime"
	"sync/atomic"
)

// dead is the diff of a counter that eviction has removed from its window.
// It is a NaN payload: diffs are always finite, so it can never be a count.
const dead uint64 = 0x7ff8_dead_0000_0001

// taking is the diff of a counter while take moves its diff into sync: a NaN
// payload too. It lasts the two atomic steps of the move; whoever reads or
// changes the counter meanwhile waits for them (see loadDiff), so that no
// one sees the amount moved in both parts or in neither.
const taking uint64 = 0x7ff8_7a4e_0000_0001

// Counter is one window's count of one key on this node: diff (local hits not
// yet taken by the syncer) and sync (the cluster total as last read, plus
// diffs taken and not yet seen in a store read). Both are float64 values kept
// as bits and changed with compare-and-swap only. The counter holds its key
// too (its window's table and its series' dirty list find it by the key it
// holds): 32 bytes and the key's.
//
// Every value a reader gets is sync + diff as of one instant: the two words
// change one at a time, and the only change that must touch both, take's
// move of diff into sync, marks diff while it runs. An add is one CAS on
// diff; it checks that sync did not change around it, so the value it
// returns (and the value addIf judges) is that of the instant of its
// CAS.
//
// A Counter is safe for concurrent use. Its zero value is a live counter of
// zero. Counters are created by Window; callers outside shm only read them
// (Value): every change goes through a Window, which keeps the invariants.
type Counter struct {
	diff atomic.Uint64
	sync atomic.Uint64
	key  string // never changed once the counter is in a table
}

// loadDiff returns diff's bits once no take is moving them. A move is two
// atomic operations of the syncer's goroutine; a waiter yields the processor
// after a few tries in case that goroutine was descheduled in between.
func (c *Counter) loadDiff() uint64 {
	for i := 0; ; i++ {
		if d := c.diff.Load(); d != taking {
			return d
		}
		if i >= 16 {
			runtime.Gosched()
		}
	}
}

// Value returns sync + diff as of one instant.
func (c *Counter) Value() float64 {
	for {
		d := c.loadDiff()
		s := c.sync.Load()
		if d == dead {
			return math.Float64frombits(s)
		}
		// A take that began after d was read may have added d to s already:
		// diff has changed then, and the pair is read again.
		if c.diff.Load() == d {
			return math.Float64frombits(s) + math.Float64frombits(d)
		}
	}
}

// diffValue returns the hits not yet taken by the syncer.
func (c *Counter) diffValue() float64 {
	d := c.loadDiff()
	if d == dead {
		return 0
	}
	return math.Float64frombits(d)
}

// syncValue returns the synced part of the counter.
func (c *Counter) syncValue() float64 { return math.Float64frombits(c.sync.Load()) }

// setSync replaces the synced part of the counter.
func (c *Counter) setSync(v float64) { c.sync.Store(math.Float64bits(v)) }

// addSync adds v to the synced part of the counter.
func (c *Counter) addSync(v float64) {
	for {
		old := c.sync.Load()
		if c.sync.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

// add adds v to diff and returns the counter's value right after. It reports
// whether diff was zero before (the caller must then list the counter as
// dirty) and alive=false, changing nothing, when the counter is dead.
func (c *Counter) add(v float64) (after float64, wasZero, alive bool) {
	for {
		old := c.loadDiff()
		if old == dead {
			return 0, false, false
		}
		s := c.sync.Load()
		d := math.Float64frombits(old) + v
		if !c.diff.CompareAndSwap(old, bits(d)) {
			continue
		}
		// sync unchanged since before the CAS: (s, d) is the pair of the
		// CAS's instant. Otherwise a take or a fetch ran meanwhile: read the
		// value afresh (it holds v, in diff or moved into sync).
		if c.sync.Load() == s {
			return d + math.Float64frombits(s), old == 0, true
		}
		return c.Value(), old == 0, true
	}
}

// addIf adds v to diff only when fits(the counter's value), judged on the
// value at the instant of the add. It returns the value before, whether it
// added, whether the counter must be listed as dirty (its diff went from
// zero to non-zero), and alive=false when the counter is dead.
func (c *Counter) addIf(v float64, fits func(before float64) bool) (before float64, added, list, alive bool) {
	for {
		old := c.loadDiff()
		if old == dead {
			return 0, false, list, false
		}
		s := c.sync.Load()
		d := math.Float64frombits(old)
		before = d + math.Float64frombits(s)
		if !fits(before) {
			if c.diff.Load() == old && c.sync.Load() == s {
				return before, false, list, true
			}
			continue // changed while judged: judge again
		}
		if !c.diff.CompareAndSwap(old, bits(d+v)) {
			continue
		}
		list = list || old == 0
		if c.sync.Load() == s {
			return before, true, list, true
		}
		// A take or a fetch changed sync around the CAS: before may not be
		// the value of the CAS's instant. Take v back (a take may have moved
		// it into sync already: the diff then goes negative, to be pushed)
		// and judge again.
		_, wasZero, alive := c.add(-v)
		list = list || wasZero
		if !alive {
			// Taken, pushed and evicted before it could be taken back: v
			// is counted, so report it admitted.
			return before, true, list, true
		}
	}
}

// take moves diff into sync and returns the amount moved. diff is marked
// taking while sync is raised, so that no one reads or adds meanwhile (see
// loadDiff): Value neither dips nor counts the amount twice.
func (c *Counter) take() float64 {
	for {
		old := c.loadDiff()
		if old == 0 || old == dead {
			return 0
		}
		if !c.diff.CompareAndSwap(old, taking) {
			continue // a concurrent add changed diff: take its new value
		}
		d := math.Float64frombits(old)
		c.addSync(d)
		c.diff.Store(0) // only this goroutine changes a taking diff
		return d
	}
}

// kill marks a counter with no diff dead. It fails when diff is not zero.
func (c *Counter) kill() bool { return c.diff.CompareAndSwap(0, dead) }

// killAny marks a counter dead whatever its diff (local-only counters, whose
// diff is never pushed). It fails when the counter is already dead.
func (c *Counter) killAny() bool {
	for {
		old := c.loadDiff()
		if old == dead {
			return false
		}
		if c.diff.CompareAndSwap(old, dead) {
			return true
		}
	}
}

// isDead reports whether eviction removed the counter.
func (c *Counter) isDead() bool { return c.diff.Load() == dead }

// bits returns the bits of v, with -0 stored as 0 so that a zero diff always
// reads as "nothing to push".
func bits(v float64) uint64 {
	if v == 0 {
		return 0
	}
	return math.Float64bits(v)
}
