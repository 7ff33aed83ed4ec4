package shm

import (
	"strings"
	"sync/atomic"
	"time"

	"github.com/puzpuzpuz/xsync/v3"
)

// retiredBit is set in Window.count once the window is dropped from its
// series; counts of a retired window no longer weigh on its dict.
const retiredBit = int64(1) << 62

// Window holds the counters of one window start of a Series.
//
// A Window is safe for concurrent use. Windows are made by Series.Window.
type Window struct {
	series    *Series
	start     int64     // window start, Unix milliseconds
	startTime time.Time // the same, as a time
	mp        atomic.Pointer[xsync.MapOf[string, *Counter]]
	// mu is held shared while a counter is made or removed, and exclusively
	// while compact moves the counters to a fresh map. Adds to existing
	// counters take no lock.
	mu   *xsync.RBMutex
	prev atomic.Pointer[Window] // the window just before this one, when held
	// count is the number of counters in m, with retiredBit once dropped.
	count atomic.Int64
	// pending is the number of dirty-list entries of this window that the
	// syncer has not taken yet; a window with pending entries is not dropped.
	pending atomic.Int64
}

func newWindow(s *Series, start int64) *Window {
	w := &Window{series: s, start: start, startTime: time.UnixMilli(start), mu: xsync.NewRBMutex()}
	w.mp.Store(xsync.NewMapOf[string, *Counter]())
	return w
}

func (w *Window) m() *xsync.MapOf[string, *Counter] { return w.mp.Load() }

// Start returns the window start in Unix milliseconds.
func (w *Window) Start() int64 { return w.start }

// StartTime returns the window start as a time.
func (w *Window) StartTime() time.Time { return w.startTime }

// Series returns the series the window belongs to.
func (w *Window) Series() *Series { return w.series }

// Prev returns the window just before this one, or nil when it is not held.
func (w *Window) Prev() *Window { return w.prev.Load() }

// len returns the number of counters in the window.
func (w *Window) len() int { return int(w.count.Load() &^ retiredBit) }

// Counter returns the live counter of key, or nil.
func (w *Window) Counter(key string) *Counter {
	c, ok := w.m().Load(key)
	if !ok || c.isDead() {
		return nil
	}
	return c
}

// Value returns the count of key in the window on this node, 0 when absent.
func (w *Window) Value(key string) float64 {
	if c, ok := w.m().Load(key); ok {
		return c.Value()
	}
	return 0
}

// Range calls fn for each live counter until fn returns false. It is not a
// snapshot: counters made or removed meanwhile may or may not be seen.
func (w *Window) Range(fn func(key string, c *Counter) bool) {
	w.m().Range(func(key string, c *Counter) bool {
		if c.isDead() {
			return true
		}
		return fn(key, c)
	})
}

// Add adds v to the diff of key's counter, creating the counter when needed,
// and returns the counter and its value right after the add. It returns a
// nil counter and v when the dict is full and the counter could not be made
// (the hit is then not counted: see the package documentation). now is the
// caller's clock in Unix milliseconds.
func (w *Window) Add(key string, v float64, now int64) (*Counter, float64) {
	c, ok := w.m().Load(key)
	for {
		if !ok {
			if c = w.create(key, now); c == nil {
				return nil, v
			}
		}
		after, wasZero, alive := c.add(v)
		if !alive {
			ok = false // evicted under us: create replaces the dead counter
			continue
		}
		if wasZero {
			w.series.list(w, key, c)
		}
		return c, after
	}
}

// AddIfAtMost adds v to key's diff only when the counter's value plus v stays
// at most ceiling. It returns the value before, whether v was added, and the
// counter (nil when the dict is full; the hit is then judged against a zero
// count and not counted).
func (w *Window) AddIfAtMost(key string, v, ceiling float64, now int64) (before float64, added bool, c *Counter) {
	return w.AddIf(key, v, func(before float64) bool { return before+v <= ceiling }, now)
}

// AddIf adds v to key's diff only when fits(the counter's value), judged on
// the value at the instant of the add (fits is called again when the
// counter changed meanwhile; it must not keep its argument). It returns as
// AddIfAtMost; a full dict judges fits(0).
func (w *Window) AddIf(key string, v float64, fits func(before float64) bool, now int64) (before float64, added bool, c *Counter) {
	for {
		var ok bool
		c, ok = w.m().Load(key)
		if !ok || c.isDead() {
			if c = w.create(key, now); c == nil {
				return 0, fits(0), nil
			}
		}
		before, added, wasZero, alive := c.addIf(v, fits)
		if !alive {
			continue
		}
		if wasZero {
			w.series.list(w, key, c)
		}
		return before, added, c
	}
}

