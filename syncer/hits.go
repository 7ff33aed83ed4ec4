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

// hitReq is one synchronous hit, or one check (check != nil), waiting for
// the worker.
type hitReq struct {
	w    *shm.Window
	key  string
	v    float64
	c    *shm.Counter
	res  strategy.Totals
	done chan struct{}

	check    *strategy.Check // nil for a hit; else &checkBuf
	checkBuf strategy.Check
	windows  []*shm.Window // the current window of each limit of check
	cres     strategy.CheckResult
	ok       bool // the store decided check
}

var hitPool = sync.Pool{New: func() any { return &hitReq{done: make(chan struct{}, 1)} }}

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
		return s.hitLocal(w, key, v), nil
	}
	r := hitPool.Get().(*hitReq)
	r.w, r.key, r.v = w, key, v
	if err := s.wait(ctx, r); err != nil {
		if errors.Is(err, errNoWorker) {
			*r = hitReq{done: r.done}
			hitPool.Put(r)
			return s.hitLocal(w, key, v), nil
		}
		return strategy.Totals{}, err
	}
	res := r.res
	*r = hitReq{done: r.done}
	hitPool.Put(r)
	return res, nil
}

// CanCheck reports whether the strategy decides checks (strategy.Checker).
func (s *Syncer) CanCheck() bool { return s.canCheck.Load() }

// Check decides and counts c in the store in one atomic step (see
// strategy.Checker), coalesced with the namespace's other synchronous
// calls, and keeps the store's totals in this node's view. windows are the
// current windows of c's limits, in order. ok is false when the store could
// not decide (it is down, or does not implement strategy.Checker): the
// caller then decides on this node's counts, which are pushed later.
func (s *Syncer) Check(ctx context.Context, c strategy.Check, windows []*shm.Window) (res strategy.CheckResult, ok bool, err error) {
	if !s.canCheck.Load() || s.isDown() {
		return strategy.CheckResult{}, false, nil
	}
	r := hitPool.Get().(*hitReq)
	r.check, r.windows = &r.checkBuf, windows
	r.checkBuf = c
	defer func() {
		if r != nil {
			*r = hitReq{done: r.done}
			hitPool.Put(r)
		}
	}()
	if s.isPeriodic.Load() {
		// No worker in periodic mode: near-limit checks are few; run this
		// one in turn with the syncs of the namespace's lane, after pushing
		// this node's hits of the key that the store has not seen yet. A
		// sync holding the lane longer than HitTimeout (a slow store) makes
		// the caller decide locally instead of waiting.
		lctx, cancel := context.WithTimeout(ctx, time.Duration(s.hitTimeout.Load()))
		defer cancel()
		if !s.mu.LockCtx(lctx) {
			return strategy.CheckResult{}, false, ctx.Err()
		}
		defer s.mu.Unlock()
		if err := s.flushKey(ctx, c.Key, windows); err != nil {
			s.markDown()
			return strategy.CheckResult{}, false, nil
		}
		s.applyChecks(ctx, []*hitReq{r})
		<-r.done // answered in place: empty the channel before r goes back to the pool
		return r.cres, r.ok, ctx.Err()
	}
	if err := s.wait(ctx, r); err != nil {
		if errors.Is(err, errNoWorker) {
			return strategy.CheckResult{}, false, nil
		}
		r = nil // the worker may still answer it: leave it to the GC
		return strategy.CheckResult{}, false, err
	}
	return r.cres, r.ok, nil
}

// errNoWorker: the synchronous worker is not running (the namespace is
// being reconfigured or stopped); the caller counts on this node instead.
var errNoWorker = errors.New("syncer: no synchronous worker")

