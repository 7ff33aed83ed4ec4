// Package memory is a strategy.Strategy kept in this process: for tests, for
// several Instances in one process, and for single-process use. It is the
// reference the other strategies are tested against.
package memory

import (
	"context"
	"fmt"
	"iter"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/ratesync/ratesync/strategy"
)

// LaneTTL is how long Purge keeps the record of a push lane that pushed
// nothing.
const LaneTTL = 24 * time.Hour

var (
	_ strategy.Strategy    = (*Store)(nil)
	_ strategy.PushCounter = (*Store)(nil)
	_ strategy.Checker     = (*Store)(nil)
	_ strategy.BucketStore = (*Store)(nil)
)

type bucketID struct {
	namespace string
	key       string
	kind      uint8
	window    int64 // ms
}

// bucket is a bucket's state and the rate it last drained at, which tells
// Purge when it is empty.
type bucket struct {
	st   strategy.BucketState
	rate float64
}

type windowID struct {
	namespace string
	size      int64 // ms
	start     int64 // ms
}

type lane struct {
	seq  uint64
	seen time.Time
}

// Store is an in-process strategy. It is safe for concurrent use; its zero
// value is not: use New.
type Store struct {
	mu      sync.RWMutex
	windows map[windowID]map[string]float64
	buckets map[bucketID]bucket
	lanes   map[string]lane
}

// New returns an empty store.
func New() *Store {
	return &Store{windows: make(map[windowID]map[string]float64), buckets: make(map[bucketID]bucket), lanes: make(map[string]lane)}
}

func checkDiff(d strategy.Diff) error {
	if math.IsNaN(d.Value) || math.IsInf(d.Value, 0) {
		return fmt.Errorf("memory: diff of key %q: value %v: must be finite", d.Key, d.Value)
	}
	if d.WindowSize <= 0 || d.WindowSize%time.Millisecond != 0 {
		return fmt.Errorf("memory: diff of key %q: window size %v: must be > 0 and whole milliseconds", d.Key, d.WindowSize)
	}
	return nil
}

// PushDiffs applies b at most once per (b.Node, b.Seq).
func (s *Store) PushDiffs(ctx context.Context, b strategy.Batch) error {
	_, err := s.push(ctx, b, false)
	return err
}

// PushAndCount applies b like PushDiffs and returns each diff's totals as of
// that diff.
func (s *Store) PushAndCount(ctx context.Context, b strategy.Batch) ([]strategy.Totals, error) {
	return s.push(ctx, b, true)
}

