package shm

import (
	mathbits "math/bits"
	"sync/atomic"
)

// A table holds counters keyed by their key: an open-addressing hash table
// in groups of seven slots and one word of tags, one tag byte per slot (a
// group is 64 bytes, a cache line), probed group by group. A slot is a
// pointer to a Counter, which holds its key: a counter costs the table one
// slot and one tag, nothing else.
//
// Lookups (find) take no lock, write nothing and allocate nothing. Every
// change (put, remove, resized) is made by one writer at a time, the lock
// of the table's shard, and publishes what a reader may see with atomic
// stores: a slot is stored before its tag, a tag cleared before its slot.
// A resize builds a new table and the shard publishes it; the old one is
// never written again, and a reader still on it finds the same counters
// there (counters are never copied, only their pointers).
//
// Why a reader never misses a key that is in its table: a key sits in the
// first group of its probe sequence that had a free slot when it was put,
// and a slot of a group before it only ever goes from full to deleted and
// back to full, never to empty, so the probe reaches it before a group
// with an empty slot ends the search.
type table struct {
	groups []group
	mask   uint64 // len(groups) - 1: the count of groups is a power of two
	// Changed by the writer only.
	used int // full and deleted slots: only empty ones end a probe
	live int // full slots
	max  int // the most used slots before the table must be rebuilt
}

// group is seven slots and their tags. The tags word holds, in byte j,
// the tag of slots[j]: the hash's low seven bits when the slot is full,
// tagEmpty or tagDeleted when it is not. Byte 7 is always tagDeleted, a
// byte no search matches and that ends no probe.
type group struct {
	tags  atomic.Uint64
	slots [groupSlots]atomic.Pointer[Counter]
}

const (
	groupSlots = 7
	tagEmpty   = 0x80 // a slot never used since the table was built: a probe stops at its group
	tagDeleted = 0xfe // a slot used and freed: a probe goes on past it
	tagBits    = 7
	tagMask    = 1<<tagBits - 1
	lsbs       = 0x0101010101010101
	slotMSBs   = 0x0080808080808080 // the high bit of each slot's tag
	emptyTags  = 0xfe80808080808080 // the tags of a group that held nothing
)

// emptyTable is the table of a shard that never held a counter: shared and
// never written (its max is 0, so the first put rebuilds).
var emptyTable = newTable(1, 0)

// newTable returns an empty table of n groups (a power of two); max is
// the most slots it may use, 7/8 of them unless given.
func newTable(n, max int) *table {
	t := &table{groups: make([]group, n), mask: uint64(n - 1), max: max}
	if max < 0 {
		t.max = n * groupSlots * 7 / 8
	}
	for i := range t.groups {
		t.groups[i].tags.Store(emptyTags)
	}
	return t
}

// groupsFor returns the number of groups a rebuilt table of live counters
// gets: the fewest (a power of two) of which they use at most half of what
// a table may use, so that as many again can be added before the next
// rebuild. A table full of live counters doubles; one that is mostly
// deleted slots keeps its size or shrinks.
func groupsFor(live int) int {
	n := 1
	for 2*live > n*groupSlots*7/8 {
		n *= 2
	}
	return n
}

// matchTag returns the high bit of each byte of tags that may equal tag (a
// byte after an equal one may be a false match; the caller compares keys).
func matchTag(tags, tag uint64) uint64 {
	x := tags ^ (lsbs * tag)
	return (x - lsbs) &^ x & slotMSBs
}

// matchEmpty returns the high bit of each byte of tags that is tagEmpty:
// of tagEmpty (1000_0000) and tagDeleted (1111_1110), only the first has
// its high bit set and bit 1 clear.
func matchEmpty(tags uint64) uint64 { return tags &^ (tags << 6) & slotMSBs }

// matchFree returns the high bit of each byte of tags that is tagEmpty or
// tagDeleted (a full slot's tag has its high bit clear).
func matchFree(tags uint64) uint64 { return tags & slotMSBs }

// start returns the first group of the probe sequence of hash h. The
// sequence then moves 1, 2, 3... groups at a time, which visits every group
// of a power-of-two table.
func (t *table) start(h uint64) uint64 { return (h >> tagBits) & t.mask }