// wait queues r for the worker and waits for its answer or the end of ctx;
// in the latter case r is left to the worker and the GC.
func (s *Syncer) wait(ctx context.Context, r *hitReq) error {
	s.qmu.Lock()
	if !s.accepting {
		s.qmu.Unlock()
		return errNoWorker
	}
	s.queue = append(s.queue, r)
	s.qmu.Unlock()
	select {
	case s.signal <- struct{}{}:
	default:
	}
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// isDown reports whether the store failed recently enough that hits are
// counted locally without asking it.
func (s *Syncer) isDown() bool {
	until := s.downUntil.Load()
	return until != 0 && time.Now().UnixNano() < until
}

// hitLocal counts a hit on this node only and returns the local view.
func (s *Syncer) hitLocal(w *shm.Window, key string, v float64) strategy.Totals {
	s.local.Add(1)
	now := s.now()
	var t strategy.Totals
	_, t.Current = w.Add(key, v, now)
	if p := w.Prev(); p != nil {
		t.Previous = p.Value(key)
	}
	return t
}

// synchronous is the worker of synchronous mode: it sends the queued hits
// as one batch per store call, and retries the store after a failure.
func (s *Syncer) synchronous(ctx context.Context, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	nextPurge := s.purgeDelay()
	purge := time.NewTicker(time.Minute)
	defer purge.Stop()
	for {
		select {
		case <-stop:
			s.qmu.Lock()
			s.accepting = false // later callers count locally (Hit) or decide locally (Check)
			s.qmu.Unlock()
			s.drain(func(batch []*hitReq) {
				for _, r := range batch {
					if r.check == nil {
						r.res = s.hitLocal(r.w, r.key, r.v)
					}
					r.done <- struct{}{}
				}
			})
			return
		case <-s.signal:
		case <-retry.C:
		case <-purge.C:
			if !nextPurge.IsZero() && time.Now().After(nextPurge) {
				s.purge(ctx)
				nextPurge = s.purgeDelay()
			}
			continue
		}
		s.mu.Lock()
		if s.down || len(s.inflight) > 0 {
			s.recoverLocked(ctx)
		}
		s.mu.Unlock()
		s.drain(func(batch []*hitReq) {
			var hits, checks []*hitReq
			for _, r := range batch {
				if r.check != nil {
					checks = append(checks, r)
				} else {
					hits = append(hits, r)
				}
			}
			s.mu.Lock()
			if len(checks) > 0 {
				for _, r := range checks {
					if !s.isDown() && s.flushKey(ctx, r.check.Key, r.windows) != nil {
						s.markDown()
					}
				}
				s.applyChecks(ctx, checks)
			}
			if len(hits) > 0 {
				s.applyHits(ctx, hits)
			}
			s.mu.Unlock()
		})
		s.mu.Lock()
		if s.down {
			retry.Reset(time.Until(s.retryAt))
		}
		s.mu.Unlock()
	}
}

// drain hands the queued hits to fn in batches of at most DefaultMaxHitBatch
// until the queue is empty.
func (s *Syncer) drain(fn func([]*hitReq)) {
	for {
		s.qmu.Lock()
		n := min(len(s.queue), DefaultMaxHitBatch)
		batch := make([]*hitReq, n)
		copy(batch, s.queue)
		s.queue = append(s.queue[:0], s.queue[n:]...)
		s.qmu.Unlock()
		if n == 0 {
			return
		}
		fn(batch)
	}
}

// recoverLocked pushes the in-flight batches and the diffs counted locally
// while the store failed, once the back-off has passed. It pushes only:
// fetching every held key could take longer than a synchronous call may,
// and the next hits read their totals anyway.
func (s *Syncer) recoverLocked(ctx context.Context) {
	if s.isDown() {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	t0 := time.Now()
	pushed, late, err := s.pushLocked(rctx)
	s.report(Report{Op: "sync", Duration: time.Since(t0), Pushed: pushed, Late: late, Err: err})
	if err != nil {
		s.markDown()
		return
	}
	s.markUp()
}

// applyHits sends batch to the store and answers each hit with its totals.
// Batches in flight go first; diffs counted locally earlier ride along in
// the same batch, before the hits (each hit's totals then include them).
func (s *Syncer) applyHits(ctx context.Context, batch []*hitReq) {
	now := s.now()
	answerLocal := func() {
		for _, r := range batch {
			r.res = s.hitLocal(r.w, r.key, r.v)
			r.done <- struct{}{}
		}
	}
	if s.down {
		answerLocal()
		return
	}
	hctx, cancel := context.WithTimeout(ctx, s.cfg.HitTimeout)
	defer cancel()
	if _, _, err := s.pushInflight(hctx); err != nil {
		s.markDown()
		answerLocal()
		return
	}
	var diffs []strategy.Diff
	if extra := s.takeBatch(s.pushing()); extra != nil {
		diffs = extra.Diffs
	}
	diffs = slices.Grow(diffs, len(batch))
	first := len(diffs)
	for _, r := range batch {
		sr := r.w.Series()
		diffs = append(diffs, strategy.Diff{
			Namespace: s.cfg.Namespace, Key: r.key,
			WindowStart: time.UnixMilli(r.w.Start()), WindowSize: time.Duration(sr.Size()) * time.Millisecond,
			Value: r.v,
		})
		if r.c = r.w.Ensure(r.key, now); r.c != nil {
			r.c.AddSync(r.v) // in flight: the view keeps it until the store's total replaces it
		}
	}
	b := &strategy.Batch{Node: s.cfg.Node, Seq: s.cfg.Seq.Add(1), Diffs: diffs}
	s.addInflight(b)
	t0 := time.Now()
	totals, err := s.pushCount(hctx, *b)
	s.report(Report{Op: "hits", Duration: time.Since(t0), Pushed: len(diffs), Err: err})
	if err != nil {
		s.markDown()
		for _, r := range batch {
			r.res = strategy.Totals{Current: r.v}
			if r.c != nil {
				r.res.Current = r.c.Value()
			}
			if p := r.w.Prev(); p != nil {
				r.res.Previous = p.Value(r.key)
			}
			s.local.Add(1)
			r.done <- struct{}{}
		}
		return
	}
	s.ack(b)
	for i, r := range batch {
		t := totals[first+i]
		if r.c != nil {
			r.c.SetSync(t.Current)
		}
		sr := r.w.Series()
		if p := sr.Window(r.w.Start()-sr.Size(), true, now); p != nil {
			if pc := p.Ensure(r.key, now); pc != nil {
				pc.SetSync(t.Previous)
			}
		}
		r.res = t
		r.done <- struct{}{}
	}
}

// flushKey pushes this node's diffs of key in windows and the windows
// before them, after the batches in flight, as one batch of its own (kept in
// flight when the push fails, like any other).
func (s *Syncer) flushKey(ctx context.Context, key string, windows []*shm.Window) error {
	var diffs []strategy.Diff
	for i, w := range windows {
		if slices.Contains(windows[:i], w) {
			continue // limits of one size share their windows
		}
		for _, x := range [2]*shm.Window{w, w.Prev()} {
			if x == nil {
				continue
			}
			if v := x.TakeKey(key); v != 0 {
				diffs = append(diffs, strategy.Diff{
					Namespace: s.cfg.Namespace, Key: key, WindowStart: time.UnixMilli(x.Start()),
					WindowSize: time.Duration(x.Series().Size()) * time.Millisecond, Value: v,
				})
			}
		}
	}
	if len(diffs) == 0 && len(s.inflight) == 0 {
		return nil
	}
	hctx, cancel := context.WithTimeout(ctx, s.cfg.HitTimeout)
	defer cancel()
	if len(diffs) > 0 {
		s.addInflight(&strategy.Batch{Node: s.cfg.Node, Seq: s.cfg.Seq.Add(1), Diffs: diffs})
	}
	_, _, err := s.pushInflight(hctx)
	return err
}

// applyChecks sends the checks to the store as one call and answers each;
// when the store fails, each is answered ok=false (the caller decides
// locally). A failed call is not retried: whether the store applied it is
// unknown, and the caller's local decision is counted and pushed instead.
func (s *Syncer) applyChecks(ctx context.Context, batch []*hitReq) {
	ck, can := s.cfg.Strategy.(strategy.Checker)
	if s.isDown() || !can {
		for _, r := range batch {
			r.done <- struct{}{}
		}
		return
	}
	checks := make([]strategy.Check, len(batch))
	for i, r := range batch {
		checks[i] = *r.check
	}
	hctx, cancel := context.WithTimeout(ctx, s.cfg.HitTimeout)
	t0 := time.Now()
	res, err := ck.CheckAndCount(hctx, s.cfg.Node, s.cfg.Seq.Add(1), checks)
	cancel()
	if err == nil && len(res) != len(checks) {
		err = fmt.Errorf("strategy returned %d results for %d checks", len(res), len(checks))
	}
	s.statsMu.Lock()
	if err != nil {
		s.stats.PushErrors++
	} else {
		s.stats.Checks++
	}
	s.statsMu.Unlock()
	if err != nil {
		err = fmt.Errorf("syncer: namespace %q: check and count: %w", s.cfg.Namespace, err)
	}
	s.report(Report{Op: "checks", Duration: time.Since(t0), Pushed: len(checks), Err: err})
	if err != nil {
		s.markDown()
		for _, r := range batch {
			r.done <- struct{}{}
		}
		return
	}
	if s.down {
		s.markUp()
	}
	now := s.now()
	for i, r := range batch {
		for j, t := range res[i].Totals {
			w := r.windows[j]
			sr := w.Series()
			if c := w.Ensure(r.check.Key, now); c != nil {
				c.SetSync(t.Current + s.inflightN[counterID{sr.Size(), w.Start(), r.check.Key}])
			}
			if p := sr.Window(w.Start()-sr.Size(), true, now); p != nil {
				if pc := p.Ensure(r.check.Key, now); pc != nil {
					pc.SetSync(t.Previous + s.inflightN[counterID{sr.Size(), p.Start(), r.check.Key}])
				}
			}
		}
		r.cres, r.ok = res[i], true
		r.done <- struct{}{}
	}
}

// pushCount applies b and returns each diff's totals: in one call when the
// strategy can, else with a push and a read.
func (s *Syncer) pushCount(ctx context.Context, b strategy.Batch) ([]strategy.Totals, error) {
	if pc, ok := s.cfg.Strategy.(strategy.PushCounter); ok {
		totals, err := pc.PushAndCount(ctx, b)
		if err == nil && len(totals) != len(b.Diffs) {
			err = fmt.Errorf("strategy returned %d totals for %d diffs", len(totals), len(b.Diffs))
		}
		s.countPush(err)
		if err != nil {
			return nil, fmt.Errorf("syncer: namespace %q: push batch %d: %w", s.cfg.Namespace, b.Seq, err)
		}
		return totals, nil
	}
	if err := s.send(ctx, b); err != nil {
		return nil, err
	}
	type wkey struct {
		size, start int64
		key         string
	}
	counts := make(map[wkey]float64)
	keys := make([]string, 0, len(b.Diffs))
	var sizes []time.Duration
	for _, d := range b.Diffs {
		keys = append(keys, d.Key)
		sizes = append(sizes, d.WindowSize)
	}
	q := strategy.Query{Namespace: s.cfg.Namespace, WindowSizes: uniq(sizes), Now: time.UnixMilli(s.now()), Keys: keys}
	for c, err := range s.cfg.Strategy.GetCounters(ctx, q) {
		if err != nil {
			return nil, fmt.Errorf("syncer: namespace %q: get counters: %w", s.cfg.Namespace, err)
		}
		counts[wkey{c.WindowSize.Milliseconds(), c.WindowStart.UnixMilli(), c.Key}] = c.Count
	}
	totals := make([]strategy.Totals, len(b.Diffs))
	for i, d := range b.Diffs {
		size, start := d.WindowSize.Milliseconds(), d.WindowStart.UnixMilli()
		totals[i] = strategy.Totals{Current: counts[wkey{size, start, d.Key}], Previous: counts[wkey{size, start - size, d.Key}]}
	}
	return totals, nil
}

func uniq(sizes []time.Duration) []time.Duration {
	seen := make(map[time.Duration]bool, len(sizes))
	out := sizes[:0:0]
	for _, s := range sizes {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

func (s *Syncer) countPush(err error) {
	s.statsMu.Lock()
	if err != nil {
		s.stats.PushErrors++
	} else {
		s.stats.Pushes++
	}
	s.statsMu.Unlock()
}

func (s *Syncer) markDown() {
	s.backoff = min(max(s.backoff*2, DefaultRetryMin), DefaultRetryMax)
	s.down, s.retryAt = true, time.Now().Add(s.backoff)
	s.downUntil.Store(s.retryAt.UnixNano())
}

func (s *Syncer) markUp() {
	s.down, s.backoff = false, 0
	s.downUntil.Store(0)
}
