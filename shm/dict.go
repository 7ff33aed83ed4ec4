package shm

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultCapacity is the counter bound of a dict made with capacity 0.
const DefaultCapacity = 1_000_000

// Sweep thresholds, as fractions of the capacity: a sweep starts above the
// high mark and evicts down to the low mark.
const (
	highMark = 0.9
	lowMark  = 0.8
	// sampleSize bounds the counters a sweep looks at to choose which are cold.
	sampleSize = 4096
	// sweepBackoff is the least time between two background sweeps when
	// the last one removed nothing.
	sweepBackoff = 100 // ms
)

// Stats is a snapshot of a dict's figures.
type Stats struct {
	Name      string
	Capacity  int
	Entries   int    // live counters
	Evictions uint64 // counters evicted to make room
	Overflows uint64 // counters not created because the dict was full
	Expired   uint64 // counters dropped with their expired window
}

// Dict is a named, bounded set of counters, shared by the namespaces that
// name it. See the package documentation for its capacity policy. When
// nearly full it sweeps in a background goroutine, which Close stops and
// waits for; a closed dict still counts, and no longer sweeps in the
// background.
//
// A Dict is safe for concurrent use. Make it with NewDict.
type Dict struct {
	name      string
	capacity  atomic.Int64
	entries   atomic.Int64
	evictions atomic.Uint64
	overflows atomic.Uint64
	expired   atomic.Uint64

	sweeping  atomic.Bool
	nextSweep atomic.Int64 // ms: no background sweep starts before
	sweepMu   sync.Mutex   // one sweep at a time

	// The background sweep: started by admit, stopped and waited for by
	// Close.
	bgMu   sync.Mutex // guards closed and bg.Add
	closed atomic.Bool
	bg     sync.WaitGroup

	mu      sync.Mutex
	series  map[seriesKey]*Series
	buckets map[bucketsKey]*Buckets
	btabs   atomic.Pointer[map[bucketsKey]*Buckets] // a copy of buckets, read without mu
	keyed   map[bucketsKey]keyedTable
	clocks  map[string]func() int64 // each namespace's clock, for the sweep (SetClock)
}

type seriesKey struct {
	namespace string
	size      int64
}

// NewDict returns an empty dict that holds at most capacity counters
// (DefaultCapacity when capacity is 0).
func NewDict(name string, capacity int) (*Dict, error) {
	d := &Dict{name: name, series: make(map[seriesKey]*Series)}
	if err := d.SetCapacity(capacity); err != nil {
		return nil, err
	}
	return d, nil
}

// Capacity returns the dict's counter bound.
func (d *Dict) Capacity() int { return int(d.capacity.Load()) }

// SetCapacity changes the counter bound (DefaultCapacity when 0). A lower
// bound takes effect as counters expire or are evicted.
func (d *Dict) SetCapacity(capacity int) error {
	if capacity < 0 {
		return fmt.Errorf("shm: dict %q: capacity %d: must be >= 0 (0 means %d)", d.name, capacity, DefaultCapacity)
	}
	if capacity == 0 {
		capacity = DefaultCapacity
	}
	d.capacity.Store(int64(capacity))
	return nil
}

// len returns the number of live counters.
func (d *Dict) len() int { return int(d.entries.Load()) }

// Close stops the background sweep and waits for it. It is idempotent.
func (d *Dict) Close() {
	d.bgMu.Lock()
	d.closed.Store(true)
	d.bgMu.Unlock()
	d.bg.Wait()
}

// Stats returns a snapshot of the dict's figures.
func (d *Dict) Stats() Stats {
	return Stats{
		Name:      d.name,
		Capacity:  d.Capacity(),
		Entries:   d.len(),
		Evictions: d.evictions.Load(),
		Overflows: d.overflows.Load(),
		Expired:   d.expired.Load(),
	}
}

// Series returns the series of namespace ns and window size (whole
// milliseconds), creating it when needed.
func (d *Dict) Series(ns string, size time.Duration) *Series {
	k := seriesKey{ns, size.Milliseconds()}
	d.mu.Lock()
	defer d.mu.Unlock()
	s, ok := d.series[k]
	if !ok {
		s = &Series{dict: d, namespace: ns, size: k.size}
		d.series[k] = s
	}
	return s
}

// SetClock makes the dict's sweep read the windows, buckets and logs of
// namespace ns at now() (Unix ms), rather than at the instant the caller
// that started the sweep passed: namespaces of one dict may count on
// different clocks (the node's, or the store's), and a window still
// current on one clock may be over on another. A nil now forgets it.
func (d *Dict) SetClock(ns string, now func() int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if now == nil {
		delete(d.clocks, ns)
		return
	}
	if d.clocks == nil {
		d.clocks = make(map[string]func() int64)
	}
	d.clocks[ns] = now
}

// clocksAt returns the instant of each namespace's clock, for one sweep:
// now for a namespace without a clock of its own.
func (d *Dict) clocksAt(now int64) func(ns string) int64 {
	d.mu.Lock()
	clocks := make(map[string]func() int64, len(d.clocks))
	for ns, c := range d.clocks {
		clocks[ns] = c
	}
	d.mu.Unlock()
	at := make(map[string]int64, len(clocks))
	return func(ns string) int64 {
		c, ok := clocks[ns]
		if !ok {
			return now
		}
		t, ok := at[ns]
		if !ok {
			t = c()
			at[ns] = t
		}
		return t
	}
}

