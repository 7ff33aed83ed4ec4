package syncer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/ratesync/ratesync/shm"
	"github.com/ratesync/ratesync/strategy"
)

// checkReq is one check waiting to be decided in the store.
type checkReq struct {
	check   strategy.Check
	windows []*shm.Window  // the current window of each window limit of check, nil for buckets
	tables  []*shm.Buckets // the bucket table of each bucket limit of check, nil for windows
	res     strategy.CheckResult
	ok      bool          // the store decided check
	done    chan struct{} // one answer
}

var checkPool = sync.Pool{New: func() any { return &checkReq{done: make(chan struct{}, 1)} }}

func (r *checkReq) release() {
	*r = checkReq{done: r.done}
	checkPool.Put(r)
}

// Check decides and counts c in the store in one atomic step (see
// strategy.Checker), coalesced with the namespace's other synchronous
// calls, and keeps the store's totals in this node's view. windows are the
// current windows of c's window limits and tables the bucket tables of its
// bucket limits, in order (nil where the other applies). ok is false when the store could
// not decide (it is down, or does not implement strategy.Checker): the
// caller then decides on this node's counts, which are pushed later.
func (s *Syncer) Check(ctx context.Context, c strategy.Check, windows []*shm.Window, tables []*shm.Buckets) (res strategy.CheckResult, ok bool, err error) {
	cf := s.conf.Load()
	if !cf.canCheck || s.isDown() {
		return strategy.CheckResult{}, false, nil
	}
	r := checkPool.Get().(*checkReq)
	r.check, r.windows, r.tables = c, windows, tables
	if cf.Rate > 0 {
		defer r.release()
		return s.checkPeriodic(ctx, cf, r)
	}
	err = enqueue(&s.queue, &s.queue.checks, r)
	if err == nil {
		err = await(ctx, r.done)
	}
	switch {
	case errors.Is(err, errNoWorker):
		r.release()
		return strategy.CheckResult{}, false, nil
	case err != nil:
		return strategy.CheckResult{}, false, err // r is the worker's now; the GC takes it
	}
	res, ok = r.res, r.ok
	r.release()
	return res, ok, nil
}

// checkPeriodic decides r in periodic mode, where no worker runs: near-limit
// checks are few, so this one runs in turn with the syncs of the
// namespace's lane, after pushing this node's hits of the key that the store
// has not seen yet. A sync holding the lane longer than HitTimeout (a slow
// store) makes the caller decide locally instead of waiting.
func (s *Syncer) checkPeriodic(ctx context.Context, cf *conf, r *checkReq) (strategy.CheckResult, bool, error) {
	lctx, cancel := context.WithTimeout(ctx, cf.HitTimeout)
	defer cancel()
	if !s.lane.mu.lockCtx(lctx) {
		return strategy.CheckResult{}, false, ctx.Err()
	}
	defer s.lane.mu.unlock()
	if err := s.flushKey(ctx, r.check.Key, r.windows, r.tables); err != nil {
		if storeFailed(ctx, err) {
			s.markDown()
		}
		return strategy.CheckResult{}, false, nil
	}
	actx, acancel := context.WithTimeout(ctx, cf.HitTimeout)
	s.applyChecks(actx, []*checkReq{r})
	acancel()
	<-r.done // answered in place: empty the channel before r goes back to the pool
	return r.res, r.ok, ctx.Err()
}

// serveChecks decides the worker's batch of checks: this node's unpushed
// hits of each key go first, then the checks in one store call. Callers
// hold lane.mu.
func (s *Syncer) serveChecks(ctx context.Context, batch []*checkReq) {
	for _, r := range batch {
		if s.isDown() {
			break
		}
		if err := s.flushKey(ctx, r.check.Key, r.windows, r.tables); storeFailed(ctx, err) {
			s.markDown()
		}
	}
	s.applyChecks(ctx, batch)
}

