package shm

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/puzpuzpuz/xsync/v3"
)

// Keyed holds per-key states of one namespace, one kind and one window on
// this node that a decision reads and changes as a whole (an anchored
// window's opening and count, a sliding log's entries): S is the state's
// type, which shm does not interpret. Each key's Slot has a mutex, held by
// one decision at a time for a few operations; lookups take no lock.
//
// In a namespace that syncs, a Slot also keeps the hits counted on this node
// and not yet handed to the syncer (Pending), one per millisecond; the
// syncer takes them (TakePending).
//
// A Slot counts as one entry toward its dict's capacity, whatever its state
// holds; accounting and retirement follow Buckets'.
type Keyed[S any] struct {
	dict   *Dict
	ns     string
	kind   uint8
	window int64 // ms
	local  atomic.Bool
	idle   func(s *S, now int64) bool
	m      *xsync.MapOf[string, *Slot[S]]
	count  atomic.Int64 // slots in m, with retiredBit once retired

	pendMu  sync.Mutex // serializes TakePending
	pending atomic.Int64
}

// Slot is one key's state. Its holder locks it (Lock) for a decision and
// checks Dead first: a dead slot was removed, Get the key again.
type Slot[S any] struct {
	sync.Mutex
	dead    bool
	State   S
	pending []hit
}

// hit is cost counted at one millisecond.
type hit struct {
	At   int64 // Unix milliseconds
	Cost float64
}

// keyedTable is what a dict does with a Keyed table of any state type.
type keyedTable interface {
	PendingTable
	removeAll()
}

// PendingTable is a table whose hits the syncer pushes: Keyed tables of any
// state type.
type PendingTable interface {
	Kind() uint8
	Window() int64
	SetLocal(local bool)
	// HasPending reports whether any key has hits not yet taken.
	HasPending() bool
	// Expire drops the keys whose state is idle at now (Unix ms) and that
	// hold no pending hit, and returns how many.
	Expire(now int64) int
	// TakePending hands fn the hits of each key counted on this node and
	// not yet taken, and forgets them, or only key's when key is not
	// empty. For the syncer: hits taken that no one pushes are lost to the
	// cluster.
	TakePending(key string, fn func(key string, at int64, cost float64))
}

// KeyedTable returns the Keyed table of namespace ns, kind and window in d,
// creating it when needed with local as its SetLocal and idle telling a
// state that costs nothing (Expire drops such slots). Like Dict.Buckets, a
// table is made only while live() holds; otherwise the table returned is
// retired. A table of the same namespace, kind and window with another
// state type is a programming error: it panics.
func KeyedTable[S any](d *Dict, ns string, kind uint8, window time.Duration, local bool, live func() bool, idle func(s *S, now int64) bool) *Keyed[S] {
	k := bucketsKey{ns, kind, window.Milliseconds()}
	d.mu.Lock()
	defer d.mu.Unlock()
	if t, ok := d.keyed[k]; ok {
		return t.(*Keyed[S])
	}
	t := &Keyed[S]{dict: d, ns: ns, kind: kind, window: k.window, idle: idle, m: xsync.NewMapOf[string, *Slot[S]]()}
	t.local.Store(local)
	if !live() {
		t.count.Store(retiredBit)
		return t
	}
	if d.keyed == nil {
		d.keyed = make(map[bucketsKey]keyedTable)
	}
	d.keyed[k] = t
	return t
}

// PendingTables returns the Keyed tables of namespace ns.
func (d *Dict) PendingTables(ns string) []PendingTable {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []PendingTable
	for k, t := range d.keyed {
		if k.namespace == ns {
			out = append(out, t)
		}
	}
	return out
}

func (d *Dict) allKeyed() []owned[keyedTable] {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]owned[keyedTable], 0, len(d.keyed))
	for k, t := range d.keyed {
		out = append(out, owned[keyedTable]{k.namespace, t})
	}
	return out
}

// Kind returns the table's kind.
func (t *Keyed[S]) Kind() uint8 { return t.kind }

// Window returns the table's window in milliseconds.
func (t *Keyed[S]) Window() int64 { return t.window }

// SetLocal marks the table local-only (true): no hit is kept pending.
func (t *Keyed[S]) SetLocal(local bool) { t.local.Store(local) }

// Lock returns key's slot, locked, creating it with the zero state when
// absent; nil when the dict is full (the request is then decided as if the
// key had no history, and counted nowhere).
func (t *Keyed[S]) Lock(key string, now int64) *Slot[S] {
	for {
		s, ok := t.m.Load(key)
		if !ok {
			if !t.dict.admit(now) {
				return nil
			}
			ns := &Slot[S]{}
			if s, ok = t.m.LoadOrStore(key, ns); !ok {
				t.added(1)
			}
		}
		s.Lock()
		if !s.dead {
			return s
		}
		s.Unlock()
		runtime.Gosched()
	}
}

// Count records, in a table that syncs, a hit of cost at at in slot s
// (held by the caller) for the syncer.
func (t *Keyed[S]) Count(s *Slot[S], at int64, cost float64) {
	if t.local.Load() || cost == 0 {
		return
	}
	if n := len(s.pending); n > 0 && s.pending[n-1].At == at {
		s.pending[n-1].Cost += cost
		return
	}
	s.pending = append(s.pending, hit{At: at, Cost: cost})
	t.pending.Add(1)
}

// TakePending implements PendingTable.
func (t *Keyed[S]) TakePending(key string, fn func(key string, at int64, cost float64)) {
	t.pendMu.Lock()
	defer t.pendMu.Unlock()
	take := func(k string, s *Slot[S]) bool {
		s.Lock()
		hits := s.pending
		s.pending = nil
		s.Unlock()
		t.pending.Add(-int64(len(hits)))
		for _, h := range hits {
			fn(k, h.At, h.Cost)
		}
		return true
	}
	if key != "" {
		if s, ok := t.m.Load(key); ok {
			take(key, s)
		}
		return
	}
	if t.pending.Load() > 0 {
		t.m.Range(take)
	}
}

// HasPending implements PendingTable.
func (t *Keyed[S]) HasPending() bool { return t.pending.Load() > 0 }

// added counts n slots made or dropped, as Buckets.added does.
func (t *Keyed[S]) added(n int64) {
	if t.count.Add(n)&retiredBit == 0 {
		t.dict.entries.Add(n)
	}
}

// Expire drops the slots whose state is idle at now and that hold no
// pending hit. It returns the number dropped.
func (t *Keyed[S]) Expire(now int64) int {
	n := 0
	t.m.Range(func(k string, s *Slot[S]) bool {
		if !s.TryLock() {
			return true // in use: not idle
		}
		if !s.dead && len(s.pending) == 0 && t.idle(&s.State, now) {
			s.dead = true
			t.m.Compute(k, func(old *Slot[S], loaded bool) (*Slot[S], bool) {
				return old, !loaded || old == s
			})
			t.added(-1)
			t.dict.expired.Add(1)
			n++
		}
		s.Unlock()
		return true
	})
	return n
}

// removeAll retires the table and drops every slot.
func (t *Keyed[S]) removeAll() {
	if old := t.count.Or(retiredBit); old&retiredBit == 0 {
		t.dict.entries.Add(-old)
	}
	t.m.Range(func(k string, s *Slot[S]) bool {
		s.Lock()
		s.dead = true
		s.Unlock()
		t.m.Delete(k)
		return true
	})
}