func (s *Store) push(ctx context.Context, b strategy.Batch, count bool) ([]strategy.Totals, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, d := range b.Diffs {
		if err := checkDiff(d); err != nil {
			return nil, err
		}
	}
	for _, d := range b.Buckets {
		if err := checkBucketDiff(d); err != nil {
			return nil, err
		}
	}
	var totals []strategy.Totals
	if count {
		totals = make([]strategy.Totals, len(b.Diffs))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.lanes[b.Node]
	apply := !ok || b.Seq > l.seq
	for i, d := range b.Diffs {
		id := windowID{d.Namespace, d.WindowSize.Milliseconds(), d.WindowStart.UnixMilli()}
		w := s.windows[id]
		if apply {
			if w == nil {
				w = make(map[string]float64)
				s.windows[id] = w
			}
			w[d.Key] += d.Value
		}
		if count {
			totals[i].Current = w[d.Key]
			id.start -= id.size
			totals[i].Previous = s.windows[id][d.Key]
		}
	}
	if apply {
		for _, d := range b.Buckets {
			id := bucketID{d.Namespace, d.Key, d.Kind, d.Window.Milliseconds()}
			s.buckets[id] = bucket{strategy.BucketAdd(s.bucket(id), d.Rate, d.Cost, id.window, d.At), d.Rate}
		}
	}
	if apply && len(b.Diffs)+len(b.Buckets) > 0 {
		s.lanes[b.Node] = lane{seq: b.Seq, seen: time.Now()}
	}
	return totals, nil
}

// GetCounters yields the current and previous windows of each size as of
// q.Now, restricted to q.Keys when set. It reads a snapshot taken under the
// store's lock and yields after releasing it.
func (s *Store) GetCounters(ctx context.Context, q strategy.Query) iter.Seq2[strategy.Counter, error] {
	return func(yield func(strategy.Counter, error) bool) {
		if err := ctx.Err(); err != nil {
			yield(strategy.Counter{}, err)
			return
		}
		var out []strategy.Counter
		keys := q.Keys
		if len(keys) > 0 {
			keys = slices.Compact(slices.Sorted(slices.Values(keys)))
		}
		sizes := slices.Compact(slices.Sorted(slices.Values(q.WindowSizes)))
		s.mu.RLock()
		for _, size := range sizes {
			cur := strategy.WindowStart(q.Now, size)
			for _, start := range []time.Time{cur, cur.Add(-size)} {
				w := s.windows[windowID{q.Namespace, size.Milliseconds(), start.UnixMilli()}]
				if w == nil {
					continue
				}
				add := func(k string, v float64) {
					out = append(out, strategy.Counter{Key: k, WindowStart: start, WindowSize: size, Count: v})
				}
				if keys == nil {
					for k, v := range w {
						add(k, v)
					}
					continue
				}
				for _, k := range keys {
					if v, ok := w[k]; ok {
						add(k, v)
					}
				}
			}
		}
		s.mu.RUnlock()
		for _, c := range out {
			if !yield(c, nil) {
				return
			}
		}
	}
}

// GetWindow returns one counter's count, 0 when absent.
func (s *Store) GetWindow(ctx context.Context, namespace, key string, windowStart time.Time, windowSize time.Duration) (float64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.windows[windowID{namespace, windowSize.Milliseconds(), windowStart.UnixMilli()}][key], nil
}

// Purge drops the namespace's windows of the given sizes that are older than
// the previous window as of now, its buckets that are empty as of now (at
// the rate they last drained at), and lane records that applied nothing for
// LaneTTL of wall-clock time.
func (s *Store) Purge(ctx context.Context, namespace string, windowSizes []time.Duration, now time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range s.windows {
		if id.namespace != namespace {
			continue
		}
		for _, size := range windowSizes {
			if id.size == size.Milliseconds() && id.start < strategy.WindowStart(now, size).Add(-size).UnixMilli() {
				delete(s.windows, id)
			}
		}
	}
	for id, b := range s.buckets {
		if id.namespace == namespace && strategy.BucketLevel(b.st, b.rate, now.UnixMilli()) == 0 {
			delete(s.buckets, id)
		}
	}
	for node, l := range s.lanes {
		if time.Since(l.seen) > LaneTTL {
			delete(s.lanes, node)
		}
	}
	return nil
}

// CheckAndCount decides and counts each check atomically, at most once per
// (node, seq).
func (s *Store) CheckAndCount(ctx context.Context, node string, seq uint64, checks []strategy.Check) ([]strategy.CheckResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, c := range checks {
		if err := checkCheck(c); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.lanes[node]
	apply := !ok || seq > l.seq
	out := make([]strategy.CheckResult, len(checks))
	for i, c := range checks {
		out[i] = s.check(c, apply)
	}
	if apply {
		s.lanes[node] = lane{seq: seq, seen: time.Now()}
	}
	return out, nil
}

// check decides and, when apply and it passes, counts one check. Callers
// hold s.mu.
func (s *Store) check(c strategy.Check, apply bool) strategy.CheckResult {
	now := c.Now.UnixMilli()
	count := func(size time.Duration, back time.Duration) float64 {
		start := strategy.WindowStart(c.Now, size).Add(-back)
		return s.windows[windowID{c.Namespace, size.Milliseconds(), start.UnixMilli()}][c.Key]
	}
	bucketOf := func(l strategy.CheckLimit) bucketID {
		return bucketID{c.Namespace, c.Key, l.Kind, l.WindowSize.Milliseconds()}
	}
	allowed := apply
	for _, l := range c.Limits {
		size := l.WindowSize.Milliseconds()
		if l.Kind != 0 {
			lvl := strategy.BucketLevel(s.bucket(bucketOf(l)), l.Limit, now)
			allowed = allowed && strategy.BucketFits(lvl, c.Cost, l.Burst, size)
			continue
		}
		elapsed := now - strategy.WindowStart(c.Now, l.WindowSize).UnixMilli()
		allowed = allowed && strategy.WindowFits(count(l.WindowSize, 0), count(l.WindowSize, l.WindowSize), c.Cost, l.Limit, size, elapsed, l.Fixed)
	}
	if allowed && c.Cost > 0 {
		windows := make(map[time.Duration]bool, len(c.Limits))
		buckets := make(map[bucketID]bool, len(c.Limits))
		for _, l := range c.Limits {
			if l.Kind != 0 {
				id := bucketOf(l)
				if !buckets[id] {
					buckets[id] = true
					s.buckets[id] = bucket{strategy.BucketAdd(s.bucket(id), l.Limit, c.Cost, id.window, now), l.Limit}
				}
				continue
			}
			if windows[l.WindowSize] {
				continue
			}
			windows[l.WindowSize] = true
			id := windowID{c.Namespace, l.WindowSize.Milliseconds(), strategy.WindowStart(c.Now, l.WindowSize).UnixMilli()}
			if s.windows[id] == nil {
				s.windows[id] = make(map[string]float64)
			}
			s.windows[id][c.Key] += c.Cost
		}
	}
	res := strategy.CheckResult{Allowed: allowed, Totals: make([]strategy.Totals, len(c.Limits))}
	for j, l := range c.Limits {
		if l.Kind != 0 {
			if res.Buckets == nil {
				res.Buckets = make([]strategy.BucketState, len(c.Limits))
			}
			res.Buckets[j] = s.bucket(bucketOf(l))
			continue
		}
		res.Totals[j] = strategy.Totals{Current: count(l.WindowSize, 0), Previous: count(l.WindowSize, l.WindowSize)}
	}
	return res
}

// bucket returns the state of a bucket, empty when the store holds none.
// Callers hold s.mu.
func (s *Store) bucket(id bucketID) strategy.BucketState {
	if b, ok := s.buckets[id]; ok {
		return b.st
	}
	return strategy.BucketState{Key: id.key, Kind: id.kind, Window: time.Duration(id.window) * time.Millisecond}
}

// GetBuckets returns the buckets of refs the store holds.
func (s *Store) GetBuckets(ctx context.Context, namespace string, refs []strategy.BucketRef) ([]strategy.BucketState, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []strategy.BucketState
	for _, r := range refs {
		if b, ok := s.buckets[bucketID{namespace, r.Key, r.Kind, r.Window.Milliseconds()}]; ok {
			out = append(out, b.st)
		}
	}
	return out, nil
}

func checkCheck(c strategy.Check) error {
	if math.IsNaN(c.Cost) || math.IsInf(c.Cost, 0) || c.Cost < 0 {
		return fmt.Errorf("memory: check of key %q: cost %v: must be finite and >= 0", c.Key, c.Cost)
	}
	for _, l := range c.Limits {
		if err := checkDiff(strategy.Diff{Key: c.Key, WindowSize: l.WindowSize, Value: l.Limit}); err != nil {
			return err
		}
		if l.Limit <= 0 {
			return fmt.Errorf("memory: check of key %q: limit %v: must be > 0", c.Key, l.Limit)
		}
		if l.Kind != 0 && !(l.Burst > 0 && !math.IsInf(l.Burst, 0)) {
			return fmt.Errorf("memory: check of key %q: burst %v: must be finite and > 0", c.Key, l.Burst)
		}
	}
	return nil
}

func checkBucketDiff(d strategy.BucketDiff) error {
	switch {
	case d.Kind == 0:
		return fmt.Errorf("memory: bucket diff of key %q: kind 0: must be a bucket kind (> 0)", d.Key)
	case d.Window <= 0 || d.Window%time.Millisecond != 0:
		return fmt.Errorf("memory: bucket diff of key %q: window %v: must be > 0 and whole milliseconds", d.Key, d.Window)
	case !(d.Cost > 0) || math.IsInf(d.Cost, 0):
		return fmt.Errorf("memory: bucket diff of key %q: cost %v: must be finite and > 0", d.Key, d.Cost)
	case !(d.Rate > 0) || math.IsInf(d.Rate, 0):
		return fmt.Errorf("memory: bucket diff of key %q: rate %v: must be finite and > 0", d.Key, d.Rate)
	}
	return nil
}
