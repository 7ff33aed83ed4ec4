package shm

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/puzpuzpuz/xsync/v3"
)

// Buckets holds the token and leaky buckets of one namespace, one bucket
// kind and one window on this node: GCRA's state, one word per key.
//
// A bucket's word x is a float64: its theoretical arrival time, scaled so
// that whole costs and rates stay exact. With a bucket's rate r (its limit
// per window: the level it drains per millisecond) and the table's epoch
// E (Unix ms, when the table was made), the bucket's level at now is
//
//	level(now) = max(0, x - (now - E) * r)
//
// in cost units times the window in milliseconds (a cost c adds c * window),
// the unit of strategy.BucketState's Level. A decision reads x once and
// sets it with one compare-and-swap: x = max(x, (now - E) * r) + c * window.
// A clock going backwards refills nothing (the max keeps x). With whole
// costs and rates every step is exact while (now - E) * r stays under 2^53.
//
// A Bucket records the rate its word is scaled by. A request with another
// rate replaces the bucket with one at the new rate holding the same level
// (the old one is marked dead first, so no concurrent change is lost).
//
// In a namespace that syncs, Buckets also keeps, per key, the cost taken on
// this node and not yet handed to the syncer, dated by its first hit
// (Pending); the syncer takes it (TakePending) and, after a store read or
// decision, sets the bucket's level to the store's view plus what is still
// pending (Install). There a change of the word and of the pending cost is
// one step: the word is marked busy while both change (a few atomic
// operations; readers wait for it, as for a Counter's take), so that Install
// never reads a pending cost that the word does not show, or the other way
// round. Local-only tables keep no pending cost and never mark a word.
//
// Accounting: a table counts its buckets with a retired bit, as a Window
// does: once RemoveNamespace retires the table, buckets made or dropped in
// it by calls that raced the removal no longer change the dict's total.
type Buckets struct {
	dict   *Dict
	ns     string
	kind   uint8
	window int64 // ms
	epoch  int64 // ms
	local  atomic.Bool
	m      *xsync.MapOf[string, *Bucket]
	count  atomic.Int64 // buckets in m, with retiredBit once retired

	pendMu  sync.Mutex                     // serializes TakePending
	pending *xsync.MapOf[string, *pending] // unpushed cost per key
}

// Bucket is one key's bucket. Callers outside shm hold it only between Get
// and the Read/Add that follow.
type Bucket struct {
	x    atomic.Uint64 // float64 bits; dead once removed or replaced
	rate float64       // the rate x is scaled by; set once
}

// busy is the word of a bucket of a syncing table while a decision or
// Install changes the word and the pending cost together: a NaN payload, as
// dead is.
const busy uint64 = 0x7ff8_b05e_0000_0001

// epochLead is how far before a table's first use its epoch is set: a
// clock stepped back by less than this still reads levels the way the
// stores do.
const epochLead = 24 * 60 * 60 * 1000

// pending is cost taken on this node and not yet pushed: u holds its float64
// bits (dead once the syncer took it), at the first hit's time.
type pending struct {
	u    atomic.Uint64
	at   int64
	rate float64
}

type bucketsKey struct {
	namespace string
	kind      uint8
	window    int64
}

