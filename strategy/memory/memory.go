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

	"github.com/ratesync/ratesync/internal/arith"
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

// lane is the record of a push lane: the last seq applied and, when
// CheckAndCount applied it, the decision of each of its checks.
type lane struct {
	seq       uint64
	seen      time.Time
	decisions []bool
}

// Store is an in-process strategy. It is safe for concurrent use; its zero
// value is not: use New.
type Store struct {
	mu      sync.RWMutex
	windows map[windowID]map[string]float64
	buckets map[bucketID]bucket
	anchors map[bucketID]strategy.BucketState
	logs    map[bucketID]*arith.Log
	lanes   map[string]lane
}

// New returns an empty store.
func New() *Store {
	return &Store{
		windows: make(map[windowID]map[string]float64), buckets: make(map[bucketID]bucket),
		anchors: make(map[bucketID]strategy.BucketState), logs: make(map[bucketID]*arith.Log),
		lanes: make(map[string]lane),
	}
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
			s.add(bucketID{d.Namespace, d.Key, d.Kind, d.Window.Milliseconds()}, d.Rate, d.Cost, d.At)
		}
	}
	if apply && len(b.Diffs)+len(b.Buckets) > 0 {
		s.lanes[b.Node] = lane{seq: b.Seq, seen: time.Now()}
	}
	return totals, nil
}