// flushKey pushes this node's diffs of key in windows and the windows
// before them, and what it took from key's buckets in tables, after the
// batches in flight, as one batch of its own (kept in flight when the push
// fails, like any other). Callers hold lane.mu.
func (s *Syncer) flushKey(ctx context.Context, key string, windows []*shm.Window, tables []*shm.Buckets) error {
	c := s.conf.Load()
	var diffs []strategy.Diff
	var buckets []strategy.BucketDiff
	for i, t := range tables {
		if t != nil && c.buckets && !slices.Contains(tables[:i], t) {
			buckets = takePending(c, t, key, buckets)
		}
	}
	buckets = takeKeyed(c, key, buckets)
	for i, w := range windows {
		if w == nil || slices.Contains(windows[:i], w) {
			continue // limits of one size share their windows
		}
		for _, x := range [2]*shm.Window{w, w.Prev()} {
			if x == nil {
				continue
			}
			if v := x.TakeKey(key); v != 0 {
				diffs = append(diffs, diffOf(c, x.Series(), x.Start(), key, v))
			}
		}
	}
	if len(diffs)+len(buckets) == 0 && len(s.lane.inflight) == 0 {
		return nil
	}
	hctx, cancel := context.WithTimeout(ctx, c.HitTimeout)
	defer cancel()
	if len(diffs)+len(buckets) > 0 {
		b := s.newBatch(c, diffs)
		b.Buckets = buckets
		s.addInflight(b)
	}
	_, _, err := s.pushInflight(hctx)
	return err
}

// applyChecks sends the checks to the store as one call, within ctx
// (bounded by HitTimeout), and answers each; when the store fails, each is
// answered ok=false (the caller decides locally). A failed call is not
// retried: whether the store applied it is unknown, and the caller's local
// decision is counted and pushed instead. Callers hold lane.mu.
func (s *Syncer) applyChecks(ctx context.Context, batch []*checkReq) {
	c := s.conf.Load()
	ck, can := c.Strategy.(strategy.Checker)
	if s.isDown() || !can {
		s.answerLocal(nil, batch)
		return
	}
	checks := make([]strategy.Check, len(batch))
	for i, r := range batch {
		checks[i] = r.check
	}
	t0 := s.clock.now()
	res, err := ck.CheckAndCount(ctx, c.Node, c.Seq.Add(1), checks)
	if err == nil && len(res) != len(checks) {
		err = fmt.Errorf("strategy returned %d results for %d checks", len(res), len(checks))
	}
	s.countCall(callCheck, err)
	if err != nil {
		err = fmt.Errorf("syncer: namespace %q: check and count: %w", c.Namespace, err)
	}
	s.report(Report{Op: "checks", Duration: s.clock.since(t0), Pushed: len(checks), Err: err})
	if err != nil {
		if storeFailed(ctx, err) {
			s.markDown()
		}
		s.answerLocal(nil, batch)
		return
	}
	if s.health.down {
		s.markUp()
	}
	now := s.clock.ms()
	for i, r := range batch {
		s.settleCheck(r, res[i], now)
		r.res, r.ok = res[i], true
		r.done <- struct{}{}
	}
}

// settleCheck keeps the store's totals of a decided check in this node's
// view, plus what of them is still in flight.
func (s *Syncer) settleCheck(r *checkReq, res strategy.CheckResult, now int64) {
	key := r.check.Key
	for j, t := range res.Totals {
		if tb := r.tables[j]; tb != nil {
			s.installBucket(tb, key, res.Buckets[j], r.check.Limits[j].Limit, now)
			continue
		}
		w := r.windows[j]
		if w == nil {
			continue // an anchored window or a log: the store keeps it
		}
		sr := w.Series()
		counts := []float64{t.Current, t.Previous}
		if j < len(res.Windows) && res.Windows[j] != nil {
			counts = res.Windows[j]
		}
		for back, v := range counts {
			start := w.Start() - int64(back)*sr.Size()
			if x := sr.Window(start, true, now); x != nil {
				x.SetSynced(key, v+s.inflightOf(counterID{sr.Size(), start, key}), true, now)
			}
		}
	}
}