// Buckets returns the bucket table of namespace ns, kind and window (whole
// milliseconds), creating it when needed, with its epoch a day before now
// and local as its SetLocal. Lookups of an existing table take no lock. A
// table is made only while live() holds (checked under the dict's lock,
// which RemoveNamespace takes too); otherwise the table returned is retired
// and belongs to no one: the namespace is going away.
func (d *Dict) Buckets(ns string, kind uint8, window time.Duration, local bool, now int64, live func() bool) *Buckets {
	k := bucketsKey{ns, kind, window.Milliseconds()}
	if m := d.btabs.Load(); m != nil {
		if t, ok := (*m)[k]; ok {
			return t
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if t, ok := d.buckets[k]; ok {
		return t
	}
	t := &Buckets{
		dict: d, ns: ns, kind: kind, window: k.window, epoch: now - epochLead,
		m: xsync.NewMapOf[string, *Bucket](), pending: xsync.NewMapOf[string, *pending](),
	}
	t.local.Store(local)
	if !live() {
		t.count.Store(retiredBit)
		return t
	}
	if d.buckets == nil {
		d.buckets = make(map[bucketsKey]*Buckets)
	}
	d.buckets[k] = t
	d.publishBuckets()
	return t
}

// publishBuckets makes d.buckets the lock-free lookup's. Callers hold d.mu.
func (d *Dict) publishBuckets() {
	m := make(map[bucketsKey]*Buckets, len(d.buckets))
	for k, t := range d.buckets {
		m[k] = t
	}
	d.btabs.Store(&m)
}

// BucketTables returns the bucket tables of namespace ns.
func (d *Dict) BucketTables(ns string) []*Buckets {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []*Buckets
	for k, t := range d.buckets {
		if k.namespace == ns {
			out = append(out, t)
		}
	}
	return out
}

func (d *Dict) allBuckets() []owned[*Buckets] {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]owned[*Buckets], 0, len(d.buckets))
	for k, t := range d.buckets {
		out = append(out, owned[*Buckets]{k.namespace, t})
	}
	return out
}

// Kind returns the table's bucket kind.
func (t *Buckets) Kind() uint8 { return t.kind }

// Window returns the table's window in milliseconds.
func (t *Buckets) Window() int64 { return t.window }

// SetLocal marks the table local-only (true): nothing is kept pending for a
// syncer.
func (t *Buckets) SetLocal(local bool) { t.local.Store(local) }

// floor returns (now - E) * rate: the word of a bucket empty at now.
func (t *Buckets) floor(now int64, rate float64) float64 {
	return float64(float64(now-t.epoch) * rate)
}

// Get returns the bucket of key at rate, creating it empty when absent. It
// returns nil when the dict is full (the request is then decided as if the
// key had no history, like a counter that could not be made).
func (t *Buckets) Get(key string, rate float64, now int64) *Bucket {
	for {
		b, ok := t.m.Load(key)
		if !ok {
			if !t.dict.admit(now) {
				return nil
			}
			nb := &Bucket{rate: rate}
			nb.x.Store(math.Float64bits(t.floor(now, rate)))
			if b, ok = t.m.LoadOrStore(key, nb); !ok {
				t.added(1)
				return nb
			}
		}
		switch x := load(b); {
		case x == dead:
			runtime.Gosched() // removed or being replaced: look again
		case b.rate == rate:
			return b
		default:
			t.replace(key, b, rate, now)
		}
	}
}

// added counts n buckets made (n > 0) or dropped (n < 0) in the table, and
// in the dict while the table is not retired.
func (t *Buckets) added(n int64) {
	if t.count.Add(n)&retiredBit == 0 {
		t.dict.entries.Add(n)
	}
}

// load returns b's word once no change is marking it busy.
func load(b *Bucket) uint64 {
	for i := 0; ; i++ {
		if x := b.x.Load(); x != busy {
			return x
		}
		if i >= 16 {
			runtime.Gosched()
		}
	}
}

// replace swaps b, key's bucket, for one at rate holding the same level at
// now.
func (t *Buckets) replace(key string, b *Bucket, rate float64, now int64) {
	x := load(b)
	if x == dead || !b.x.CompareAndSwap(x, dead) {
		return
	}
	level := max(0, math.Float64frombits(x)-t.floor(now, b.rate))
	nb := &Bucket{rate: rate}
	nb.x.Store(math.Float64bits(t.floor(now, rate) + level))
	t.m.Store(key, nb)
}

// Level returns the bucket's word and its level at now; alive is false when
// the bucket was removed or replaced (Get it again).
func (t *Buckets) Level(b *Bucket, now int64) (word uint64, level float64, alive bool) {
	x := load(b)
	if x == dead {
		return x, 0, false
	}
	return x, max(0, math.Float64frombits(x)-t.floor(now, b.rate)), true
}

