package syncer

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ratesync/ratesync/internal/arith"
	"github.com/ratesync/ratesync/shm"
	"github.com/ratesync/ratesync/strategy"
)

// laneLock is a mutex whose waiters can give up: a channel of one slot.
// It is held across store I/O, so every wait for it is bounded by a
// context (the background goroutine's is canceled by halt).
type laneLock chan struct{}

func (l laneLock) unlock() { <-l }

// lockCtx takes the lock unless ctx ends first.
func (l laneLock) lockCtx(ctx context.Context) bool {
	select {
	case l <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// counterID names one counter of the namespace: window size and start (ms)
// and key.
type counterID struct {
	size, start int64
	key         string
}

// keepAmounts: lane.amounts is kept for the next batches, emptied, when it
// never held more entries than this.
const keepAmounts = 4096

// lane is the namespace's push lane (Batch.Node): one exchange with the
// store at a time, batches in Seq order, a failed batch retried unchanged
// before anything newer.
type lane struct {
	mu laneLock // held for a whole exchange with the store; guards what follows

	inflight   []*strategy.Batch     // pushed and not acknowledged, oldest first
	doubts     []*doubt              // check calls the store may have applied, oldest first (check.go)
	amounts    map[counterID]float64 // in-flight amount of each counter
	amountsMax int                   // most entries amounts held since made
	calls      int                   // store calls that succeeded

	// Readable without mu.
	pinned   atomic.Bool  // batches are in flight: the pushed series are pinned
	nBatches atomic.Int64 // len(inflight), for Stats
	nDiffs   atomic.Int64 // diffs in those batches, for Stats
	nDoubts  atomic.Int64 // len(doubts), for Stats
}

// inflightOf returns the amount of the counter id still in flight: the part
// of its sync value the store has not shown yet. Callers hold lane.mu.
func (s *Syncer) inflightOf(id counterID) float64 { return s.lane.amounts[id] }

// syncLocked is one sync: push, fetch, expire. Callers hold lane.mu.
func (s *Syncer) syncLocked(ctx context.Context, op string, retry bool) error {
	t0 := s.clock.now()
	c := s.conf.Load()
	calls := s.lane.calls
	unwatch := s.watch(op)
	defer unwatch()
	m0 := time.Now()
	if s.measureOffset(ctx) { // offset.go: the store's clock, before this sync's windows
		s.lane.calls++ // and the store answers: no probe needed below
	}
	if c.BeforeSync != nil {
		c.BeforeSync(false)
	}
	if c.CountNodes {
		s.membersIfDue(ctx)
	}
	// In the background (retry), a failed push or fetch is sent again
	// (the same batches, the same (Node, Seq)) while the call timeout
	// lasts: a lost reply costs a round trip, not the store's up state. A
	// probe of a store marked down, and a caller's Sync, try once.
	pushed, late := 0, 0
	budget := time.Now().Add(c.HitTimeout)
	if !retry || s.isDown() {
		budget = time.Time{}
	}
	err := s.retryUntil(ctx, budget, func(ctx context.Context) error {
		p, l, err := s.pushLocked(ctx)
		pushed, late = pushed+p, late+l
		return err
	})
	fetched := 0
	if err == nil {
		err = s.retryUntil(ctx, budget, func(ctx context.Context) error {
			var err error
			fetched, err = s.fetchLocked(ctx)
			return err
		})
	}
	if err == nil && s.lane.calls == calls {
		// Nothing to push and no key to fetch: ask the store anyway, so that
		// an idle namespace still learns whether its store answers.
		if _, err = c.Strategy.GetWindow(ctx, c.Namespace, "", time.UnixMilli(0), time.Millisecond); err != nil {
			err = fmt.Errorf("syncer: namespace %q: probe the store: %w", c.Namespace, err)
		}
	}
	now := s.clock.ms()
	for _, sr := range c.Series {
		sr.Expire(now)
	}
	if c.Buckets != nil {
		for _, t := range c.Buckets() {
			t.Expire(now)
		}
	}
	if c.Keyed != nil {
		for _, t := range c.Keyed() {
			t.Expire(now)
		}
	}
	s.pruneRetired(now)
	if err == nil {
		s.health.lastSync.Store(int64(time.Since(m0)))
	}
	unwatch() // before report: a late watch must not mark down a sync that succeeded
	s.report(Report{Op: op, Duration: s.clock.since(t0), Pushed: pushed, Fetched: fetched, Late: late, Err: err})
	return err
}

// pushLocked pushes the in-flight batches, oldest first, then the diffs
// taken from the dirty counters as a new batch. It returns the diffs pushed
// and dropped as late. Callers hold lane.mu.
func (s *Syncer) pushLocked(ctx context.Context) (pushed, late int, err error) {
	if pushed, late, err = s.pushInflight(ctx); err != nil {
		return pushed, late, err
	}
	b := s.takeBatch(s.conf.Load())
	if b == nil {
		return pushed, late, nil
	}
	late += s.dropLate(b, s.clock.ms())
	if len(b.Diffs)+len(b.Buckets) == 0 {
		return pushed, late, nil
	}
	s.addInflight(b)
	if err := s.send(ctx, *b); err != nil {
		return pushed, late, err
	}
	s.ack(b)
	return pushed + len(b.Diffs) + len(b.Buckets), late, nil
}

// pushInflight sends the check calls in doubt again (resolveDoubts), then
// pushes the batches in flight, oldest first, and stops at the first
// failure: a lane's calls reach the store in Seq order.
func (s *Syncer) pushInflight(ctx context.Context) (pushed, late int, err error) {
	if len(s.lane.doubts) > 0 {
		if pushed, err = s.resolveDoubts(ctx); err != nil {
			return pushed, late, err
		}
	}
	now := s.clock.ms()
	for len(s.lane.inflight) > 0 {
		b := s.lane.inflight[0]
		late += s.dropLate(b, now)
		if len(b.Diffs)+len(b.Buckets) > 0 {
			if err := s.send(ctx, *b); err != nil {
				return pushed, late, err
			}
		}
		pushed += len(b.Diffs) + len(b.Buckets)
		s.ack(b)
	}
	return pushed, late, nil
}

// newBatch numbers diffs as the lane's next batch.
func (s *Syncer) newBatch(c *conf, diffs []strategy.Diff) *strategy.Batch {
	return &strategy.Batch{Node: c.Node, Seq: c.Seq.Add(1), Diffs: diffs}
}

// takeBatch takes the listed diffs of the pushed series, and what the
// namespace's buckets took, as a new batch, nil when there are none.
func (s *Syncer) takeBatch(c *conf) *strategy.Batch {
	var diffs []strategy.Diff
	for _, sr := range c.pushing {
		sr.Take(func(start int64, key string, v float64) {
			diffs = append(diffs, diffOf(c, sr, start, key, v))
		})
	}
	var buckets []strategy.BucketDiff
	if c.Buckets != nil && c.buckets {
		for _, t := range c.Buckets() {
			buckets = takePending(c, t, "", buckets)
		}
	}
	buckets = takeKeyed(c, "", buckets)
	if len(diffs)+len(buckets) == 0 {
		return nil
	}
	b := s.newBatch(c, diffs)
	b.Buckets = buckets
	return b
}

// diffOf returns the diff of v in key's counter of sr's window at start.
func diffOf(c *conf, sr *shm.Series, start int64, key string, v float64) strategy.Diff {
	d := strategy.Diff{
		Namespace: c.Namespace, Key: key,
		WindowStart: time.UnixMilli(start), WindowSize: time.Duration(sr.Size()) * time.Millisecond, Value: v,
	}
	if span := sr.Span(); span > sr.Size() {
		d.Span = time.Duration(span) * time.Millisecond
	}
	return d
}

// send pushes b.
func (s *Syncer) send(ctx context.Context, b strategy.Batch) error {
	c := s.conf.Load()
	err := c.Strategy.PushDiffs(ctx, b)
	s.countCall(callPush, err)
	if err != nil {
		return fmt.Errorf("syncer: namespace %q: push batch %d (%d diffs): %w", c.Namespace, b.Seq, len(b.Diffs), err)
	}
	return nil
}

// dropLate removes from b the diffs whose window is older than the previous
// window of its size as of now (than the oldest a span reads, for diffs of
// sub-windows), and counts them. b may be in flight.
func (s *Syncer) dropLate(b *strategy.Batch, now int64) int {
	inFlight := slices.Contains(s.lane.inflight, b)
	kept := b.Diffs[:0]
	for _, d := range b.Diffs {
		size, start := d.WindowSize.Milliseconds(), d.WindowStart.UnixMilli()
		if start < arith.WindowStart(time.UnixMilli(now), d.WindowSize).UnixMilli()-max(size, d.Span.Milliseconds()) {
			if inFlight {
				s.subInflight(counterID{size, start, d.Key}, d.Value)
			}
			continue
		}
		kept = append(kept, d)
	}
	n := len(b.Diffs) - len(kept)
	clear(b.Diffs[len(kept):])
	b.Diffs = kept
	if n > 0 {
		s.stats.late.Add(uint64(n))
		if inFlight {
			s.lane.nDiffs.Add(-int64(n))
		}
	}
	return n
}

// addInflight queues b behind the batches in flight.
func (s *Syncer) addInflight(b *strategy.Batch) {
	l := &s.lane
	if len(l.inflight) == 0 {
		s.setPinned(true)
	}
	l.inflight = append(l.inflight, b)
	l.nBatches.Add(1)
	l.nDiffs.Add(int64(len(b.Diffs)))
	if l.amounts == nil {
		l.amounts, l.amountsMax = make(map[counterID]float64, len(b.Diffs)), 0
	}
	for _, d := range b.Diffs {
		l.amounts[counterID{d.WindowSize.Milliseconds(), d.WindowStart.UnixMilli(), d.Key}] += d.Value
	}
	l.amountsMax = max(l.amountsMax, len(l.amounts))
}

// ack forgets b, a batch in flight: the store has it.
func (s *Syncer) ack(b *strategy.Batch) {
	l := &s.lane
	i := slices.Index(l.inflight, b)
	if i < 0 {
		return
	}
	l.nBatches.Add(-1)
	l.nDiffs.Add(-int64(len(b.Diffs)))
	l.inflight = slices.Delete(l.inflight, i, i+1)
	if len(l.inflight) == 0 {
		l.inflight = nil
		if l.amountsMax <= keepAmounts {
			clear(l.amounts) // synchronous mode: one small batch per call, the map is reused
		} else {
			l.amounts = nil // a map never shrinks: let a big one go
		}
		s.setPinned(false)
		return
	}
	for _, d := range b.Diffs {
		s.subInflight(counterID{d.WindowSize.Milliseconds(), d.WindowStart.UnixMilli(), d.Key}, d.Value)
	}
}

func (s *Syncer) subInflight(id counterID, v float64) {
	if s.lane.amounts[id] -= v; s.lane.amounts[id] == 0 {
		delete(s.lane.amounts, id)
	}
}

// setPinned keeps eviction away from the pushed series' counters while
// batches are in flight (their amounts live in the counters' sync parts).
func (s *Syncer) setPinned(pinned bool) {
	s.confMu.Lock()
	defer s.confMu.Unlock()
	s.lane.pinned.Store(pinned)
	for _, sr := range s.conf.Load().pushing {
		sr.SetPinned(pinned)
	}
}
