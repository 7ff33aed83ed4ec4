// Package syncer moves a namespace's counters between a node's shm dict and
// a strategy: diffs out as batches, cluster totals back. It runs in one of
// three modes, chosen by the rate:
//
//   - periodic (rate > 0): a ticker, started after a random stagger so nodes
//     do not sync in lockstep, runs one sync at a time: take the dirty diffs,
//     push them as one Batch, then fetch the current and previous windows of
//     the keys this node holds;
//   - synchronous (rate == 0): every hit is pushed as it happens and the
//     store's totals come back in the same call; concurrent hits are
//     coalesced into one batch per store call. When the store fails, hits are
//     counted locally and pushed once it is back;
//   - never (rate < 0): the syncer does nothing (local-only namespaces have
//     none).
//
// A batch whose push failed stays in flight: it is retried, with the same
// (Node, Seq), before any newer diff, and the node's view keeps counting it
// (its amounts stay in the counters' sync part), so nothing dips or vanishes.
// Diffs for windows already older than the previous one when pushed are
// dropped and counted, never folded into a newer window.
//
// The syncer knows shm and strategy, nothing of limits or configuration
// files.
package syncer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratesync/ratesync/shm"
	"github.com/ratesync/ratesync/strategy"
)

// Defaults for Config's zero values.
const (
	DefaultTimeout     = 10 * time.Second // one background sync (periodic mode)
	DefaultHitTimeout  = time.Second      // one store call for synchronous hits
	DefaultPurgeEvery  = time.Hour
	DefaultRetryMin    = 100 * time.Millisecond
	DefaultRetryMax    = 5 * time.Second
	DefaultMaxHitBatch = 1024
)

// Config configures a Syncer. Namespace, Node, Strategy, Series, Now and Seq
// are required.
type Config struct {
	Namespace string
	Node      string        // push lane: Batch.Node of every batch
	Rate      time.Duration // > 0 periodic, 0 synchronous, < 0 never
	Strategy  strategy.Strategy
	Series    []*shm.Series  // one per window size of the namespace
	Now       func() int64   // clock, Unix milliseconds
	Seq       *atomic.Uint64 // node-wide batch numbering, shared by all namespaces

	Timeout    time.Duration // bound on a background sync; DefaultTimeout when 0
	HitTimeout time.Duration // bound on a synchronous store call; DefaultHitTimeout when 0
	PurgeEvery time.Duration // mean interval between Purge calls (±25% jitter); DefaultPurgeEvery when 0, never when < 0
	Logger     *slog.Logger  // slog.Default() when nil
	Observe    func(Report)  // called after each store exchange; may be nil; must not block
}

// Report describes one exchange with the store, for metrics.
type Report struct {
	Namespace string
	Op        string // "sync", "fetch", "hits", "checks", "purge"
	Duration  time.Duration
	Pushed    int // diffs pushed
	Fetched   int // counters read
	Late      int // late diffs dropped
	Err       error
}

// Stats is a snapshot of a syncer's state.
type Stats struct {
	LastGood      time.Time // end of the last successful exchange with the store
	LastError     error
	LastErrorAt   time.Time
	StoreUp       bool   // the last exchange succeeded
	InFlight      int    // batches pushed and not acknowledged
	InFlightDiffs int    // diffs in those batches
	Dirty         int    // counters listed with a diff to push
	Pushes        uint64 // batches acknowledged
	Checks        uint64 // check calls answered by the store (strategy.Checker)
	PushErrors    uint64
	FetchErrors   uint64
	LateDropped   uint64 // diffs dropped because their window was over
	LocalHits     uint64 // synchronous hits counted locally while the store failed
}

type counterID struct {
	size, start int64
	key         string
}

// lock is a mutex that a waiter can give up on.
type lock chan struct{}

func (l lock) Lock()   { l <- struct{}{} }
func (l lock) Unlock() { <-l }

