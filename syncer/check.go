package syncer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

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
	doubt   bool          // the store may have counted check: see ErrInDoubt
	at      time.Time     // when the caller queued it (synchronous mode): its wait is bounded from then
	done    chan struct{} // one answer
}

// ErrInDoubt is Check's answer for a check the store did not confirm
// within the call timeout, though it may have counted it (its reply was
// lost, or the store hung while applying it). The caller decides on this
// node's view without counting the request; the syncer sends the same call
// again, with the same (Node, Seq), before anything else once the store
// answers, so the store counts the check exactly once (strategy.Checker:
// it returns the decision it recorded, or applies the check then).
var ErrInDoubt = errors.New("syncer: the store may have counted the check; decide without counting")

// doubt is a check call the store may have applied: sent again, with its
// seq, before the lane's next exchange (resolveDoubts).
type doubt struct {
	seq    uint64
	checks []strategy.Check
	tries  int // resolutions that failed
}

// maxDoubtTries: a call in doubt is dropped after this many failed
// resolutions (the store refusing it for good, as opposed to being down:
// then the lane's pushes behind it would never go).
const maxDoubtTries = 8

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
	if !cf.canCheck {
		return strategy.CheckResult{}, false, nil
	}
	if s.isDown() {
		if s.probeDue() {
			s.queue.wake()
		}
		return strategy.CheckResult{}, false, nil
	}
	r := checkPool.Get().(*checkReq)
	r.check, r.windows, r.tables = c, windows, tables
	if cf.Rate > 0 {
		defer r.release()
		return s.checkPeriodic(ctx, cf, r)
	}
	r.at = time.Now()
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
	res, ok, doubt := r.res, r.ok, r.doubt
	r.release()
	if doubt {
		return strategy.CheckResult{}, false, ErrInDoubt
	}
	return res, ok, nil
}

// checkPeriodic decides r in periodic mode, where no worker runs: near-limit
// checks are few, so this one runs in turn with the syncs of the
// namespace's lane, after pushing this node's hits of the key that the store
// has not seen yet. The whole of it, the wait for the lane included, is
// bounded by HitTimeout: a sync holding the lane that long (a slow store)
// makes the caller decide locally instead of waiting.
func (s *Syncer) checkPeriodic(ctx context.Context, cf *conf, r *checkReq) (strategy.CheckResult, bool, error) {
	lctx, cancel := context.WithTimeout(ctx, cf.HitTimeout)
	defer cancel()
	if !s.lane.mu.lockCtx(lctx) {
		return strategy.CheckResult{}, false, ctx.Err()
	}
	defer s.lane.mu.unlock()
	s.serveChecks(lctx, []*checkReq{r})
	<-r.done // answered in place: empty the channel before r goes back to the pool
	if r.doubt {
		return strategy.CheckResult{}, false, ErrInDoubt
	}
	return r.res, r.ok, ctx.Err()
}

// serveChecks decides a batch of checks within ctx: this node's unpushed
// hits of each key go first, then the checks in one store call. Callers
// hold lane.mu.
func (s *Syncer) serveChecks(ctx context.Context, batch []*checkReq) {
	start := time.Now()
	for _, r := range batch {
		if s.isDown() {
			break
		}
		if err := s.flushKey(ctx, r.check, r.windows, r.tables); err != nil && !errors.Is(err, context.Canceled) {
			if s.fellShort(start) {
				s.answerLocal(nil, batch) // not sent: the callers decide, and count, on the node
				return
			}
			s.markDown("checks", err)
		}
	}
	s.applyChecks(ctx, batch)
}

// flushKey pushes this node's diffs of ck's key in windows and in every
// window before them that its limits read (the previous one, or a
// precision limit's Depth), and what it took from the key's buckets in
// tables, after the check calls in doubt and the batches in flight, as one
// batch of its own (kept in flight when the push fails, like any other), so
// that the store decides on the counts this node's view holds. A call in
// doubt is resolved before any newer call is sent: a newer Seq recorded
// first would make the store refuse it. Callers hold lane.mu.
func (s *Syncer) flushKey(ctx context.Context, ck strategy.Check, windows []*shm.Window, tables []*shm.Buckets) error {
	key := ck.Key
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
		depth := 2
		for j, x := range windows {
			if x == w && j < len(ck.Limits) {
				depth = max(depth, ck.Limits[j].Depth())
			}
		}
		sr, now := w.Series(), s.clock.ms()
		for back := range depth {
			x := w
			if back > 0 {
				x = sr.Window(w.Start()-int64(back)*sr.Size(), false, now)
			}
			if x == nil {
				continue
			}
			if v := x.TakeKey(key); v != 0 {
				diffs = append(diffs, diffOf(c, sr, x.Start(), key, v))
			}
		}
	}
	if len(diffs)+len(buckets) == 0 && len(s.lane.inflight) == 0 && len(s.lane.doubts) == 0 {
		return nil
	}
	if len(diffs)+len(buckets) > 0 {
		b := s.newBatch(c, diffs)
		b.Buckets = buckets
		s.addInflight(b)
	}
	return s.retrying(ctx, func(ctx context.Context) error {
		_, _, err := s.pushInflight(ctx)
		return err
	})
}