// RemoveNamespace drops every series of ns and their counters, and its
// bucket and keyed tables.
func (d *Dict) RemoveNamespace(ns string) {
	d.mu.Lock()
	delete(d.clocks, ns)
	var gone []*Series
	for k, s := range d.series {
		if k.namespace == ns {
			gone = append(gone, s)
			delete(d.series, k)
		}
	}
	var goneB []*Buckets
	for k, t := range d.buckets {
		if k.namespace == ns {
			goneB = append(goneB, t)
			delete(d.buckets, k)
		}
	}
	d.publishBuckets()
	var goneK []keyedTable
	for k, t := range d.keyed {
		if k.namespace == ns {
			goneK = append(goneK, t)
			delete(d.keyed, k)
		}
	}
	d.mu.Unlock()
	for _, s := range gone {
		s.removeAll()
	}
	for _, t := range goneB {
		t.removeAll()
	}
	for _, t := range goneK {
		t.removeAll()
	}
}

// owned is a table of a dict and the namespace it belongs to.
type owned[T any] struct {
	ns string
	t  T
}

func (d *Dict) allSeries() []*Series {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]*Series, 0, len(d.series))
	for _, s := range d.series {
		out = append(out, s)
	}
	return out
}

// admit reports whether one more counter may be made, starting a background
// sweep when the dict is nearly full, and counts an overflow when it is full.
func (d *Dict) admit(now int64) bool {
	n, capacity := d.entries.Load(), d.capacity.Load()
	if float64(n) >= highMark*float64(capacity) && now >= d.nextSweep.Load() && d.sweeping.CompareAndSwap(false, true) {
		d.startSweep(now)
	}
	if n >= capacity {
		d.overflows.Add(1)
		return false
	}
	return true
}

// startSweep runs a sweep in the background, unless the dict is closed.
// The caller has set d.sweeping; the sweep clears it.
func (d *Dict) startSweep(now int64) {
	d.bgMu.Lock()
	defer d.bgMu.Unlock()
	if d.closed.Load() {
		d.sweeping.Store(false)
		return
	}
	d.bg.Add(1)
	go func() {
		defer d.bg.Done()
		defer d.sweeping.Store(false)
		if d.sweep(now) == 0 {
			// Nothing could go (every counter holds a diff to push, or
			// is hot): wait before scanning again.
			d.nextSweep.Store(now + sweepBackoff)
		}
	}()
}

// sweep drops expired windows and, when the dict is above its low mark,
// evicts cold counters that hold no unpushed diff (lowest counts first, older
// windows first) down to it. It returns the number of counters removed. now
// is the clock in Unix milliseconds, of the namespaces without one of their
// own (SetClock). A sweep of a closed dict stops early.
func (d *Dict) sweep(now int64) int {
	d.sweepMu.Lock()
	defer d.sweepMu.Unlock()
	at := d.clocksAt(now)
	series := d.allSeries()
	removed := 0
	for _, s := range series {
		removed += s.Expire(at(s.namespace))
	}
	for _, t := range d.allBuckets() {
		removed += t.t.Expire(at(t.ns))
	}
	for _, t := range d.allKeyed() {
		removed += t.t.Expire(at(t.ns))
	}
	need := d.entries.Load() - int64(lowMark*float64(d.capacity.Load()))
	if need <= 0 {
		return removed
	}
	var windows []*Window
	for _, s := range series {
		if !s.pinned.Load() {
			windows = append(windows, s.held()...)
		}
	}
	slices.SortStableFunc(windows, func(a, b *Window) int { return cmp.Compare(a.start, b.start) })

	// Choose the coldness threshold from a sample of evictable counters.
	sample := make([]float64, 0, sampleSize)
	seen := 0
	for _, w := range windows {
		local := w.series.local.Load()
		w.Range(func(_ string, c *Counter) bool {
			seen++
			if local || c.diffValue() == 0 {
				sample = append(sample, math.Abs(c.Value()))
			}
			return len(sample) < sampleSize
		})
		if len(sample) == sampleSize {
			break
		}
	}
	if len(sample) == 0 {
		return removed
	}
	slices.Sort(sample)
	evictable := float64(len(sample)) / float64(seen) * float64(d.entries.Load())
	i := int(math.Ceil(float64(need) / evictable * float64(len(sample))))
	threshold := sample[min(max(i, 1), len(sample))-1]

	evicted := int64(0)
	for _, w := range windows {
		w.Range(func(key string, c *Counter) bool {
			if math.Abs(c.Value()) <= threshold && w.evict(key, c) {
				evicted++
				d.evictions.Add(1)
			}
			return evicted < need && !d.closed.Load()
		})
		if evicted >= need || d.closed.Load() {
			break
		}
	}
	for _, w := range windows {
		w.compact()
	}
	return removed + int(evicted)
}
