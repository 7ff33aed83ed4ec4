package syncer

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratesync/ratesync/shm"
	"github.com/ratesync/ratesync/strategy"
)

// Defaults for Config's zero values.
const (
	DefaultTimeout    = 10 * time.Second // one background sync (periodic mode)
	DefaultHitTimeout = time.Second      // one store call for synchronous hits
	defaultPurgeEvery = time.Hour
	retryMin          = 100 * time.Millisecond // first back-off after a store failure
	retryMax          = 5 * time.Second        // longest back-off
	maxHitBatch       = 1024                   // hits (and checks) per store call
	maxAttempts       = 32                     // most tries of one synchronous call within its timeout (retrying)
	retryPause        = 2 * time.Millisecond   // first pause between those tries
	retryPauseMax     = 50 * time.Millisecond  // longest pause
)

// Config configures a Syncer. Namespace, Node, Strategy, Series, Now and Seq
// are required.
type Config struct {
	Namespace string
	Node      string        // push lane: Batch.Node of every batch
	Rate      time.Duration // > 0 periodic, 0 synchronous, < 0 never
	Strategy  strategy.Strategy
	Series    []*shm.Series             // one per window size of the namespace
	Buckets   func() []*shm.Buckets     // the namespace's bucket tables now; may be nil
	Keyed     func() []shm.PendingTable // the namespace's anchored windows and logs now; may be nil
	Now       func() int64              // the node's clock, Unix milliseconds; window arithmetic reads it through Syncer.Now
	Seq       *atomic.Uint64            // node-wide batch numbering, shared by all namespaces

	// StoreClock makes the namespace clock (Syncer.Now: window arithmetic)
	// Now plus the node's offset from the store's clock, measured when the
	// Strategy is a strategy.Clock; false counts on Now alone. The offset
	// is measured either way, for Stats and the logs.
	StoreClock bool

	// Clock is the time of the syncer's decisions at full resolution:
	// back-off and down state, purge schedule, Stats' times, durations. Now
	// and Clock are set once by New (Reconfigure keeps them); a nil Clock
	// means Now, in milliseconds.
	Clock      func() time.Time
	Timeout    time.Duration // bound on a background sync; DefaultTimeout when 0
	HitTimeout time.Duration // the call timeout: bound on a synchronous caller's wait (from when it queued) and on a near-limit check, after which the store is down (see health); DefaultHitTimeout when 0
	PurgeEvery time.Duration // mean interval between Purge calls (±25% jitter); an hour when 0, never when < 0
	Logger     *slog.Logger  // slog.Default() when nil
	Observe    func(Report)  // called after each store exchange; may be nil; must not block
	// BeforeSync, when set, runs before each push of a sync, and before
	// the final push of Stop with final set, under the lane's lock: what
	// it adds to the series and bucket tables goes with that push. It
	// must not call the syncer.
	BeforeSync func(final bool)
	// Resolved, when set, is told the store's answers to a check call that
	// was in doubt (ErrInDoubt) once the lane sent it again and the store
	// answered, under the lane's lock: what it adds to the series and
	// bucket tables goes with the next push. It must not call the syncer.
	Resolved func(checks []strategy.Check, res []strategy.CheckResult)
	// CountNodes counts the nodes that use the store (Nodes), through the
	// store, every few seconds while it answers (members.go).
	CountNodes bool
}

// conf is a configuration as applied: immutable, swapped whole under
// Syncer.confMu and read with one atomic load.
type conf struct {
	Config
	bySize   map[int64]*shm.Series
	retired  []*shm.Series // series a Reconfigure dropped, pushed until empty
	pushing  []*shm.Series // Series, then retired: the series whose diffs are pushed
	canCheck bool          // the strategy is a strategy.Checker
	buckets  bool          // the strategy keeps buckets (strategy.BucketStore)
}

