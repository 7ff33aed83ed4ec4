package shm

import (
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// retiredBit is set in Window.count once the window is dropped from its
// series; counts of a retired window no longer weigh on its dict.
const retiredBit = int64(1) << 62

// windowShards is the number of tables a window's counters are spread over
// by the top shardBits bits of their hash: counters of different shards are
// made, removed and rehashed independently.
const (
	shardBits    = 3
	windowShards = 1 << shardBits
)

// shard is one table of a window's counters and the lock of its writers
// (making, removing, rebuilding), padded to a cache line of its own.
type shard struct {
	mu  sync.Mutex
	tab atomic.Pointer[table]
	_   [64 - unsafe.Sizeof(sync.Mutex{}) - unsafe.Sizeof(atomic.Pointer[table]{})]byte
}

// Window holds the counters of one window start of a Series.
//
// A Window is safe for concurrent use. Windows are made by Series.Window.
type Window struct {
	series    *Series
	start     int64     // window start, Unix milliseconds
	startTime time.Time // the same, as a time
	seed      maphash.Seed
	prev      atomic.Pointer[Window] // the window just before this one, when held
	// count is the number of counters in the tables, with retiredBit once
	// dropped.
	count atomic.Int64
	// pending is the number of dirty-list entries of this window that the
	// syncer has not taken yet; a window with pending entries is not dropped.
	pending atomic.Int64
	// shards hold the counters, by the top bits of their key's hash. Adds
	// to existing counters take no lock.
	shards [windowShards]shard
}

func newWindow(s *Series, start int64) *Window {
	w := &Window{series: s, start: start, startTime: time.UnixMilli(start), seed: maphash.MakeSeed()}
	for i := range w.shards {
		w.shards[i].tab.Store(emptyTable)
	}
	return w
}

// hash returns the hash of key in the window's tables.
func (w *Window) hash(key string) uint64 { return maphash.String(w.seed, key) }

// shard returns the shard of hash h.
func (w *Window) shard(h uint64) *shard { return &w.shards[h>>(64-shardBits)] }

// load returns the counter of key, live or dead, or nil.
func (w *Window) load(key string) *Counter {
	h := w.hash(key)
	return w.shard(h).tab.Load().find(key, h)
}

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
	c := w.load(key)
	if c == nil || c.isDead() {
		return nil
	}
	return c
}

// Value returns the count of key in the window on this node, 0 when absent.
func (w *Window) Value(key string) float64 {
	if c := w.load(key); c != nil {
		return c.Value()
	}
	return 0
}

// Range calls fn for each live counter until fn returns false. It is not a
// snapshot: counters made or removed meanwhile may or may not be seen.
func (w *Window) Range(fn func(key string, c *Counter) bool) {
	for i := range w.shards {
		if !w.shards[i].tab.Load().each(func(c *Counter) bool { return c.isDead() || fn(c.key, c) }) {
			return
		}
	}
}

// Add adds v to the diff of key's counter, creating the counter when needed,
// and returns the counter and its value right after the add. It returns a
// nil counter and v when the dict is full and the counter could not be made
// (the hit is then not counted: see the package documentation). now is the
// caller's clock in Unix milliseconds.
func (w *Window) Add(key string, v float64, now int64) (*Counter, float64) {
	h := w.hash(key)
	c := w.shard(h).tab.Load().find(key, h)
	for {
		if c == nil {
			if c = w.create(key, h, now); c == nil {
				return nil, v
			}
		}
		after, wasZero, alive := c.add(v)
		if !alive {
			c = nil // evicted under us: create replaces the dead counter
			continue
		}
		if wasZero {
			w.series.list(w, c)
		}
		return c, after
	}
}

// AddIf adds v to key's diff only when fits(the counter's value), judged on
// the value at the instant of the add (fits is called again when the
// counter changed meanwhile; it must not keep its argument). It returns the
// value before, whether v was added, and the counter (nil when the dict is
// full: the hit is then judged by fits(0) and not counted).
func (w *Window) AddIf(key string, v float64, fits func(before float64) bool, now int64) (before float64, added bool, c *Counter) {
	h := w.hash(key)
	sh := w.shard(h)
	for {
		c = sh.tab.Load().find(key, h)
		if c == nil || c.isDead() {
			if c = w.create(key, h, now); c == nil {
				return 0, fits(0), nil
			}
		}
		before, added, wasZero, alive := c.addIf(v, fits)
		if !alive {
			continue
		}
		if wasZero {
			w.series.list(w, c)
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
	if c := w.load(key); c != nil {
		return c.take()
	}
	return 0
}

// ensure returns key's counter, creating it when needed; nil when the dict
// is full.
func (w *Window) ensure(key string, now int64) *Counter {
	h := w.hash(key)
	if c := w.shard(h).tab.Load().find(key, h); c != nil && !c.isDead() {
		return c
	}
	return w.create(key, h, now)
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

// create makes key's counter (hash h), or returns the live one another
// goroutine made.
func (w *Window) create(key string, h uint64, now int64) *Counter {
	if !w.series.dict.admit(now) {
		return nil
	}
	nc := &Counter{key: strings.Clone(key)}
	sh := w.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := sh.tab.Load()
	if p := t.slot(key, h); p != nil {
		if c := p.Load(); !c.isDead() {
			return c
		}
		p.Store(nc) // the evictor of the dead one finds it gone
	} else if !t.put(nc, h) {
		t = t.rebuilt(groupsFor(t.live), w.hash)
		t.put(nc, h)
		sh.tab.Store(t)
	}
	w.addCount(1)
	return nc
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
	h := w.hash(key)
	sh := w.shard(h)
	sh.mu.Lock()
	sh.tab.Load().remove(key, h, c) // a replacement made meanwhile stays
	sh.mu.Unlock()
	w.addCount(-1)
	return true
}

// compact rebuilds the tables that are four times larger than their live
// counters need (after evictions, or the end of a flood of short-lived
// keys), so that a window's memory follows the counters it holds. It
// reports whether it rebuilt one. Adds to existing counters go on
// meanwhile (the counters stay, their slots move); making and removing
// counters of a shard waits for its rebuild.
func (w *Window) compact() bool {
	done := false
	for i := range w.shards {
		sh := &w.shards[i]
		sh.mu.Lock()
		t := sh.tab.Load()
		if n := groupsFor(t.live); len(t.groups) >= 4*n && len(t.groups) > 1 {
			if t.live == 0 {
				sh.tab.Store(emptyTable)
			} else {
				sh.tab.Store(t.rebuilt(n, w.hash))
			}
			done = true
		}
		sh.mu.Unlock()
	}
	return done
}

// addCount changes the window's counter count, and its dict's while the
// window is not retired (see Series.retire).
func (w *Window) addCount(delta int64) {
	if w.count.Add(delta)&retiredBit == 0 {
		w.series.dict.entries.Add(delta)
	}
}