// Take adds cost, taken by key's request at rate, to the bucket at now if
// its word is still word (from Level): x = max(x, floor(now)) + cost *
// window, and, in a table that syncs, the cost to key's pending cost in the
// same step. It returns the new word and whether it set it; when not, the
// caller reads the level again and decides again.
func (t *Buckets) Take(b *Bucket, key string, word uint64, cost float64, now int64) (uint64, bool) {
	x := math.Float64frombits(word)
	nx := math.Float64bits(max(x, t.floor(now, b.rate)) + float64(cost*float64(t.window)))
	if t.local.Load() || cost == 0 {
		return nx, b.x.CompareAndSwap(word, nx)
	}
	if !b.x.CompareAndSwap(word, busy) {
		return 0, false
	}
	t.addPending(key, cost, b.rate, now)
	b.x.Store(nx)
	return nx, true
}

// Epoch returns the table's epoch, Unix ms: a bucket's word w holds the
// level max(0, w - (now - Epoch) * Rate) at now.
func (t *Buckets) Epoch() int64 { return t.epoch }

// Refund takes back cost that key's request took (Take): the request was
// denied by another limit. It goes to whatever bucket key holds now (a rate
// change carries the level over to a new one). In a table that syncs, the
// pending cost is taken back too, unless the syncer has taken it already:
// then the store counts the cost (at most over, never under).
func (t *Buckets) Refund(key string, cost float64) {
	add := float64(cost * float64(t.window))
	for {
		b, ok := t.m.Load(key)
		if !ok {
			return // expired: empty, and stays so
		}
		x := load(b)
		if x == dead {
			runtime.Gosched() // being replaced or removed: look again
			continue
		}
		nx := math.Float64bits(math.Float64frombits(x) - add)
		if t.local.Load() {
			if b.x.CompareAndSwap(x, nx) {
				return
			}
			continue
		}
		if !b.x.CompareAndSwap(x, busy) {
			continue
		}
		t.subPending(key, cost)
		b.x.Store(nx)
		return
	}
}

// addPending records cost taken at now for the syncer.
func (t *Buckets) addPending(key string, cost float64, rate float64, now int64) {
	for {
		p, ok := t.pending.Load(key)
		if !ok {
			np := &pending{at: now, rate: rate}
			np.u.Store(math.Float64bits(cost))
			if _, loaded := t.pending.LoadOrStore(key, np); !loaded {
				return
			}
			continue
		}
		u := p.u.Load()
		if u == dead {
			runtime.Gosched() // the syncer is taking it: a new one follows
			continue
		}
		if p.u.CompareAndSwap(u, math.Float64bits(math.Float64frombits(u)+cost)) {
			return
		}
	}
}

// subPending takes cost back from key's pending cost, if the syncer has
// not taken it.
func (t *Buckets) subPending(key string, cost float64) {
	p, ok := t.pending.Load(key)
	if !ok {
		return
	}
	for {
		u := p.u.Load()
		if u == dead || p.u.CompareAndSwap(u, math.Float64bits(math.Float64frombits(u)-cost)) {
			return
		}
	}
}

// pendingOf returns the cost pending for key, its first hit's time and rate.
func (t *Buckets) pendingOf(key string) (cost float64, at int64, rate float64) {
	p, ok := t.pending.Load(key)
	if !ok {
		return 0, 0, 0
	}
	if u := p.u.Load(); u != dead {
		return math.Float64frombits(u), p.at, p.rate
	}
	return 0, 0, 0
}

// TakePending hands fn each key's pending cost (with its first hit's time
// and rate) and forgets it, or only key's when key is not empty. For the
// syncer: a cost taken that no one pushes is lost to the cluster.
func (t *Buckets) TakePending(key string, fn func(key string, at int64, cost, rate float64)) {
	t.pendMu.Lock()
	defer t.pendMu.Unlock()
	take := func(k string, p *pending) bool {
		u := p.u.Swap(dead)
		if u != dead {
			t.pending.Compute(k, func(old *pending, loaded bool) (*pending, bool) {
				return old, !loaded || old == p // delete p only
			})
			if v := math.Float64frombits(u); v != 0 {
				fn(k, p.at, v, p.rate)
			}
		}
		return true
	}
	if key != "" {
		if p, ok := t.pending.Load(key); ok {
			take(key, p)
		}
		return
	}
	t.pending.Range(take)
}

