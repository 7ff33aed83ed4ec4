package syncer

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/ratesync/ratesync/shm"
	"github.com/ratesync/ratesync/strategy"
)

// hitReq is one synchronous hit waiting for the worker.
type hitReq struct {
	w    *shm.Window
	key  string
	v    float64
	c    *shm.Counter // the hit's counter, once counted as taken
	at   time.Time    // when the caller queued it: its wait is bounded from then
	res  strategy.Totals
	done chan struct{} // one answer
}

var hitPool = sync.Pool{New: func() any { return &hitReq{done: make(chan struct{}, 1)} }}

func (r *hitReq) release() {
	*r = hitReq{done: r.done}
	hitPool.Put(r)
}

// queue holds the synchronous requests waiting for the worker. Callers of
// Hit and Check add to it; the worker takes them in batches.
type queue struct {
	mu        sync.Mutex // a leaf of the lock order but for stats.mu; guards what follows
	hits      []*hitReq
	checks    []*checkReq
	accepting bool // the worker runs and answers the queue

	signal chan struct{} // wakes the worker; one slot
}

func (q *queue) open() {
	q.mu.Lock()
	q.accepting = true
	q.mu.Unlock()
}

// close refuses later requests: their callers decide on the node.
func (q *queue) close() {
	q.mu.Lock()
	q.accepting = false
	q.mu.Unlock()
}

// errNoWorker: the synchronous worker is not running (the namespace is
// being reconfigured or stopped); the caller counts on this node instead.
var errNoWorker = errors.New("syncer: no synchronous worker")

// enqueue appends r to list, one of q's queues, and wakes the worker;
// errNoWorker when no worker takes requests.
func enqueue[R any](q *queue, list *[]R, r R) error {
	q.mu.Lock()
	if !q.accepting {
		q.mu.Unlock()
		return errNoWorker
	}
	*list = append(*list, r)
	q.mu.Unlock()
	q.wake()
	return nil
}