// LockCtx takes the lock unless ctx ends first.
func (l lock) LockCtx(ctx context.Context) bool {
	select {
	case l <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// Syncer syncs one namespace. It is safe for concurrent use.
type Syncer struct {
	mu         lock // one exchange with the store at a time; guards what follows
	cfg        Config
	bySize     map[int64]*shm.Series
	retired    []*shm.Series         // series Reconfigure dropped, pushed until empty
	inflight   []*strategy.Batch     // pushed and not acknowledged, oldest first
	inflightN  map[counterID]float64 // in-flight amounts per counter
	inflightM  int                   // most entries inflightN held since made
	down       bool
	retryAt    time.Time
	backoff    time.Duration
	downUntil  atomic.Int64 // UnixNano until which hits skip the store; 0 when up
	calls      int          // store calls that succeeded, guarded by mu
	nInflight  atomic.Int64 // batches in flight, for Stats
	nDiffs     atomic.Int64 // diffs in those batches, for Stats
	series     atomic.Pointer[[]*shm.Series]
	canCheck   atomic.Bool  // the strategy is a strategy.Checker
	isPeriodic atomic.Bool  // cfg.Rate > 0
	rtt        atomic.Int64 // ns: moving average of store call durations
	lastFetch  atomic.Int64 // ms (namespace clock): when the last fetch succeeded
	stopping   atomic.Bool  // halt is canceling the background work
	now        func() int64 // cfg.Now, fixed at New

	// stats, guarded by statsMu so Stats never waits on a slow store
	statsMu sync.Mutex
	stats   Stats
	late    atomic.Uint64
	local   atomic.Uint64

	// background goroutine
	loopMu sync.Mutex
	stop   chan struct{}
	done   chan struct{}
	cancel context.CancelFunc

	// synchronous hits
	qmu       sync.Mutex
	queue     []*hitReq
	accepting bool // the synchronous worker runs and answers the queue
	signal    chan struct{}

	hitTimeout atomic.Int64 // cfg.HitTimeout, readable without mu
}

// New returns a syncer; Start starts its background work.
func New(cfg Config) *Syncer {
	s := &Syncer{mu: make(lock, 1), signal: make(chan struct{}, 1), now: cfg.Now}
	s.stats.StoreUp = true
	s.setConfig(cfg)
	return s
}

func (s *Syncer) setConfig(cfg Config) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.HitTimeout <= 0 {
		cfg.HitTimeout = DefaultHitTimeout
	}
	if cfg.PurgeEvery == 0 {
		cfg.PurgeEvery = DefaultPurgeEvery
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s.cfg = cfg
	s.hitTimeout.Store(int64(cfg.HitTimeout))
	series := slices.Clone(cfg.Series)
	s.series.Store(&series)
	_, can := cfg.Strategy.(strategy.Checker)
	s.canCheck.Store(can)
	s.isPeriodic.Store(cfg.Rate > 0)
	s.bySize = make(map[int64]*shm.Series, len(cfg.Series))
	for _, sr := range cfg.Series {
		s.bySize[sr.Size()] = sr
	}
}

// Reconfigure replaces the configuration, keeping the batches in flight,
// and restarts the background work when the rate changed. Series that cfg
// no longer has are retired: their diffs (including adds that race this
// call) are still pushed, until they hold nothing.
func (s *Syncer) Reconfigure(cfg Config) {
	s.mu.Lock()
	old := s.cfg.Rate
	for _, sr := range s.cfg.Series {
		if !slices.Contains(cfg.Series, sr) && !slices.Contains(s.retired, sr) {
			s.retired = append(s.retired, sr)
		}
	}
	s.retired = slices.DeleteFunc(s.retired, func(sr *shm.Series) bool { return slices.Contains(cfg.Series, sr) })
	s.setConfig(cfg)
	s.setPinned(len(s.inflight) > 0)
	s.mu.Unlock()
	if old != cfg.Rate {
		s.halt()
		s.Start()
	}
}

// pushing returns the series whose diffs are pushed: the configured ones
// and the retired ones.
func (s *Syncer) pushing() []*shm.Series {
	if len(s.retired) == 0 {
		return s.cfg.Series
	}
	return append(slices.Clone(s.cfg.Series), s.retired...)
}

// pruneRetired forgets retired series that hold nothing any more.
func (s *Syncer) pruneRetired(now int64) {
	s.retired = slices.DeleteFunc(s.retired, func(sr *shm.Series) bool {
		sr.Expire(now)
		return len(sr.Windows()) == 0 && sr.Dirty() == 0
	})
}

// setPinned keeps eviction away from the namespace's counters while batches
// are in flight (their amounts live in the counters' sync parts).
func (s *Syncer) setPinned(pinned bool) {
	for _, sr := range s.pushing() {
		sr.SetPinned(pinned)
	}
}

// Start starts the background work of the mode: the periodic ticker, or the
// synchronous hit worker. It does nothing when already started.
func (s *Syncer) Start() {
	s.loopMu.Lock()
	defer s.loopMu.Unlock()
	if s.stop != nil {
		return
	}
	s.mu.Lock()
	rate := s.cfg.Rate
	s.mu.Unlock()
	if rate < 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stop, s.done, s.cancel = make(chan struct{}), make(chan struct{}), cancel
	if rate > 0 {
		go s.periodic(ctx, s.stop, s.done, rate)
	} else {
		s.qmu.Lock()
		s.accepting = true
		s.qmu.Unlock()
		go s.synchronous(ctx, s.stop, s.done)
	}
}

// halt stops the background work without a final sync.
func (s *Syncer) halt() {
	s.loopMu.Lock()
	defer s.loopMu.Unlock()
	if s.stop == nil {
		return
	}
	s.stopping.Store(true)
	close(s.stop)
	s.cancel()
	<-s.done
	s.stopping.Store(false)
	s.stop, s.done, s.cancel = nil, nil, nil
}

// Stop stops the background work and makes a final sync within ctx, so that
// every diff taken on this node reaches the store. It is idempotent; the
// final sync's error is returned.
func (s *Syncer) Stop(ctx context.Context) error {
	s.halt()
	s.mu.Lock()
	rate := s.cfg.Rate
	s.mu.Unlock()
	if rate < 0 {
		return nil
	}
	return s.push(ctx)
}

// Sync pushes the pending diffs (after the in-flight batch, if any) and
// fetches the totals of the keys this node holds.
func (s *Syncer) Sync(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.syncLocked(ctx, "sync")
}

// Fetch reads the totals of the keys this node holds, without pushing.
func (s *Syncer) Fetch(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	t0 := time.Now()
	n, err := s.fetchLocked(ctx)
	s.report(Report{Op: "fetch", Duration: time.Since(t0), Fetched: n, Err: err})
	return err
}

// push pushes what is pending without fetching.
func (s *Syncer) push(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	t0 := time.Now()
	n, late, err := s.pushLocked(ctx)
	s.report(Report{Op: "sync", Duration: time.Since(t0), Pushed: n, Late: late, Err: err})
	return err
}

func (s *Syncer) syncLocked(ctx context.Context, op string) error {
	t0 := time.Now()
	calls := s.calls
	pushed, late, err := s.pushLocked(ctx)
	fetched := 0
	if err == nil {
		fetched, err = s.fetchLocked(ctx)
	}
	if err == nil && s.calls == calls {
		// Nothing to push and no key to fetch: ask the store anyway, so that
		// an idle namespace still learns whether its store answers.
		if _, err = s.cfg.Strategy.GetWindow(ctx, s.cfg.Namespace, "", time.UnixMilli(0), time.Millisecond); err != nil {
			err = fmt.Errorf("syncer: namespace %q: probe the store: %w", s.cfg.Namespace, err)
		}
	}
	for _, sr := range s.cfg.Series {
		sr.Expire(s.now())
	}
	s.pruneRetired(s.now())
	switch {
	case err == nil && s.down:
		s.markUp()
	case err != nil && s.cfg.Rate == 0:
		s.markDown() // synchronous hits go local instead of waiting on it
	}
	s.report(Report{Op: op, Duration: time.Since(t0), Pushed: pushed, Fetched: fetched, Late: late, Err: err})
	return err
}

// pushLocked pushes the in-flight batches, oldest first, then the diffs
// taken from the dirty counters as a new batch. It returns the diffs pushed
// and dropped as late.
func (s *Syncer) pushLocked(ctx context.Context) (pushed, late int, err error) {
	if pushed, late, err = s.pushInflight(ctx); err != nil {
		return pushed, late, err
	}
	b := s.takeBatch(s.pushing())
	if b == nil {
		return pushed, late, nil
	}
	late += s.dropLate(b, s.now())
	if len(b.Diffs) == 0 {
		return pushed, late, nil
	}
	s.addInflight(b)
	if err := s.send(ctx, *b); err != nil {
		return pushed, late, err
	}
	s.ack(b)
	return pushed + len(b.Diffs), late, nil
}

// pushInflight pushes the batches in flight, oldest first, and stops at the
// first failure: a lane's batches reach the store in Seq order.
func (s *Syncer) pushInflight(ctx context.Context) (pushed, late int, err error) {
	now := s.now()
	for len(s.inflight) > 0 {
		b := s.inflight[0]
		late += s.dropLate(b, now)
		if len(b.Diffs) > 0 {
			if err := s.send(ctx, *b); err != nil {
				return pushed, late, err
			}
		}
		pushed += len(b.Diffs)
		s.ack(b)
	}
	return pushed, late, nil
}

// takeBatch takes the listed diffs of series as a new batch, nil when there
// are none.
func (s *Syncer) takeBatch(series []*shm.Series) *strategy.Batch {
	var diffs []strategy.Diff
	for _, sr := range series {
		size := time.Duration(sr.Size()) * time.Millisecond
		sr.Take(func(start int64, key string, v float64) {
			diffs = append(diffs, strategy.Diff{
				Namespace: s.cfg.Namespace, Key: key,
				WindowStart: time.UnixMilli(start), WindowSize: size, Value: v,
			})
		})
	}
	if len(diffs) == 0 {
		return nil
	}
	return &strategy.Batch{Node: s.cfg.Node, Seq: s.cfg.Seq.Add(1), Diffs: diffs}
}

func (s *Syncer) send(ctx context.Context, b strategy.Batch) error {
	err := s.cfg.Strategy.PushDiffs(ctx, b)
	if err == nil {
		s.calls++
	}
	s.statsMu.Lock()
	if err != nil {
		s.stats.PushErrors++
	} else {
		s.stats.Pushes++
	}
	s.statsMu.Unlock()
	if err != nil {
		return fmt.Errorf("syncer: namespace %q: push batch %d (%d diffs): %w", s.cfg.Namespace, b.Seq, len(b.Diffs), err)
	}
	return nil
}

// dropLate removes from b the diffs whose window is older than the previous
// window of its size as of now, and counts them. b may be in flight.
func (s *Syncer) dropLate(b *strategy.Batch, now int64) int {
	inFlight := slices.Contains(s.inflight, b)
	kept := b.Diffs[:0]
	for _, d := range b.Diffs {
		size, start := d.WindowSize.Milliseconds(), d.WindowStart.UnixMilli()
		if start < floorDiv(now, size)*size-size {
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
		s.late.Add(uint64(n))
		if inFlight {
			s.nDiffs.Add(-int64(n))
		}
	}
	return n
}

// addInflight queues b behind the batches in flight.
func (s *Syncer) addInflight(b *strategy.Batch) {
	if len(s.inflight) == 0 {
		s.setPinned(true)
	}
	s.inflight = append(s.inflight, b)
	s.nInflight.Add(1)
	s.nDiffs.Add(int64(len(b.Diffs)))
	if s.inflightN == nil {
		s.inflightN, s.inflightM = make(map[counterID]float64, len(b.Diffs)), 0
	}
	for _, d := range b.Diffs {
		s.inflightN[counterID{d.WindowSize.Milliseconds(), d.WindowStart.UnixMilli(), d.Key}] += d.Value
	}
	s.inflightM = max(s.inflightM, len(s.inflightN))
}

// keepInflightN: inflightN is kept for the next batches, emptied, when it
// never held more entries than this.
const keepInflightN = 4096

// ack forgets b, a batch in flight: the store has it.
func (s *Syncer) ack(b *strategy.Batch) {
	i := slices.Index(s.inflight, b)
	if i < 0 {
		return
	}
	s.nInflight.Add(-1)
	s.nDiffs.Add(-int64(len(b.Diffs)))
	s.inflight = slices.Delete(s.inflight, i, i+1)
	if len(s.inflight) == 0 {
		s.inflight = nil
		if s.inflightM <= keepInflightN {
			clear(s.inflightN) // synchronous mode: one small batch per call, the map is reused
		} else {
			s.inflightN = nil // a map never shrinks: let a big one go
		}
		s.setPinned(false)
		return
	}
	for _, d := range b.Diffs {
		s.subInflight(counterID{d.WindowSize.Milliseconds(), d.WindowStart.UnixMilli(), d.Key}, d.Value)
	}
}

func (s *Syncer) subInflight(id counterID, v float64) {
	if s.inflightN[id] -= v; s.inflightN[id] == 0 {
		delete(s.inflightN, id)
	}
}

// fetchLocked reads, for the keys this node counted in the current window
// of any size (its active keys, not every key it ever fetched), the current
// and previous windows, and sets each counter's sync part to the store's
// count plus what of it is still in flight. Counters of those keys that the
// store does not return are counted zero there. Previous-window counters
// are made when missing (the sliding rate needs them); current-window ones
// are only updated: a key this node has not counted in this window is not
// its to follow.
func (s *Syncer) fetchLocked(ctx context.Context) (int, error) {
	now := s.now()
	keySet := make(map[string]struct{})
	sizes := make([]time.Duration, 0, len(s.cfg.Series))
	for _, sr := range s.cfg.Series {
		sizes = append(sizes, time.Duration(sr.Size())*time.Millisecond)
		if w := sr.Window(sr.StartOf(now), false, now); w != nil {
			w.Range(func(key string, _ *shm.Counter) bool {
				keySet[key] = struct{}{}
				return true
			})
		}
	}
	if len(keySet) == 0 {
		s.lastFetch.Store(now)
		return 0, nil
	}
	keys := make([]string, 0, len(keySet))
	for k := range keySet {
		keys = append(keys, k)
	}
	q := strategy.Query{Namespace: s.cfg.Namespace, WindowSizes: sizes, Now: time.UnixMilli(now), Keys: keys}
	seen := make(map[*shm.Counter]struct{}, len(keys))
	n := 0
	for c, err := range s.cfg.Strategy.GetCounters(ctx, q) {
		if err != nil {
			s.statsMu.Lock()
			s.stats.FetchErrors++
			s.statsMu.Unlock()
			return n, fmt.Errorf("syncer: namespace %q: get counters: %w", s.cfg.Namespace, err)
		}
		n++
		size, start := c.WindowSize.Milliseconds(), c.WindowStart.UnixMilli()
		sr := s.bySize[size]
		if sr == nil {
			continue
		}
		var ctr *shm.Counter
		switch cur := sr.StartOf(now); start {
		case cur:
			if w := sr.Window(start, false, now); w != nil {
				ctr = w.Counter(c.Key)
			}
		case cur - size:
			ctr = sr.Window(start, true, now).Ensure(c.Key, now)
		}
		if ctr == nil {
			continue // not this node's key in this window, or the dict is full
		}
		ctr.SetSync(c.Count + s.inflightN[counterID{size, start, c.Key}])
		seen[ctr] = struct{}{}
	}
	s.calls++
	s.lastFetch.Store(now)
	for _, sr := range s.cfg.Series {
		cur := sr.StartOf(now)
		for _, start := range []int64{cur, cur - sr.Size()} {
			w := sr.Window(start, false, now)
			if w == nil {
				continue
			}
			for key := range keySet {
				if ctr := w.Counter(key); ctr != nil {
					if _, ok := seen[ctr]; !ok {
						ctr.SetSync(s.inflightN[counterID{sr.Size(), start, key}])
					}
				}
			}
		}
	}
	return n, nil
}

// LastFetch returns when (namespace clock, Unix ms) the last fetch
// succeeded; 0 before the first.
func (s *Syncer) LastFetch() int64 { return s.lastFetch.Load() }

// RTT returns a moving average of the duration of the store calls that
// succeeded (pushes with their fetch, synchronous calls).
func (s *Syncer) RTT() time.Duration { return time.Duration(s.rtt.Load()) }

func (s *Syncer) report(r Report) {
	r.Namespace = s.cfg.Namespace
	if r.Err == nil && r.Op != "purge" {
		old := s.rtt.Load()
		if old == 0 {
			old = int64(r.Duration)
		}
		s.rtt.Store(old + (int64(r.Duration)-old)/8)
	}
	if r.Err != nil && errors.Is(r.Err, context.Canceled) && s.stopping.Load() {
		return // our own cancellation while stopping says nothing of the store
	}
	s.statsMu.Lock()
	if r.Op != "purge" {
		if r.Err != nil {
			if s.stats.StoreUp {
				s.cfg.Logger.Warn("ratesync: store unreachable", "namespace", r.Namespace, "op", r.Op, "err", r.Err)
			}
			s.stats.LastError, s.stats.LastErrorAt, s.stats.StoreUp = r.Err, time.Now(), false
		} else {
			if !s.stats.StoreUp {
				s.cfg.Logger.Info("ratesync: store reachable again", "namespace", r.Namespace)
			}
			s.stats.LastGood, s.stats.StoreUp = time.Now(), true
		}
	}
	s.statsMu.Unlock()
	if s.cfg.Observe != nil {
		s.cfg.Observe(r)
	}
}

// Stats returns a snapshot of the syncer's state. It never waits for a sync
// in progress.
func (s *Syncer) Stats() Stats {
	s.statsMu.Lock()
	st := s.stats
	s.statsMu.Unlock()
	st.LateDropped = s.late.Load()
	st.LocalHits = s.local.Load()
	st.InFlight, st.InFlightDiffs = int(s.nInflight.Load()), int(s.nDiffs.Load())
	for _, sr := range *s.series.Load() {
		st.Dirty += sr.Dirty()
	}
	return st
}

// periodic is the ticker loop of periodic mode.
func (s *Syncer) periodic(ctx context.Context, stop <-chan struct{}, done chan<- struct{}, rate time.Duration) {
	defer close(done)
	t := time.NewTimer(rand.N(rate)) // stagger: nodes do not sync in lockstep
	defer t.Stop()
	nextPurge := s.purgeDelay()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		started := time.Now()
		s.mu.Lock()
		sctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
		_ = s.syncLocked(sctx, "sync")
		cancel()
		s.mu.Unlock()
		if !nextPurge.IsZero() && time.Now().After(nextPurge) {
			s.purge(ctx)
			nextPurge = s.purgeDelay()
		}
		// The next sync starts one period after this one started, or at
		// once when this one overran: syncs never overlap or pile up.
		t.Reset(max(0, rate-time.Since(started)))
	}
}

func (s *Syncer) purgeDelay() time.Time {
	s.mu.Lock()
	every := s.cfg.PurgeEvery
	s.mu.Unlock()
	if every < 0 {
		return time.Time{}
	}
	return time.Now().Add(every*3/4 + rand.N(every/2+1))
}

func (s *Syncer) purge(ctx context.Context) {
	s.mu.Lock()
	cfg := s.cfg
	s.mu.Unlock()
	sizes := make([]time.Duration, 0, len(cfg.Series))
	for _, sr := range cfg.Series {
		sizes = append(sizes, time.Duration(sr.Size())*time.Millisecond)
	}
	pctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	t0 := time.Now()
	err := cfg.Strategy.Purge(pctx, cfg.Namespace, sizes, time.UnixMilli(cfg.Now()))
	if err != nil && !errors.Is(err, context.Canceled) {
		cfg.Logger.Warn("ratesync: purge failed", "namespace", cfg.Namespace, "err", err)
	}
	s.mu.Lock()
	s.report(Report{Op: "purge", Duration: time.Since(t0), Err: err})
	s.mu.Unlock()
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}