// TakeKey moves the diff of key's counter into its sync part, as the syncer
// does for every listed counter, and returns the amount moved (0 when the
// counter is absent or has none). The counter stays listed; the syncer's
// next Take finds nothing left to move. For the syncer: the amount must be
// pushed.
func (w *Window) TakeKey(key string) float64 {
	if c, ok := w.m().Load(key); ok {
		return c.take()
	}
	return 0
}

// ensure returns key's counter, creating it when needed; nil when the dict
// is full.
func (w *Window) ensure(key string, now int64) *Counter {
	if c, ok := w.m().Load(key); ok && !c.isDead() {
		return c
	}
	return w.create(key, now)
}

// AddTaken counts v for key as already taken by the syncer: v goes to the
// synced part, as an add and its take in one step (a hit the syncer pushes
// at once). It returns the counter, nil when the dict is full. For the
// syncer.
func (w *Window) AddTaken(key string, v float64, now int64) *Counter {
	c := w.ensure(key, now)
	if c != nil {
		c.addSync(v)
	}
	return c
}

// SetSynced sets the synced part of key's counter to v: the store's total
// plus what of it the syncer has in flight. With create the counter is made
// when missing; otherwise only a live counter is set. It returns the
// counter set, nil when none. For the syncer.
func (w *Window) SetSynced(key string, v float64, create bool, now int64) *Counter {
	var c *Counter
	if create {
		c = w.ensure(key, now)
	} else {
		c = w.Counter(key)
	}
	if c != nil {
		c.setSync(v)
	}
	return c
}

// create makes key's counter, or returns the live one another goroutine made.
func (w *Window) create(key string, now int64) *Counter {
	d := w.series.dict
	if !d.admit(now) {
		return nil
	}
	nc := new(Counter)
	made := false
	t := w.mu.RLock()
	defer w.mu.RUnlock(t)
	c, _ := w.m().Compute(strings.Clone(key), func(old *Counter, loaded bool) (*Counter, bool) {
		if loaded && !old.isDead() {
			return old, false
		}
		made = true
		return nc, false
	})
	if made {
		w.addCount(1)
	}
	return c
}

// evict removes c, the counter of key, when it may go: its diff must be zero
// unless the series is local-only. It reports whether c was removed.
func (w *Window) evict(key string, c *Counter) bool {
	if w.series.local.Load() {
		if !c.killAny() {
			return false
		}
	} else if !c.kill() {
		return false
	}
	t := w.mu.RLock()
	w.m().Compute(key, func(old *Counter, loaded bool) (*Counter, bool) {
		if loaded && old == c {
			return nil, true
		}
		return old, !loaded // a replacement made meanwhile stays
	})
	w.mu.RUnlock(t)
	w.addCount(-1)
	return true
}

// compact moves the live counters to a fresh map when churn has left the
// current one much larger than they need: xsync keeps every overflow bucket
// a bucket ever needed until the table resizes, so a window flooded with
// short-lived keys would keep growing. It reports whether it moved them.
// Adds to existing counters go on meanwhile (the counters move, not their
// values); making and removing counters waits.
func (w *Window) compact() bool {
	live := w.len()
	if live < 1024 {
		return false
	}
	w.mu.Lock() // Stats reads bucket links that making counters writes
	defer w.mu.Unlock()
	st := w.m().Stats()
	if st.TotalBuckets*2 < st.RootBuckets*3 && live*8 > st.Capacity {
		return false
	}
	nm := xsync.NewMapOf[string, *Counter](xsync.WithPresize(live))
	w.m().Range(func(k string, c *Counter) bool {
		if !c.isDead() {
			nm.Store(k, c)
		}
		return true
	})
	w.mp.Store(nm)
	return true
}

// addCount changes the window's counter count, and its dict's while the
// window is not retired (see Series.retire).
func (w *Window) addCount(delta int64) {
	if w.count.Add(delta)&retiredBit == 0 {
		w.series.dict.entries.Add(delta)
	}
}
