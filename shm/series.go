package shm

import (
	"sort"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ratesync/ratesync/internal/arith"
)

// dirtyShards is the number of dirty lists of a series; a counter is listed
// in the one its address picks, so that adds to different counters seldom
// wait for one another's listing.
const dirtyShards = 8

// keepDirty: Take gives a dirty list's arrays back for the next period's
// counters when they hold at most this many (8 KiB), so that listing
// allocates nothing in a steady state; longer ones are left to the garbage
// collector rather than held at the size of a past burst.
const keepDirty = 1024

// dirtyRun is the listed counters of one window: a pointer each, as a
// counter holds its key.
type dirtyRun struct {
	w  *Window
	cs []*Counter
}

// dirtyShard is one dirty list: a run per window that has listed counters
// (one or two, the current window and the previous one, unless precision
// windows or late adds make more). Past len(runs), the runs' arrays that
// Take gave back wait, emptied, for the next windows listed.
type dirtyShard struct {
	mu   sync.Mutex
	runs []dirtyRun
	_    [64 - unsafe.Sizeof(sync.Mutex{}) - unsafe.Sizeof([]dirtyRun{})]byte
}

// Series is the set of windows of one namespace and one window size in a
// dict, and the list of its counters with a diff the syncer has not taken.
//
// A Series is safe for concurrent use. Series are made by Dict.Series.
type Series struct {
	dict      *Dict
	namespace string
	size      int64 // window size, milliseconds
	local     atomic.Bool
	// pinned keeps eviction away while the syncer has batches in flight:
	// a counter's in-flight amount lives in its sync part until the store
	// acknowledges it, and evicting the counter would drop it from the view.
	pinned atomic.Bool
	// closed is set when the namespace goes away; see Closed.
	closed atomic.Bool
	// span is the longest sliding window read over the series' windows,
	// ms: size, or more for sub-windows of a precision (see Keep).
	span atomic.Int64

	cur     atomic.Pointer[Window] // the newest window
	mu      sync.Mutex             // guards windows
	windows []*Window              // held windows, oldest first

	dirty [dirtyShards]dirtyShard
}

// Size returns the window size in milliseconds.
func (s *Series) Size() int64 { return s.size }

// Keep makes the series hold its windows while a sliding window of span
// ms (a multiple of its size) reads them: the last span/size + 1 windows,
// not only the current and the previous one. The longest span kept wins.
func (s *Series) Keep(span int64) {
	for {
		old := s.span.Load()
		if span <= old || s.span.CompareAndSwap(old, span) {
			return
		}
	}
}

// Span returns the longest sliding window read over the series, ms: its
// size unless Keep asked for more.
func (s *Series) Span() int64 { return max(s.span.Load(), s.size) }

// Depth returns how many windows the series holds for its readers:
// Span/Size + 1.
func (s *Series) Depth() int { return int(s.Span()/s.size) + 1 }

// SetLocal marks the series local-only (its diffs are never pushed, so they
// are not listed, and eviction may drop any counter) or not. A series that
// stops being local lists every counter holding a diff: hits counted while
// it was local are pushed like any other.
func (s *Series) SetLocal(local bool) {
	if s.local.Swap(local) && !local {
		for _, w := range s.held() {
			w.Range(func(key string, c *Counter) bool {
				if c.diffValue() != 0 {
					s.list(w, c)
				}
				return true
			})
		}
	}
}

// SetPinned keeps eviction away from the series' counters (true) or not.
// For the syncer: it pins while batches are in flight, whose amounts live
// in the counters' sync parts.
func (s *Series) SetPinned(pinned bool) { s.pinned.Store(pinned) }

// Close marks the series closed: its namespace is going away. Callers that
// added to it check Closed afterwards (see Closed).
func (s *Series) Close() { s.closed.Store(true) }

// Closed reports whether Close was called. A caller that added to a counter
// and then finds the series closed cannot know whether the namespace's final
// push took its add: it takes the add back and reports the namespace closed
// (at worst the hit was pushed and is counted, never lost).
func (s *Series) Closed() bool { return s.closed.Load() }

// StartOf returns the start of the window that holds the instant now (Unix
// milliseconds): windows are aligned to the Unix epoch.
func (s *Series) StartOf(now int64) int64 { return arith.Start(now, s.size) }

// Current returns the window holding the instant now, creating it when needed.
func (s *Series) Current(now int64) *Window {
	w := s.cur.Load()
	if w == nil {
		return s.Window(s.StartOf(now), true, now)
	}
	if now >= w.start && now-w.start < s.size {
		return w // no division on the hot path
	}
	// A clock that went back (a namespace clock stepped back to its
	// store's time) reads a window the newest one links back to: found
	// without the lock, until the clock is back in the newest window.
	for p, i := w.prev.Load(), 0; p != nil && i < backLinks && now < p.start+s.size; p, i = p.prev.Load(), i+1 {
		if p.count.Load()&retiredBit != 0 {
			break // expired: Window knows whether the series holds another
		}
		if now >= p.start {
			return p
		}
	}
	return s.Window(s.StartOf(now), true, now)
}

// backLinks bounds how many windows back Current follows without the lock.
const backLinks = 4