func (q *queue) wake() {
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

// take removes up to maxHitBatch hits and as many checks from the queue.
func (q *queue) take() (hits []*hitReq, checks []*checkReq) {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := min(len(q.hits), maxHitBatch)
	hits = slices.Clone(q.hits[:n])
	q.hits = append(q.hits[:0], q.hits[n:]...)
	n = min(len(q.checks), maxHitBatch)
	checks = slices.Clone(q.checks[:n])
	q.checks = append(q.checks[:0], q.checks[n:]...)
	return hits, checks
}

// await waits for one answer on done, or the end of ctx.
func await(ctx context.Context, done <-chan struct{}) error {
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Hit counts v for key in w, the current window of one of the namespace's
// series, through the store (synchronous mode), and returns the key's totals
// as of this hit: the store's when it answered, this node's view when it did
// not (the hit is then counted locally and pushed once the store is back).
// Concurrent hits are coalesced into one store call.
//
// Hit returns an error only when ctx ends first; the hit is counted all the
// same.
func (s *Syncer) Hit(ctx context.Context, w *shm.Window, key string, v float64) (strategy.Totals, error) {
	if s.isDown() {
		t := s.hitLocal(w, key, v)
		if s.probeDue() {
			s.queue.wake() // after counting: the probe pushes this hit too
		}
		return t, nil
	}
	r := hitPool.Get().(*hitReq)
	r.w, r.key, r.v, r.at = w, key, v, time.Now()
	err := enqueue(&s.queue, &s.queue.hits, r)
	if err == nil {
		err = await(ctx, r.done)
	}
	switch {
	case errors.Is(err, errNoWorker):
		r.release()
		return s.hitLocal(w, key, v), nil
	case err != nil:
		return strategy.Totals{}, err // r is the worker's now; the GC takes it
	}
	res := r.res
	r.release()
	return res, nil
}

// hitLocal counts a hit on this node only and returns the local view.
func (s *Syncer) hitLocal(w *shm.Window, key string, v float64) strategy.Totals {
	s.countLocal(1)
	var t strategy.Totals
	_, t.Current = w.Add(key, v, s.clock.ms())
	if p := w.Prev(); p != nil {
		t.Previous = p.Value(key)
	}
	return t
}

// synchronous is the worker of synchronous mode: it sends the queued hits
// and checks as one batch per store call, and probes the store once its
// back-off has passed after a failure.
func (s *Syncer) synchronous(ctx context.Context, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	nextPurge := s.nextPurge()
	purge := time.NewTicker(time.Minute)
	defer purge.Stop()
	detached := context.WithoutCancel(ctx) // the turns' store calls: see turn
	s.measureIfDue(ctx)                    // offset.go: the namespace clock before the first hits
	if s.conf.Load().CountNodes {
		go s.membersIfDue(ctx) // members.go: two store calls the hits need not wait for
	}
	for {
		select {
		case <-stop:
			s.queue.close() // later callers count locally (Hit) or decide locally (Check)
			for hits, checks := s.queue.take(); len(hits)+len(checks) > 0; hits, checks = s.queue.take() {
				s.answerLocal(hits, checks)
			}
			return
		case <-s.queue.signal:
		case <-retry.C:
		case <-purge.C:
			nextPurge = s.purgeIfDue(ctx, nextPurge)
			continue
		}
		s.serve(ctx, detached)
		s.measureIfDue(ctx) // offset.go
		if s.conf.Load().CountNodes && s.membersDue() {
			go s.membersIfDue(ctx) // members.go: two store calls the hits need not wait for
		}
		if s.isDown() {
			retry.Reset(max(s.retryIn(), time.Millisecond))
		}
	}
}

// serve answers the queue, one batch per turn on the lane; with nothing
// queued, it makes one turn that probes the store when the probe is due,
// or pushes what is left in flight. Requests queued while the store is
// down are answered on the node at once. It returns once the queue is
// empty, or after the turn under way when halt cancels ctx. detached is
// ctx without its cancellation, for the turns.
func (s *Syncer) serve(ctx, detached context.Context) {
	for turns := 0; ctx.Err() == nil; turns++ { // else halting
		if turns > 0 {
			// Group commit: before the next batch, the goroutines ready to
			// run (callers about to queue their requests among them) run
			// first, and the batch carries theirs too. Under load the
			// batches grow by a fifth (BENCHMARKS.md, section 12); with
			// nothing else ready the worker goes on at once.
			runtime.Gosched()
		}
		hits, checks := s.queue.take()
		idle := len(hits)+len(checks) == 0
		switch {
		case !idle && s.isDown():
			s.answerLocal(hits, checks)
			continue
		case idle && !s.probeDue() && (s.isDown() || s.lane.nBatches.Load()+s.lane.nDoubts.Load() == 0):
			return
		}
		if !s.lane.mu.lockCtx(ctx) { // halting
			s.answerLocal(hits, checks)
			return
		}
		s.turn(ctx, detached, hits, checks)
		s.lane.mu.unlock()
		if idle {
			return
		}
	}
}

// turn is one turn of the worker on the lane: the checks, then the hits;
// with none, a probe of the store (or a push of what is in flight).
//
// The probe is a sync (push, then fetch) under ctx, which halt cancels,
// bounded by Timeout: callers do not wait for it, they decide on the node
// until it succeeds. The checks and hits run under detached, a context
// that halt does not cancel, with the deadline of the oldest request's
// call timeout (HitTimeout from when it was queued): no caller waits
// longer, and a call the store may have applied is never abandoned for a
// local answer, which would count its request twice. halt therefore waits
// at most HitTimeout for the turn under way. Callers hold lane.mu.
func (s *Syncer) turn(ctx, detached context.Context, hits []*hitReq, checks []*checkReq) {
	c := s.conf.Load()
	if len(hits)+len(checks) == 0 {
		if s.probeDue() || !s.isDown() && len(s.lane.inflight)+len(s.lane.doubts) > 0 {
			rctx, cancel := context.WithTimeout(ctx, c.Timeout)
			_ = s.syncLocked(rctx, "sync", false)
			cancel()
		}
		return
	}
	deadline := oldest(hits, checks).Add(c.HitTimeout)
	if s.isDown() || !time.Now().Before(deadline) {
		// Down, or these requests waited out their call timeout in the
		// queue behind a slow call: nothing of them was sent.
		s.answerLocal(hits, checks)
		return
	}
	tctx, cancel := context.WithDeadline(detached, deadline)
	defer cancel()
	if len(checks) > 0 {
		s.serveChecks(tctx, checks)
	}
	if len(hits) > 0 {
		s.applyHits(tctx, hits)
	}
}

// oldest returns when the oldest of the requests was queued; the queue
// keeps them in order.
func oldest(hits []*hitReq, checks []*checkReq) time.Time {
	switch {
	case len(hits) == 0:
		return checks[0].at
	case len(checks) == 0 || hits[0].at.Before(checks[0].at):
		return hits[0].at
	}
	return checks[0].at
}

// answerLocal answers requests without the store: hits are counted on the
// node, checks are left to the caller (ok=false).
func (s *Syncer) answerLocal(hits []*hitReq, checks []*checkReq) {
	for _, r := range hits {
		r.res = s.hitLocal(r.w, r.key, r.v)
		r.done <- struct{}{}
	}
	for _, r := range checks {
		r.done <- struct{}{}
	}
}

// applyHits sends batch to the store, within ctx (a turn's: bounded by
// the call timeout), and answers each hit with its totals. Batches in
// flight go first; diffs counted locally earlier ride along in the same
// batch, before the hits (each hit's totals then include them). A push
// that fails is sent again, the same batch, while ctx lasts (retrying).
// Callers hold lane.mu.
func (s *Syncer) applyHits(ctx context.Context, batch []*hitReq) {
	if s.isDown() {
		s.answerLocal(batch, nil)
		return
	}
	c := s.conf.Load()
	start := time.Now()
	if err := s.retrying(ctx, func(ctx context.Context) error {
		_, _, err := s.pushInflight(ctx)
		return err
	}); err != nil {
		if !errors.Is(err, context.Canceled) && !s.fellShort(start) {
			s.markDown("hits", err)
		}
		s.answerLocal(batch, nil)
		return
	}
	var diffs []strategy.Diff
	var buckets []strategy.BucketDiff
	if extra := s.takeBatch(c); extra != nil {
		diffs, buckets = extra.Diffs, extra.Buckets
	}
	diffs = slices.Grow(diffs, len(batch))
	first := len(diffs)
	now := s.clock.ms()
	for _, r := range batch {
		diffs = append(diffs, diffOf(c, r.w.Series(), r.w.Start(), r.key, r.v))
		// In flight: the view keeps it until the store's total replaces it.
		r.c = r.w.AddTaken(r.key, r.v, now)
	}
	b := s.newBatch(c, diffs)
	b.Buckets = buckets
	s.addInflight(b)
	t0 := s.clock.now()
	var totals []strategy.Totals
	err := s.retrying(ctx, func(ctx context.Context) error {
		var err error
		totals, err = s.pushCount(ctx, *b)
		return err
	})
	s.record(Report{Op: "hits", Duration: s.clock.since(t0), Pushed: len(diffs), Err: err}, err == nil || !s.fellShort(start))
	if err != nil {
		s.answerInFlight(batch)
		return
	}
	s.ack(b)
	for i, r := range batch {
		t := totals[first+i]
		r.w.SetSynced(r.key, t.Current, false, now)
		sr := r.w.Series()
		if p := sr.Window(r.w.Start()-sr.Size(), true, now); p != nil {
			p.SetSynced(r.key, t.Previous, true, now)
		}
		r.res = t
		r.done <- struct{}{}
	}
}

// answerInFlight answers hits whose push failed with the node's view, which
// counts them (they stay in flight).
func (s *Syncer) answerInFlight(batch []*hitReq) {
	s.countLocal(len(batch))
	for _, r := range batch {
		r.res = strategy.Totals{Current: r.v}
		if r.c != nil {
			r.res.Current = r.c.Value()
		}
		if p := r.w.Prev(); p != nil {
			r.res.Previous = p.Value(r.key)
		}
		r.done <- struct{}{}
	}
}

// pushCount applies b and returns each diff's totals: in one call when the
// strategy can, else with a push and a read.
func (s *Syncer) pushCount(ctx context.Context, b strategy.Batch) ([]strategy.Totals, error) {
	c := s.conf.Load()
	if pc, ok := c.Strategy.(strategy.PushCounter); ok {
		totals, err := pc.PushAndCount(ctx, b)
		if err == nil && len(totals) != len(b.Diffs) {
			err = fmt.Errorf("strategy returned %d totals for %d diffs", len(totals), len(b.Diffs))
		}
		s.countCall(callPush, err)
		if err != nil {
			return nil, fmt.Errorf("syncer: namespace %q: push batch %d: %w", c.Namespace, b.Seq, err)
		}
		return totals, nil
	}
	if err := s.send(ctx, b); err != nil {
		return nil, err
	}
	counts := make(map[counterID]float64)
	keys := make([]string, 0, len(b.Diffs))
	var sizes []time.Duration
	for _, d := range b.Diffs {
		keys = append(keys, d.Key)
		sizes = append(sizes, d.WindowSize)
	}
	slices.Sort(sizes)
	q := strategy.Query{Namespace: c.Namespace, WindowSizes: slices.Compact(sizes), Now: time.UnixMilli(s.clock.ms()), Keys: keys}
	for sc, err := range c.Strategy.GetCounters(ctx, q) {
		if err != nil {
			return nil, fmt.Errorf("syncer: namespace %q: get counters: %w", c.Namespace, err)
		}
		counts[counterID{sc.WindowSize.Milliseconds(), sc.WindowStart.UnixMilli(), sc.Key}] = sc.Count
	}
	totals := make([]strategy.Totals, len(b.Diffs))
	for i, d := range b.Diffs {
		size, start := d.WindowSize.Milliseconds(), d.WindowStart.UnixMilli()
		totals[i] = strategy.Totals{Current: counts[counterID{size, start, d.Key}], Previous: counts[counterID{size, start - size, d.Key}]}
	}
	return totals, nil
}