// Install sets key's bucket, if this node holds it, to the level that
// levelOf returns at now, given what is pending for key (its cost, first
// hit and rate; zeros when nothing is): the store's view plus that. Pending
// cost and word are read and set in one step (see Buckets), so a cost taken
// meanwhile is either in both or in neither.
func (t *Buckets) Install(key string, now int64, levelOf func(cost float64, at int64, rate float64) float64) {
	b, ok := t.m.Load(key)
	if !ok {
		return
	}
	for {
		x := load(b)
		if x == dead {
			return
		}
		if !b.x.CompareAndSwap(x, busy) {
			continue
		}
		level := levelOf(t.pendingOf(key))
		b.x.Store(math.Float64bits(t.floor(now, b.rate) + level))
		return
	}
}

// RateOf returns the rate of key's bucket, 0 when this node does not hold it.
func (t *Buckets) RateOf(key string) float64 {
	if b, ok := t.m.Load(key); ok {
		return b.rate
	}
	return 0
}

// Keys calls fn for each key whose bucket this node holds.
func (t *Buckets) Keys(fn func(key string) bool) {
	t.m.Range(func(k string, b *Bucket) bool {
		if b.x.Load() == dead {
			return true
		}
		return fn(k)
	})
}

// Len returns the number of buckets held.
func (t *Buckets) Len() int { return t.m.Size() }

// Expire removes the buckets that are empty at now and have nothing
// pending: an empty bucket is the state of a key this node does not hold.
// It returns the number removed.
func (t *Buckets) Expire(now int64) int {
	n := 0
	t.m.Range(func(k string, b *Bucket) bool {
		x := b.x.Load()
		if x == dead || x == busy || math.Float64frombits(x) > t.floor(now, b.rate) {
			return true
		}
		if _, ok := t.pending.Load(k); ok {
			return true
		}
		if b.x.CompareAndSwap(x, dead) {
			t.m.Compute(k, func(old *Bucket, loaded bool) (*Bucket, bool) {
				return old, !loaded || old == b
			})
			t.added(-1)
			t.dict.expired.Add(1)
			n++
		}
		return true
	})
	return n
}

// removeAll retires the table and drops every bucket of it: the dict's
// total loses the table's count once, and buckets made or dropped later by
// calls that raced the removal no longer change it.
func (t *Buckets) removeAll() {
	if old := t.count.Or(retiredBit); old&retiredBit == 0 {
		t.dict.entries.Add(-old)
	}
	t.m.Range(func(k string, b *Bucket) bool {
		for {
			x := load(b)
			if x == dead || b.x.CompareAndSwap(x, dead) {
				break
			}
		}
		t.m.Delete(k)
		return true
	})
}

// Give gives back cost that key's bucket will not use (quota a node held
// and returns): the level falls by cost, never below empty when read, and
// in a table that syncs cost is pushed back as a negative pending cost at
// now. A bucket the table no longer holds is empty and stays so; the
// pending cost is recorded all the same.
func (t *Buckets) Give(key string, cost, rate float64, now int64) {
	sub := float64(cost * float64(t.window))
	for {
		b, ok := t.m.Load(key)
		if !ok {
			break
		}
		x := load(b)
		if x == dead {
			runtime.Gosched() // being replaced or removed: look again
			continue
		}
		nx := math.Float64bits(max(math.Float64frombits(x)-sub, t.floor(now, b.rate)))
		if t.local.Load() {
			if b.x.CompareAndSwap(x, nx) {
				return
			}
			continue
		}
		if !b.x.CompareAndSwap(x, busy) {
			continue
		}
		t.addPending(key, -cost, rate, now)
		b.x.Store(nx)
		return
	}
	if !t.local.Load() {
		t.addPending(key, -cost, rate, now)
	}
}