// Window returns the window that starts at start, creating it when create is
// true; nil when it is not held and not created. now is the caller's clock.
func (s *Series) Window(start int64, create bool, now int64) *Window {
	if w := s.cur.Load(); w != nil && w.start == start {
		return w
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	i := sort.Search(len(s.windows), func(i int) bool { return s.windows[i].start >= start })
	if i < len(s.windows) && s.windows[i].start == start {
		return s.windows[i]
	}
	if !create {
		return nil
	}
	w := newWindow(s, start)
	s.windows = append(s.windows, nil)
	copy(s.windows[i+1:], s.windows[i:])
	s.windows[i] = w
	if i > 0 && s.windows[i-1].start == start-s.size {
		w.prev.Store(s.windows[i-1])
	}
	if i+1 < len(s.windows) && s.windows[i+1].start == start+s.size {
		s.windows[i+1].prev.Store(w)
	}
	if cur := s.cur.Load(); cur == nil || start > cur.start {
		s.cur.Store(w)
	}
	s.expireLocked(now)
	return w
}

// held returns the held windows, oldest first.
func (s *Series) held() []*Window {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Window(nil), s.windows...)
}

// Empty reports whether the series holds no window and no listed counter.
func (s *Series) Empty() bool {
	s.mu.Lock()
	n := len(s.windows)
	s.mu.Unlock()
	return n == 0 && s.Dirty() == 0
}

// Expire drops the windows that are older than the previous window as of
// now (older than the last Depth windows with Keep) and hold no diff
// waiting for the syncer. It returns how many counters
// it dropped.
func (s *Series) Expire(now int64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.expireLocked(now)
}

func (s *Series) expireLocked(now int64) int {
	cutoff := s.StartOf(now) - s.Span() // windows before the oldest one read
	local := s.local.Load()
	dropped, kept := 0, s.windows[:0]
	for _, w := range s.windows {
		if w.start < cutoff && (local || w.pending.Load() == 0) {
			dropped += s.retire(w)
			continue
		}
		kept = append(kept, w)
	}
	clear(s.windows[len(kept):])
	s.windows = kept
	if len(kept) > 0 && kept[0].prev.Load() != nil {
		kept[0].prev.Store(nil) // let the dropped window go
	}
	if dropped > 0 {
		s.dict.expired.Add(uint64(dropped))
	}
	return dropped
}

// retire takes w out of its dict's accounting; the caller removes it from
// the series. Counters made in w afterwards no longer weigh on the dict.
func (s *Series) retire(w *Window) int {
	n := w.count.Or(retiredBit) &^ retiredBit
	s.dict.entries.Add(-n)
	return int(n)
}

// removeAll retires every window (the namespace is going away).
func (s *Series) removeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.windows {
		s.retire(w)
	}
	s.windows = nil
	s.cur.Store(nil)
}

// list records that c, a counter of w, has a diff to push.
func (s *Series) list(w *Window, c *Counter) {
	if s.local.Load() {
		return
	}
	w.pending.Add(1)
	sh := &s.dirty[(uintptr(unsafe.Pointer(c))>>5)%dirtyShards]
	sh.mu.Lock()
	i := len(sh.runs) - 1
	for i >= 0 && sh.runs[i].w != w {
		i--
	}
	if i < 0 {
		i = len(sh.runs)
		if i < cap(sh.runs) {
			sh.runs = sh.runs[:i+1] // the run there holds an emptied array, or none
		} else {
			sh.runs = append(sh.runs, dirtyRun{})
		}
		sh.runs[i].w = w
	}
	sh.runs[i].cs = append(sh.runs[i].cs, c)
	sh.mu.Unlock()
}

// Take moves the diff of every listed counter into its sync part (see
// Counter) and calls fn with each non-zero amount taken, the counter's window
// start (Unix milliseconds) and key. A counter that gets a diff again later
// is listed again. For the syncer: every amount taken must be pushed.
//
// The lists are handed over whole; their arrays come back for the next
// period's counters only when short (see keepDirty).
func (s *Series) Take(fn func(start int64, key string, v float64)) {
	for i := range s.dirty {
		sh := &s.dirty[i]
		sh.mu.Lock()
		runs := sh.runs
		if len(runs) == 0 { // nothing listed: the arrays stay
			sh.mu.Unlock()
			continue
		}
		sh.runs = nil
		sh.mu.Unlock()
		for j := range runs {
			r := &runs[j]
			for _, c := range r.cs {
				if v := c.take(); v != 0 {
					fn(r.w.start, c.key, v)
				}
			}
			r.w.pending.Add(-int64(len(r.cs)))
			r.w = nil
			if cap(r.cs) > keepDirty {
				r.cs = nil
			} else {
				clear(r.cs)
				r.cs = r.cs[:0]
			}
		}
		sh.mu.Lock()
		if sh.runs == nil { // nothing listed meanwhile
			sh.runs = runs[:0]
		}
		sh.mu.Unlock()
	}
}

// Dirty returns the number of listed counters (an upper bound on the
// counters holding a diff).
func (s *Series) Dirty() int {
	n := 0
	for i := range s.dirty {
		sh := &s.dirty[i]
		sh.mu.Lock()
		for _, r := range sh.runs {
			n += len(r.cs)
		}
		sh.mu.Unlock()
	}
	return n
}
