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
)

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
	lanes   map[string]lane
}

// New returns an empty store.
func New() *Store {
	return &Store{windows: make(map[windowID]map[string]float64), lanes: make(map[string]lane)}
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
	if apply && len(b.Diffs) > 0 {
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
// the previous window as of now, and lane records that applied nothing for
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
		if math.IsNaN(c.Cost) || math.IsInf(c.Cost, 0) || c.Cost < 0 {
			return nil, fmt.Errorf("memory: check of key %q: cost %v: must be finite and >= 0", c.Key, c.Cost)
		}
		for _, l := range c.Limits {
			if err := checkDiff(strategy.Diff{Key: c.Key, WindowSize: l.WindowSize, Value: l.Limit}); err != nil {
				return nil, err
			}
			if l.Limit <= 0 {
				return nil, fmt.Errorf("memory: check of key %q: limit %v: must be > 0", c.Key, l.Limit)
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.lanes[node]
	apply := !ok || seq > l.seq
	out := make([]strategy.CheckResult, len(checks))
	for i, c := range checks {
		cur := func(size time.Duration, back time.Duration) float64 {
			start := strategy.WindowStart(c.Now, size).Add(-back)
			return s.windows[windowID{c.Namespace, size.Milliseconds(), start.UnixMilli()}][c.Key]
		}
		allowed := apply
		for _, lim := range c.Limits {
			rate := cur(lim.WindowSize, 0)
			if !lim.Fixed {
				rate += cur(lim.WindowSize, lim.WindowSize) * strategy.Weight(c.Now, lim.WindowSize)
			}
			if rate+c.Cost > lim.Limit {
				allowed = false
			}
		}
		if allowed {
			done := make(map[time.Duration]bool, len(c.Limits))
			for _, lim := range c.Limits {
				if done[lim.WindowSize] {
					continue
				}
				done[lim.WindowSize] = true
				id := windowID{c.Namespace, lim.WindowSize.Milliseconds(), strategy.WindowStart(c.Now, lim.WindowSize).UnixMilli()}
				if s.windows[id] == nil {
					s.windows[id] = make(map[string]float64)
				}
				s.windows[id][c.Key] += c.Cost
			}
		}
		out[i].Allowed = allowed
		out[i].Totals = make([]strategy.Totals, len(c.Limits))
		for j, lim := range c.Limits {
			out[i].Totals[j] = strategy.Totals{Current: cur(lim.WindowSize, 0), Previous: cur(lim.WindowSize, lim.WindowSize)}
		}
	}
	if apply {
		s.lanes[node] = lane{seq: seq, seen: time.Now()}
	}
	return out, nil
}
