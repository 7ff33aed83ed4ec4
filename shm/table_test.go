package shm

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// The tag matchers against a byte-by-byte reading of random tag words.
func TestTableTagMatchers(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 100_000 {
		var tags [8]uint64
		word := uint64(tagDeleted) << 56
		for j := range groupSlots {
			switch r.IntN(4) {
			case 0:
				tags[j] = tagEmpty
			case 1:
				tags[j] = tagDeleted
			default:
				tags[j] = r.Uint64N(tagMask + 1)
			}
			word |= tags[j] << (8 * j)
		}
		tag := r.Uint64N(tagMask + 1)
		if r.IntN(2) == 0 { // often a tag the group holds
			tag = tags[r.IntN(groupSlots)] & tagMask
		}
		m, empty, free := matchTag(word, tag), matchEmpty(word), matchFree(word)
		for j := range groupSlots {
			bit := uint64(0x80) << (8 * j)
			full := tags[j] < tagEmpty
			if full && tags[j] == tag && m&bit == 0 {
				t.Fatalf("tags %#x: slot %d holds tag %#x, matchTag missed it", word, j, tag)
			}
			if !full && m&bit != 0 {
				t.Fatalf("tags %#x: matchTag(%#x) reported free slot %d", word, tag, j)
			}
			if (tags[j] == tagEmpty) != (empty&bit != 0) {
				t.Fatalf("tags %#x: matchEmpty wrong for slot %d", word, j)
			}
			if !full != (free&bit != 0) {
				t.Fatalf("tags %#x: matchFree wrong for slot %d", word, j)
			}
		}
		if (m|empty|free)&^slotMSBs != 0 {
			t.Fatalf("tags %#x: a matcher reported a bit outside the slots' high bits", word)
		}
	}
}

// A table under random puts and removes, with hashes that crowd every key
// into a few groups and tags, holds exactly what a map holds, and its slot
// counts add up; rebuilding it keeps every live counter and drops the dead.
func TestTableAgainstAMap(t *testing.T) {
	for _, crowd := range []uint64{1, 3, 16, 1 << 20} {
		t.Run(fmt.Sprint("groups ", crowd), func(t *testing.T) {
			hash := func(key string) uint64 {
				n, _ := strconv.ParseUint(key, 10, 64)
				return (n%crowd)<<tagBits | n%5 // five tags: many false matches
			}
			r := rand.New(rand.NewPCG(crowd, 7))
			tab := newTable(64, -1)
			ref := map[string]*Counter{}
			for op := range 20_000 {
				key := strconv.Itoa(r.IntN(300))
				h := hash(key)
				c := tab.find(key, h)
				if c != ref[key] {
					t.Fatalf("op %d: find(%s) = %p, want %p", op, key, c, ref[key])
				}
				switch {
				case c == nil:
					nc := &Counter{key: key}
					if !tab.put(nc, h) {
						tab = tab.rebuilt(groupsFor(tab.live), hash)
						if !tab.put(nc, h) {
							t.Fatalf("op %d: a rebuilt table refused a put", op)
						}
					}
					ref[key] = nc
				case r.IntN(2) == 0:
					if !tab.remove(key, h, c) {
						t.Fatalf("op %d: remove(%s) found nothing", op, key)
					}
					delete(ref, key)
				}
				if tab.live != len(ref) || tab.used < tab.live || tab.used > tab.max {
					t.Fatalf("op %d: live %d used %d max %d, map holds %d", op, tab.live, tab.used, tab.max, len(ref))
				}
			}
			n := 0
			tab.each(func(c *Counter) bool {
				if ref[c.key] != c {
					t.Fatalf("each yielded %s, which the map does not hold", c.key)
				}
				n++
				return true
			})
			if n != len(ref) {
				t.Fatalf("each yielded %d counters, want %d", n, len(ref))
			}
			var dead string
			for k, c := range ref {
				dead = k
				c.kill()
				break
			}
			nt := tab.rebuilt(groupsFor(tab.live), hash)
			for k, c := range ref {
				if got := nt.find(k, hash(k)); (k == dead) != (got == nil) || got != nil && got != c {
					t.Fatalf("rebuilt: find(%s) = %p, want %p (dead: %v)", k, got, c, k == dead)
				}
			}
		})
	}
}

// Readers never miss a counter that stays in the window while other
// counters are made and evicted around it, tables grow, fill with deleted
// slots and are rebuilt, and compaction shrinks them.
func TestTableReadersNeverMissAStayingCounter(t *testing.T) {
	_, s := newSeries(t, 0, true)
	w := s.Current(t0)
	stay := make([]*Counter, 200)
	for i := range stay {
		stay[i], _ = w.Add("stay:"+strconv.Itoa(i), 1, t0)
	}
	var stop atomic.Bool
	var readers, writers sync.WaitGroup
	for g := range 2 {
		readers.Go(func() {
			for i := g; !stop.Load(); i++ {
				c := stay[i%len(stay)]
				if got := w.Counter(c.key); got != c {
					t.Errorf("Counter(%s) = %p, want %p", c.key, got, c)
					return
				}
			}
		})
	}
	writers.Go(func() {
		for round := range 10 {
			n := 100 + round*200
			for i := range n {
				w.Add(fmt.Sprintf("churn:%d:%d", round, i), 1, t0)
			}
			for i := range n {
				key := fmt.Sprintf("churn:%d:%d", round, i)
				if c := w.Counter(key); c != nil {
					w.evict(key, c)
				}
			}
			w.compact()
		}
	})
	writers.Wait()
	stop.Store(true)
	readers.Wait()
	if got := w.len(); got != len(stay) {
		t.Fatalf("%d counters left, want %d", got, len(stay))
	}
	for i := range w.shards {
		if tab := w.shards[i].tab.Load(); tab.live > 0 && len(tab.groups) >= 4*groupsFor(tab.live) {
			t.Fatalf("shard %d: %d groups for %d counters after compaction", i, len(tab.groups), tab.live)
		}
	}
}