func newConf(cfg Config, retired []*shm.Series) *conf {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.HitTimeout <= 0 {
		cfg.HitTimeout = DefaultHitTimeout
	}
	if cfg.PurgeEvery == 0 {
		cfg.PurgeEvery = defaultPurgeEvery
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Series = slices.Clone(cfg.Series)
	c := &conf{Config: cfg, bySize: make(map[int64]*shm.Series, len(cfg.Series)), retired: retired, pushing: cfg.Series}
	for _, sr := range cfg.Series {
		c.bySize[sr.Size()] = sr
	}
	if len(retired) > 0 {
		c.pushing = append(slices.Clone(cfg.Series), retired...)
	}
	_, c.canCheck = cfg.Strategy.(strategy.Checker)
	_, c.buckets = cfg.Strategy.(strategy.BucketStore)
	return c
}

// Syncer syncs one namespace. It is safe for concurrent use; its zero value
// is not usable: use New.
type Syncer struct {
	conf   atomic.Pointer[conf]
	confMu sync.Mutex // serializes changes of conf; see the lock order
	clock  clock

	lane    lane    // lane.go
	health  health  // health.go
	loop    loop    // periodic.go
	queue   queue   // coalescer.go
	stats   stats   // stats.go
	offset  offset  // offset.go
	members members // members.go

	lastFetch atomic.Int64 // namespace clock, ms: when the last fetch succeeded
}

// New returns a syncer; Start starts its background work.
func New(cfg Config) *Syncer {
	s := &Syncer{}
	s.clock = newClock(cfg, &s.offset)
	s.lane.mu = make(laneLock, 1)
	s.queue.signal = make(chan struct{}, 1)
	s.conf.Store(newConf(cfg, nil))
	return s
}

// Reconfigure replaces the configuration, keeping the batches in flight,
// and restarts the background work when the rate changed. Series that cfg
// no longer has are retired: their diffs (including adds that race this
// call) are still pushed, until they hold nothing. When the rate did not
// change, an exchange under way finishes with the old configuration and
// Reconfigure does not wait for it. When it changed, the background work is
// stopped (see halt): a periodic sync under way is canceled (its batch stays
// in flight), and the synchronous worker's turn under way is waited for, at
// most HitTimeout, since its store calls may already have counted their
// requests.
func (s *Syncer) Reconfigure(cfg Config) {
	s.confMu.Lock()
	old := s.conf.Load()
	var retired []*shm.Series
	for _, sr := range slices.Concat(old.Series, old.retired) {
		if !slices.Contains(cfg.Series, sr) && !slices.Contains(retired, sr) {
			retired = append(retired, sr)
		}
	}
	c := newConf(cfg, retired)
	s.conf.Store(c)
	s.reconfigureOffset(c)
	// Every pushed series is pinned exactly while batches are in flight:
	// new series, and ones added back after pruneRetired dropped them, take
	// the lane's state (setPinned changes it under confMu).
	pinned := s.lane.pinned.Load()
	for _, sr := range c.pushing {
		sr.SetPinned(pinned)
	}
	s.confMu.Unlock()
	if old.Rate != cfg.Rate {
		s.halt()
		s.Start()
	}
}

// pruneRetired forgets retired series that hold nothing any more. Whether
// a series is empty is decided under confMu, against the configuration it
// then replaces: a Reconfigure that adds a series back and retires it
// again meanwhile, with diffs added in between, cannot make it drop them.
func (s *Syncer) pruneRetired(now int64) {
	retired := s.conf.Load().retired
	if len(retired) == 0 {
		return
	}
	for _, sr := range retired {
		sr.Expire(now)
	}
	s.confMu.Lock()
	defer s.confMu.Unlock()
	c := s.conf.Load()
	kept := slices.DeleteFunc(slices.Clone(c.retired), func(sr *shm.Series) bool {
		if !sr.Empty() {
			return false
		}
		sr.SetPinned(false) // no counter, and no longer pushed: nothing to keep
		return true
	})
	if len(kept) < len(c.retired) {
		s.conf.Store(newConf(c.Config, kept))
	}
}

// Stop stops the background work and makes a final sync within ctx, so that
// every diff taken on this node reaches the store. It is idempotent; the
// final sync's error is returned.
func (s *Syncer) Stop(ctx context.Context) error {
	s.halt()
	if s.conf.Load().Rate < 0 {
		return nil
	}
	return s.push(ctx)
}

// Sync pushes the pending diffs (after the in-flight batch, if any) and
// fetches the totals of the keys this node holds.
func (s *Syncer) Sync(ctx context.Context) error {
	if !s.lane.mu.lockCtx(ctx) {
		return ctx.Err()
	}
	defer s.lane.mu.unlock()
	return s.syncLocked(ctx, "sync", false)
}

// Fetch reads the totals of the keys this node holds, without pushing.
func (s *Syncer) Fetch(ctx context.Context) error {
	if !s.lane.mu.lockCtx(ctx) {
		return ctx.Err()
	}
	defer s.lane.mu.unlock()
	t0 := s.clock.now()
	n, err := s.fetchLocked(ctx)
	s.report(Report{Op: "fetch", Duration: s.clock.since(t0), Fetched: n, Err: err})
	return err
}

// push pushes what is pending without fetching.
func (s *Syncer) push(ctx context.Context) error {
	if !s.lane.mu.lockCtx(ctx) {
		return ctx.Err()
	}
	defer s.lane.mu.unlock()
	t0 := s.clock.now()
	if c := s.conf.Load(); c.BeforeSync != nil {
		c.BeforeSync(true)
	}
	n, late, err := s.pushLocked(ctx)
	if err == nil && n == 0 {
		return nil // nothing to push: no exchange, nothing learned of the store
	}
	s.report(Report{Op: "sync", Duration: s.clock.since(t0), Pushed: n, Late: late, Err: err})
	return err
}

// CanCheck reports whether the strategy decides checks (strategy.Checker).
func (s *Syncer) CanCheck() bool { return s.conf.Load().canCheck }

// LastFetch returns when (namespace clock, Unix ms) the last fetch
// succeeded; 0 before the first.
func (s *Syncer) LastFetch() int64 { return s.lastFetch.Load() }