// applyChecks sends the checks to the store as one call, within ctx
// (bounded by HitTimeout), and answers each. A call that fails is sent
// again with the same (Node, Seq) while ctx lasts (retrying): the store
// applies it once and returns the decisions it recorded. When it still
// fails, the store is down and the checks are in doubt (ErrInDoubt); a
// call the store refused before any exchange leaves them to the caller
// (ok=false). Callers hold lane.mu.
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
	t0, start := s.clock.now(), time.Now()
	seq := c.Seq.Add(1)
	var res []strategy.CheckResult
	sent := false
	err := s.retrying(ctx, func(ctx context.Context) error {
		var err error
		sent = sent || ctx.Err() == nil
		res, err = ck.CheckAndCount(ctx, c.Node, seq, checks)
		if err == nil && len(res) != len(checks) {
			err = fmt.Errorf("strategy returned %d results for %d checks", len(res), len(checks))
		}
		s.countCall(callCheck, err)
		return err
	})
	if err != nil {
		err = fmt.Errorf("syncer: namespace %q: check and count: %w", c.Namespace, err)
	}
	s.record(Report{Op: "checks", Duration: s.clock.since(t0), Pushed: len(checks), Err: err}, err == nil || !s.fellShort(start))
	if err != nil {
		if !sent {
			s.answerLocal(nil, batch)
			return
		}
		d := &doubt{seq: seq, checks: make([]strategy.Check, len(checks))}
		for i, ch := range checks {
			ch.Limits = slices.Clone(ch.Limits)
			d.checks[i] = ch
		}
		s.lane.doubts = append(s.lane.doubts, d)
		s.lane.nDoubts.Add(1)
		for _, r := range batch {
			r.doubt = true
			r.done <- struct{}{}
		}
		return
	}
	now := s.clock.ms()
	for i, r := range batch {
		s.settleCheck(r, res[i], now)
		r.res, r.ok = res[i], true
		r.done <- struct{}{}
	}
}

// resolveDoubts sends the check calls in doubt again, oldest first, each
// with its (Node, Seq): the store counts each exactly once (it applies it
// now, or returns the decisions it recorded). The view learns the totals
// from the next exchanges. It stops at the first failure. Callers hold
// lane.mu.
func (s *Syncer) resolveDoubts(ctx context.Context) (int, error) {
	c := s.conf.Load()
	ck, can := c.Strategy.(strategy.Checker)
	n := 0
	for len(s.lane.doubts) > 0 {
		d := s.lane.doubts[0]
		if can {
			res, err := ck.CheckAndCount(ctx, c.Node, d.seq, d.checks)
			s.countCall(callCheck, err)
			if err == nil && c.Resolved != nil && len(res) == len(d.checks) {
				c.Resolved(d.checks, res)
			}
			if err != nil {
				if d.tries++; d.tries < maxDoubtTries || errors.Is(err, context.Canceled) {
					return n, fmt.Errorf("syncer: namespace %q: check and count (in doubt, seq %d): %w", c.Namespace, d.seq, err)
				}
				c.Logger.Error("ratesync: a check call in doubt is dropped: the store refused it every time",
					"namespace", c.Namespace, "seq", d.seq, "checks", len(d.checks), "err", err)
			}
		}
		n += len(d.checks)
		s.lane.doubts[0] = nil
		s.lane.doubts = s.lane.doubts[1:]
		s.lane.nDoubts.Add(-1)
	}
	s.lane.doubts = nil
	return n, nil
}

// retrying runs call, and again while it fails with the store's failure
// and ctx lasts, at most maxAttempts times, pausing between attempts
// (retryPause, doubling). Every call it retries is idempotent in the store
// by its (Node, Seq): a reply lost, or a connection reset, costs a round
// trip, not a decision on the node.
func (s *Syncer) retrying(ctx context.Context, call func(context.Context) error) error {
	pause := retryPause
	for n := 1; ; n++ {
		err := call(ctx)
		if err == nil || n == maxAttempts || ctx.Err() != nil || !storeFailed(ctx, err) {
			return err
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= pause {
			return err
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
		pause = min(2*pause, retryPauseMax)
	}
}

// retryUntil is retrying for calls bounded by ctx that may be sent again
// only until budget: each attempt has ctx's whole deadline (a long push),
// and no attempt starts after budget.
func (s *Syncer) retryUntil(ctx context.Context, budget time.Time, call func(context.Context) error) error {
	pause := retryPause
	for n := 1; ; n++ {
		err := call(ctx)
		if err == nil || n == maxAttempts || ctx.Err() != nil || !storeFailed(ctx, err) || time.Until(budget) <= pause {
			return err
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
		pause = min(2*pause, retryPauseMax)
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