// find returns the counter of key (hash h), live or dead, or nil. The
// first candidate of the first group is tried on its own: it is the
// counter sought nearly always, and a search that goes on runs in
// findFrom.
func (t *table) find(key string, h uint64) *Counter {
	g := &t.groups[(h>>tagBits)&t.mask]
	tags := g.tags.Load()
	if m := matchTag(tags, h&tagMask); m != 0 {
		if c := g.slots[mathbits.TrailingZeros64(m)>>3].Load(); c != nil && c.key == key {
			return c
		}
	}
	return t.findFrom(key, h)
}

// findFrom is find's search from the start of the probe sequence.
func (t *table) findFrom(key string, h uint64) *Counter {
	if p := t.slot(key, h); p != nil {
		return p.Load()
	}
	return nil
}

// slot returns the slot that holds the counter of key (hash h), live or
// dead, or nil. A reader may call it too; only the writer may store into
// the slot.
func (t *table) slot(key string, h uint64) *atomic.Pointer[Counter] {
	tag := h & tagMask
	i := t.start(h)
	for step := uint64(1); ; step++ {
		g := &t.groups[i]
		tags := g.tags.Load()
		for m := matchTag(tags, tag); m != 0; m &= m - 1 {
			p := &g.slots[mathbits.TrailingZeros64(m)>>3]
			if c := p.Load(); c != nil && c.key == key {
				return p
			}
		}
		if matchEmpty(tags) != 0 || step > t.mask {
			return nil
		}
		i = (i + step) & t.mask
	}
}

// put adds c, whose key (hash h) the table does not hold, in the first free
// slot of its probe sequence. It reports false, changing nothing, when that
// slot is an empty one and the table has used all it may: the writer then
// rebuilds it. For the writer.
func (t *table) put(c *Counter, h uint64) bool {
	i := t.start(h)
	for step := uint64(1); ; step++ {
		g := &t.groups[i]
		tags := g.tags.Load()
		if m := matchFree(tags); m != 0 {
			shift := uint(mathbits.TrailingZeros64(m)) &^ 7
			empty := (tags>>shift)&0xff == tagEmpty
			if empty && t.used >= t.max {
				return false
			}
			g.slots[shift>>3].Store(c)
			g.tags.Store(tags&^(0xff<<shift) | (h&tagMask)<<shift)
			t.live++
			if empty {
				t.used++
			}
			return true
		}
		i = (i + step) & t.mask
	}
}

// remove removes c, the counter of key (hash h), and reports whether the
// table held it. For the writer.
func (t *table) remove(key string, h uint64, c *Counter) bool {
	tag := h & tagMask
	i := t.start(h)
	for step := uint64(1); ; step++ {
		g := &t.groups[i]
		tags := g.tags.Load()
		for m := matchTag(tags, tag); m != 0; m &= m - 1 {
			j := mathbits.TrailingZeros64(m) >> 3
			if g.slots[j].Load() != c {
				continue
			}
			// A group with an empty slot ends every probe that reaches it,
			// so no key lies past it for which this slot must stay used.
			shift, free := uint(j*8), uint64(tagDeleted)
			if matchEmpty(tags) != 0 {
				free = tagEmpty
				t.used--
			}
			g.tags.Store(tags&^(0xff<<shift) | free<<shift)
			g.slots[j].Store(nil)
			t.live--
			return true
		}
		if matchEmpty(tags) != 0 || step > t.mask {
			return false
		}
		i = (i + step) & t.mask
	}
}

// rebuilt returns a new table of n groups holding t's live counters; hash
// gives a counter's hash. Dead counters stay behind: whoever killed one
// removes it, and finds it gone. For the writer; t is not changed.
func (t *table) rebuilt(n int, hash func(key string) uint64) *table {
	nt := newTable(n, -1)
	t.each(func(c *Counter) bool {
		if !c.isDead() {
			nt.put(c, hash(c.key))
		}
		return true
	})
	return nt
}

// each calls fn with every counter in a full slot until fn returns false.
// Safe for readers: counters put or removed meanwhile may or may not be
// seen.
func (t *table) each(fn func(c *Counter) bool) bool {
	for i := range t.groups {
		g := &t.groups[i]
		for m := ^matchFree(g.tags.Load()) & slotMSBs; m != 0; m &= m - 1 {
			if c := g.slots[mathbits.TrailingZeros64(m)>>3].Load(); c != nil && !fn(c) {
				return false
			}
		}
	}
	return true
}