// GetCounters yields the current and previous windows of each size as of
// q.Now, and the ones before them down to q.Depth, restricted to q.Keys
// when set. It reads a snapshot taken under the
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
		depths := make(map[time.Duration]int, len(q.WindowSizes))
		for i, size := range q.WindowSizes {
			depths[size] = max(depths[size], q.Depth(i))
		}
		sizes := slices.Compact(slices.Sorted(slices.Values(q.WindowSizes)))
		s.mu.RLock()
		for _, size := range sizes {
			cur := arith.WindowStart(q.Now, size)
			for back := range depths[size] {
				start := cur.Add(-time.Duration(back) * size)
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
// the rate they last drained at), its anchored windows that closed and its
// logs' entries that no longer weigh, and lane records that applied nothing for
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
			if id.size == size.Milliseconds() && id.start < arith.WindowStart(now, size).Add(-size).UnixMilli() {
				delete(s.windows, id)
			}
		}
	}
	for id, b := range s.buckets {
		if id.namespace == namespace && arith.Level(b.st.Level, b.st.At, b.rate, now.UnixMilli()) == 0 {
			delete(s.buckets, id)
		}
	}
	for id, a := range s.anchors {
		if id.namespace == namespace && arith.AnchoredCount(a.Level, a.At, id.window, now.UnixMilli()) == 0 {
			delete(s.anchors, id)
		}
	}
	for id, l := range s.logs {
		if id.namespace == namespace {
			if l.Trim(now.UnixMilli(), id.window); len(l.Entries) == 0 {
				delete(s.logs, id)
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
// (node, seq), and records the decisions with seq in node's lane (the
// store's one shard): a retry of the call that set the record (the same
// seq) counts nothing again and gets the decisions made then, with the
// current totals and states; a seq below the record, or the seq of a push,
// gets not allowed (see strategy.Checker).
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
	var kept []bool // the decisions recorded for seq, on a retry
	if ok && seq == l.seq {
		kept = l.decisions
	}
	out := make([]strategy.CheckResult, len(checks))
	for i, c := range checks {
		out[i] = s.check(c, apply, i < len(kept) && kept[i])
	}
	if apply {
		decisions := make([]bool, len(out))
		for i := range out {
			decisions[i] = out[i].Allowed
		}
		s.lanes[node] = lane{seq: seq, seen: time.Now(), decisions: decisions}
	}
	return out, nil
}

// check decides and, when apply and it passes, counts one check; when not
// apply it counts nothing and returns the decision kept (recorded when the
// call was applied). Callers hold s.mu.
func (s *Store) check(c strategy.Check, apply, kept bool) strategy.CheckResult {
	now := c.Now.UnixMilli()
	counts := func(l strategy.CheckLimit) []float64 {
		size := l.Sub()
		start := arith.WindowStart(c.Now, size)
		out := make([]float64, l.Depth())
		for i := range out {
			out[i] = s.windows[windowID{c.Namespace, size.Milliseconds(), start.Add(-time.Duration(i) * size).UnixMilli()}][c.Key]
		}
		return out
	}
	idOf := func(l strategy.CheckLimit) bucketID {
		return bucketID{c.Namespace, c.Key, l.Kind, l.WindowSize.Milliseconds()}
	}
	allowed := apply
	for _, l := range c.Limits {
		if allowed {
			allowed = s.fits(c, l, idOf(l), counts, now)
		}
	}
	if allowed && c.Cost > 0 {
		windows := make(map[time.Duration]bool, len(c.Limits))
		keyed := make(map[bucketID]bool, len(c.Limits))
		for _, l := range c.Limits {
			if l.Kind != 0 {
				if id := idOf(l); !keyed[id] {
					keyed[id] = true
					s.add(id, l.Limit, c.Cost, now)
				}
				continue
			}
			size := l.Sub()
			if windows[size] {
				continue
			}
			windows[size] = true
			id := windowID{c.Namespace, size.Milliseconds(), arith.WindowStart(c.Now, size).UnixMilli()}
			if s.windows[id] == nil {
				s.windows[id] = make(map[string]float64)
			}
			s.windows[id][c.Key] += c.Cost
		}
	}
	if !apply {
		allowed = kept
	}
	res := strategy.CheckResult{Allowed: allowed, Totals: make([]strategy.Totals, len(c.Limits))}
	for j, l := range c.Limits {
		if l.Kind != 0 {
			if res.Buckets == nil {
				res.Buckets = make([]strategy.BucketState, len(c.Limits))
			}
			res.Buckets[j] = s.state(idOf(l), l, c.Cost, now, allowed)
			continue
		}
		n := counts(l)
		res.Totals[j] = strategy.Totals{Current: n[0], Previous: n[1]}
		if l.Depth() > 2 {
			if res.Windows == nil {
				res.Windows = make([][]float64, len(c.Limits))
			}
			res.Windows[j] = n
		}
	}
	return res
}

// fits reports whether check c fits limit l (whose keyed state is id), as
// of now. Callers hold s.mu.
func (s *Store) fits(c strategy.Check, l strategy.CheckLimit, id bucketID, counts func(strategy.CheckLimit) []float64, now int64) bool {
	switch l.Kind {
	case 0:
		n := counts(l)
		size := l.Sub().Milliseconds()
		elapsed := now - arith.WindowStart(c.Now, l.Sub()).UnixMilli()
		if l.Depth() > 2 {
			return arith.SpanFits(n, c.Cost, l.Limit, size, elapsed)
		}
		return arith.WindowFits(n[0], n[1], c.Cost, l.Limit, size, elapsed, l.Fixed)
	case strategy.KindAnchored:
		a := s.anchored(id)
		return arith.AnchoredFits(arith.AnchoredCount(a.Level, a.At, id.window, now), c.Cost, l.Limit)
	case strategy.KindLog:
		lg := s.logs[id]
		if lg == nil {
			return arith.LogFits(0, c.Cost, l.Limit)
		}
		lg.Trim(now, id.window)
		return arith.LogFits(lg.Sum, c.Cost, l.Limit)
	}
	b := s.bucket(id)
	lvl := arith.Level(b.Level, b.At, l.Limit, now)
	return arith.BucketFits(lvl, c.Cost, l.Burst, id.window)
}

// add counts cost at at in the bucket, anchored window or log id; rate is
// a bucket's. Callers hold s.mu.
func (s *Store) add(id bucketID, rate, cost float64, at int64) {
	switch id.kind {
	case strategy.KindAnchored:
		a := s.anchored(id)
		a.Level, a.At = arith.AnchoredAdd(a.Level, a.At, cost, id.window, at)
		s.anchors[id] = a
	case strategy.KindLog:
		lg := s.logs[id]
		if lg == nil {
			lg = &arith.Log{}
			s.logs[id] = lg
		}
		lg.Add(at, cost)
	default:
		b := s.bucket(id)
		b.Level, b.At = arith.BucketAdd(b.Level, b.At, rate, cost, id.window, at)
		s.buckets[id] = bucket{b, rate}
	}
}

// state returns the state of the bucket, anchored window or log id of
// limit l after a check of cost at now. Callers hold s.mu.
func (s *Store) state(id bucketID, l strategy.CheckLimit, cost float64, now int64, allowed bool) strategy.BucketState {
	switch id.kind {
	case strategy.KindAnchored:
		a := s.anchored(id)
		if arith.AnchoredCount(a.Level, a.At, id.window, now) == 0 {
			return strategy.BucketState{Key: id.key, Kind: id.kind, Window: l.WindowSize}
		}
		return a
	case strategy.KindLog:
		st := strategy.BucketState{Key: id.key, Kind: id.kind, Window: l.WindowSize}
		if lg := s.logs[id]; lg != nil {
			lg.Trim(now, id.window)
			st.At, st.Level = lg.Newest(), lg.Sum
			if !allowed && !arith.LogFits(lg.Sum, cost, l.Limit) {
				st.RetryAt = arith.RetryAt(lg.Entries, lg.Sum, cost, l.Limit, id.window)
			}
		}
		return st
	}
	return s.bucket(id)
}

// anchored returns an anchored window's state, zero when the store holds
// none. Callers hold s.mu.
func (s *Store) anchored(id bucketID) strategy.BucketState {
	if a, ok := s.anchors[id]; ok {
		return a
	}
	return strategy.BucketState{Key: id.key, Kind: id.kind, Window: time.Duration(id.window) * time.Millisecond}
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
		if p := l.Precision; p != 0 && (p < 0 || p%time.Millisecond != 0 || l.WindowSize%p != 0 || l.Kind != 0 || l.Fixed) {
			return fmt.Errorf("memory: check of key %q: precision %v: must be whole milliseconds dividing window %v, on a sliding window limit", c.Key, p, l.WindowSize)
		}
		if l.Kind > strategy.KindLog && !(l.Burst > 0 && !math.IsInf(l.Burst, 0)) {
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
	case !d.CostValid():
		return fmt.Errorf("memory: bucket diff of key %q: cost %v: must be finite and not 0 (> 0 for an anchored window or a log)", d.Key, d.Cost)
	case !(d.Rate > 0) || math.IsInf(d.Rate, 0):
		return fmt.Errorf("memory: bucket diff of key %q: rate %v: must be finite and > 0", d.Key, d.Rate)
	}
	return nil
}
