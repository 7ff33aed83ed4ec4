package ratelimiting

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratesync/ratesync/internal/arith"
	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/shm"
	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/syncer"
)

// Errors callers branch on. Errors returned wrap them with the namespace.
var (
	ErrNamespaceExists   = errors.New("ratelimiting: namespace already exists")    // New: the instance already has that namespace
	ErrNamespaceNotFound = errors.New("ratelimiting: namespace not found")         // Update, Remove, Increment...: no such namespace
	ErrClosed            = errors.New("ratelimiting: instance closed")             // any call after Close
	ErrInvalidInput      = errors.New("ratelimiting: invalid input")               // matched by every *InputError
	ErrDictConflict      = errors.New("ratelimiting: dict configured differently") // New, Update: a dict's capacity or a namespace's dict cannot change so
)

// InputError is a call argument the library rejects: it names the field, the
// value and what is allowed. errors.Is(err, ErrInvalidInput) holds.
type InputError struct {
	Field   string
	Value   string
	Allowed string
}

func (e *InputError) Error() string {
	return fmt.Sprintf("ratelimiting: %s = %s: %s", e.Field, e.Value, e.Allowed)
}

// Is makes every InputError match ErrInvalidInput.
func (e *InputError) Is(target error) bool { return target == ErrInvalidInput }

type nsError struct {
	name string
	err  error
	verb string
}

func (e *nsError) Error() string { return fmt.Sprintf("ratelimiting: namespace %q %s", e.name, e.verb) }
func (e *nsError) Unwrap() error { return e.err }

func errExists(name string) error   { return &nsError{name, ErrNamespaceExists, "already exists"} }
func errNotFound(name string) error { return &nsError{name, ErrNamespaceNotFound, "not found"} }

// Option configures an Instance.
type Option func(*Instance)

// WithClock makes the instance read time from now instead of its coarse
// millisecond clock (see the package README): tests pass a fake clock to
// move time by hand; time.Now gives an exact clock at ~50-100 ns a call.
func WithClock(now func() time.Time) Option {
	return func(in *Instance) {
		in.wallClock = now
		in.clock = func() int64 { return now().UnixMilli() }
	}
}

// WithNodeID names this node in the batches it pushes (default: the host
// name). A random suffix is added per Instance, so a restarted process never
// reuses the batch identities of its previous life.
func WithNodeID(id string) Option { return func(in *Instance) { in.nodeID = id } }

// WithLogger sets the logger for sync failures and recoveries (default
// slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(in *Instance) { in.logger = l } }

// WithSyncObserver registers fn to be called after every exchange with a
// store (for metrics). fn must not block.
func WithSyncObserver(fn func(SyncReport)) Option {
	return func(in *Instance) {
		in.observe = nil
		if fn != nil {
			in.observe = func(r syncer.Report) { fn(SyncReport(r)) }
		}
	}
}

// WithSyncTimeout bounds one background sync (periodic mode) and the store
// calls that answer one batch of synchronous hits and checks; zero values
// keep syncer.DefaultTimeout and syncer.DefaultHitTimeout.
func WithSyncTimeout(sync, hit time.Duration) Option {
	return func(in *Instance) { in.syncTimeout, in.hitTimeout = sync, hit }
}

// ns is one namespace as applied. It is immutable; Update swaps it whole.
type ns struct {
	cfg    namespace.Config
	dict   *shm.Dict
	sizes  []time.Duration // ascending, parallel to series
	series []*shm.Series
	syncer *syncer.Syncer                 // nil when local-only
	tables atomic.Pointer[[]*shm.Buckets] // bucket tables looked up so far (see bucketTable)
	anchs  atomic.Pointer[[]*shm.Keyed[strategy.BucketState]]
	logs   atomic.Pointer[[]*shm.Keyed[arith.Log]]
	leases *leaseTable // nil unless cfg.Leases
}

// register returns the table mk makes, added to *list: the lookup of a
// table the namespace has not used yet (the dict's, which locks). Callers
// scan the list first, without a lock; two that race may both add the
// dict's one table, which only lengthens the scan.
func register[T any](list *atomic.Pointer[[]*T], mk func() *T) *T {
	t := mk()
	for {
		old := list.Load()
		var ts []*T
		if old != nil {
			ts = append(ts, *old...)
		}
		ts = append(ts, t)
		if list.CompareAndSwap(old, &ts) {
			return t
		}
	}
}

// bucketTable returns n's table of buckets of kind and window: a scan of
// the tables used so far, and the dict's lookup the first time.
func (n *ns) bucketTable(kind uint8, window time.Duration, now int64) *shm.Buckets {
	w := window.Milliseconds()
	if ts := n.tables.Load(); ts != nil {
		for _, t := range *ts {
			if t.Kind() == kind && t.Window() == w {
				return t
			}
		}
	}
	return register(&n.tables, func() *shm.Buckets {
		return n.dict.Buckets(n.cfg.Name, kind, window, n.cfg.Local(), now, n.live)
	})
}

// bucketsAllowed returns why n cannot hold buckets, nil when it can: a
// namespace that syncs needs a store that keeps them
// (strategy.BucketStore), and a synchronous one a store that decides them
// (strategy.Checker).
func (n *ns) bucketsAllowed() error {
	if n.syncer == nil {
		return nil
	}
	if _, ok := n.cfg.Strategy.(strategy.BucketStore); !ok {
		return fmt.Errorf("buckets need a store that keeps them (memory, Redis, PostgreSQL); the store of namespace %q does not", n.cfg.Name)
	}
	if _, ok := n.cfg.Strategy.(strategy.Checker); !ok && n.cfg.SyncRate == 0 {
		return fmt.Errorf("synchronous buckets need a store that decides checks (memory, Redis, PostgreSQL); the store of namespace %q does not", n.cfg.Name)
	}
	return nil
}

func (n *ns) seriesOf(size time.Duration) *shm.Series {
	for i, s := range n.sizes {
		if s == size {
			return n.series[i]
		}
	}
	return nil
}

// Instance is a set of namespaces with their own counters: two Instances
// never share state, even with equal namespace and dict names (Kong's
// new_instance). It is safe for concurrent use; its zero value is not: use
// NewInstance or Default.
type Instance struct {
	name        string
	nodeID      string
	node        string       // nodeID plus a random suffix: unique per Instance
	clock       func() int64 // Unix ms
	coarse      bool
	wallClock   func() time.Time // the clock of the syncers' decisions: WithClock's, else time.Now
	logger      *slog.Logger
	observe     func(syncer.Report)
	syncTimeout time.Duration
	hitTimeout  time.Duration
	seq         atomic.Uint64

	// mu guards the table's changes, dicts and busy. It is never held across
	// store I/O: the syncer work of New, Update and Remove runs outside it,
	// so a slow store delays only calls on its own namespace.
	mu     sync.Mutex
	nss    atomic.Pointer[table]
	dicts  map[string]*shm.Dict
	busy   map[string]chan struct{} // namespaces an Update or Remove is working on outside mu
	closed atomic.Bool

	seed    maphash.Seed
	stripes [64]stripe // serialize multi-window Allow per key
}

type stripe struct {
	sync.Mutex
	_ [56]byte
}

// NewInstance returns an instance with no namespaces. name identifies it in
// logs (Kong's instance name, such as the plugin using it).
func NewInstance(name string, opts ...Option) *Instance {
	in := &Instance{name: name, dicts: make(map[string]*shm.Dict), busy: make(map[string]chan struct{}), seed: maphash.MakeSeed()}
	for _, o := range opts {
		o(in)
	}
	if in.clock == nil {
		processClock.acquire()
		in.coarse = true
		in.clock = processClock.now
		in.wallClock = time.Now // the same timeline, at the resolution store round trips need
	}
	if in.nodeID == "" {
		in.nodeID, _ = os.Hostname()
	}
	// Stores keep node identities as text: valid UTF-8, no NUL, no '|'.
	in.nodeID = strings.NewReplacer("\x00", "", "|", "_").Replace(strings.ToValidUTF8(in.nodeID, "?"))
	if in.nodeID == "" {
		in.nodeID = "node"
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	in.node = in.nodeID + "/" + hex.EncodeToString(b[:])
	if in.logger == nil {
		in.logger = slog.Default()
	}
	in.logger = in.logger.With("instance", name)
	in.nss.Store(&table{})
	return in
}

var defaultInstance = sync.OnceValue(func() *Instance { return NewInstance("default") })

// Default returns the process-wide shared instance (Kong's module-level
// library). Code that must not see other users' namespaces uses NewInstance.
func Default() *Instance { return defaultInstance() }

// Name returns the instance's name.
func (in *Instance) Name() string { return in.name }

// Node returns the node identity this instance pushes batches under.
func (in *Instance) Node() string { return in.node }

func (in *Instance) lookup(name string) (*ns, error) {
	t := in.nss.Load()
	if len(t.list) <= scanLimit {
		for _, n := range t.list { // a few string compares beat hashing
			if n.cfg.Name == name {
				return n, nil
			}
		}
	} else if n := t.byName[name]; n != nil {
		return n, nil
	}
	if in.closed.Load() {
		return nil, ErrClosed
	}
	if name == "" {
		return in.lookup(namespace.DefaultName)
	}
	return nil, errNotFound(name)
}

// New adds a namespace. For an invalid cfg it returns cfg.Validate's error:
// one *namespace.FieldError per invalid field, joined (errors.As finds the
// first). It returns ErrNamespaceExists when the instance already has one of
// that name.
func (in *Instance) New(cfg namespace.Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	cfg = cfg.Normalize()
	in.mu.Lock()
	defer in.mu.Unlock()
	for in.waitIdle(cfg.Name) { // an Update or Remove of that name finishes first
	}
	if in.closed.Load() {
		return ErrClosed
	}
	if _, ok := in.nss.Load().byName[cfg.Name]; ok {
		return errExists(cfg.Name)
	}
	dict, err := in.dict(cfg)
	if err != nil {
		return err
	}
	n := in.layout(cfg, dict)
	if !cfg.Local() {
		n.syncer = syncer.New(in.syncConfig(n))
	}
	in.swap(cfg.Name, n)
	in.setClock(n)
	if n.syncer != nil {
		n.syncer.Start()
	}
	return nil
}

// waitIdle waits, when an Update or Remove of name is under way, until it
// ends, and reports whether it waited. Callers hold in.mu; it is released
// while waiting.
func (in *Instance) waitIdle(name string) bool {
	done, ok := in.busy[name]
	if !ok {
		return false
	}
	in.mu.Unlock()
	<-done
	in.mu.Lock()
	return true
}

// claim marks name busy and returns the function that ends it. Callers
// hold in.mu; the returned function takes it.
func (in *Instance) claim(name string) (release func()) {
	done := make(chan struct{})
	in.busy[name] = done
	return func() {
		in.mu.Lock()
		delete(in.busy, name)
		in.mu.Unlock()
		close(done)
	}
}

// Update replaces a namespace's configuration atomically. Counters are
// kept; diffs of window sizes the new configuration drops are still pushed.
// The dict of a namespace cannot change (Remove it and add it anew).
func (in *Instance) Update(cfg namespace.Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	cfg = cfg.Normalize()
	in.mu.Lock()
	old, err := in.claimExisting(cfg.Name)
	if err != nil {
		in.mu.Unlock()
		return err
	}
	if cfg.Dict != old.cfg.Dict {
		in.mu.Unlock()
		return fmt.Errorf("%w: namespace %q lives in dict %q; Update cannot move it to %q", ErrDictConflict, cfg.Name, old.cfg.Dict, cfg.Dict)
	}
	if _, err := in.dict(cfg); err != nil {
		in.mu.Unlock()
		return err
	}
	n := in.layout(cfg, old.dict)
	if n.leases != nil && old.leases != nil {
		n.leases = old.leases // the grants held stay good
		n.leases.horizon.Store(max(1, cfg.SyncRate.Milliseconds()))
	}
	release := in.claim(cfg.Name)
	in.mu.Unlock()
	defer release()

	// The syncer's part runs outside in.mu: a final push may take up to
	// the sync timeout, and a rate change waits for the synchronous
	// worker's store calls under way, up to the hit timeout.
	switch {
	case old.syncer != nil && cfg.Local():
		// Now local-only: push what is pending, within the sync timeout.
		if err := in.stopSyncer(old.syncer); err != nil {
			in.logger.Warn("ratesync: final push before going local-only failed", "namespace", cfg.Name, "err", err)
		}
	case old.syncer != nil:
		if old.leases != nil && n.leases == nil {
			in.sweepLeases(old, true) // no longer leased: what it holds goes back with the next push
		}
		n.syncer = old.syncer
		n.syncer.Reconfigure(in.syncConfig(n))
	case !cfg.Local():
		n.syncer = syncer.New(in.syncConfig(n))
	}

	in.mu.Lock()
	if in.closed.Load() {
		in.mu.Unlock()
		// Close ran meanwhile and stopped the syncers it found; this one
		// may have been restarted since. Close waits for this push.
		if n.syncer != nil {
			_ = in.stopSyncer(n.syncer)
		}
		return ErrClosed
	}
	defer in.mu.Unlock()
	in.swap(cfg.Name, n)
	in.setClock(n)
	if n.syncer != nil {
		n.syncer.Start()
	}
	return nil
}

// claimExisting waits until no other Update or Remove of name is under
// way, and returns the namespace. Callers hold in.mu.
func (in *Instance) claimExisting(name string) (*ns, error) {
	for {
		if in.closed.Load() {
			return nil, ErrClosed
		}
		n, ok := in.nss.Load().byName[name]
		if !ok {
			return nil, errNotFound(name)
		}
		if !in.waitIdle(name) {
			return n, nil
		}
	}
}

// stopSyncer stops s with a final push bounded by the sync timeout.
func (in *Instance) stopSyncer(s *syncer.Syncer) error {
	ctx, cancel := context.WithTimeout(context.Background(), in.timeout())
	defer cancel()
	return s.Stop(ctx)
}

func (in *Instance) timeout() time.Duration {
	if in.syncTimeout > 0 {
		return in.syncTimeout
	}
	return syncer.DefaultTimeout
}

// dict returns cfg's dict, creating it; the first namespace to name a dict
// sets its capacity, and a later one may raise it.
func (in *Instance) dict(cfg namespace.Config) (*shm.Dict, error) {
	d, ok := in.dicts[cfg.Dict]
	if !ok {
		d, err := shm.NewDict(cfg.Dict, cfg.DictCapacity)
		if err != nil {
			return nil, err
		}
		in.dicts[cfg.Dict] = d
		return d, nil
	}
	if cfg.DictCapacity != 0 && cfg.DictCapacity != d.Capacity() {
		if err := d.SetCapacity(cfg.DictCapacity); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// layout makes the applied form of cfg in dict, without its syncer.
func (in *Instance) layout(cfg namespace.Config, dict *shm.Dict) *ns {
	n := &ns{cfg: cfg, dict: dict}
	if cfg.Leases {
		n.leases = newLeaseTable(cfg.SyncRate)
	}
	for _, size := range cfg.WindowSizes {
		sr := dict.Series(cfg.Name, size)
		sr.SetLocal(cfg.Local())
		n.sizes = append(n.sizes, size)
		n.series = append(n.series, sr)
	}
	for _, t := range dict.BucketTables(cfg.Name) {
		t.SetLocal(cfg.Local())
	}
	for _, t := range dict.PendingTables(cfg.Name) {
		t.SetLocal(cfg.Local())
	}
	return n
}

// syncConfig returns the configuration of n's syncer.
func (in *Instance) syncConfig(n *ns) syncer.Config {
	return syncer.Config{
		Namespace:  n.cfg.Name,
		Node:       n.cfg.Name + "|" + in.node,
		Rate:       n.cfg.SyncRate,
		Strategy:   n.cfg.Strategy,
		Series:     slices.Clone(n.series),
		Buckets:    func() []*shm.Buckets { return n.dict.BucketTables(n.cfg.Name) },
		Keyed:      func() []shm.PendingTable { return n.dict.PendingTables(n.cfg.Name) },
		Now:        in.clock,
		StoreClock: n.cfg.Clock == namespace.StoreClock,
		// The back-off, the down state, the purge schedule and the times
		// of Stats run on the instance's clock too, so a fake clock
		// (WithClock) drives them.
		Clock:      in.wallClock,
		Seq:        &in.seq,
		Timeout:    in.syncTimeout,
		HitTimeout: cmp.Or(n.cfg.Timeout, in.hitTimeout),
		Logger:     in.logger,
		Observe:    in.observe,
		BeforeSync: in.beforeSync(n),
		Resolved:   in.resolved(n),
		CountNodes: n.countsNodes(),
	}
}

// countsNodes reports whether n's store-down behaviour shares its limits
// among the nodes (namespace.StoreDownShare in a leased or synchronous
// namespace): its syncer then counts them.
func (n *ns) countsNodes() bool {
	return n.cfg.StoreDown == namespace.StoreDownShare && (n.cfg.Leases || n.cfg.SyncRate == 0) && !n.cfg.Local()
}

// resolved returns what n's syncer runs when the store answers a check
// call that was in doubt: grants the store made give their units back.
func (in *Instance) resolved(n *ns) func([]strategy.Check, []strategy.CheckResult) {
	if n.leases == nil {
		return nil
	}
	return func(checks []strategy.Check, res []strategy.CheckResult) { in.resolveGrants(n, checks, res) }
}

// beforeSync returns what n's syncer runs before each push: leases give
// back what they will not use.
func (in *Instance) beforeSync(n *ns) func(final bool) {
	if n.leases == nil {
		return nil
	}
	return func(final bool) { in.sweepLeases(n, final) }
}

// swap publishes n (or removes name when n is nil). Callers hold in.mu.
func (in *Instance) swap(name string, n *ns) {
	old := in.nss.Load()
	t := &table{byName: make(map[string]*ns, len(old.byName)+1)}
	for k, v := range old.byName {
		t.byName[k] = v
	}
	if n == nil {
		delete(t.byName, name)
	} else {
		t.byName[name] = n
	}
	for _, v := range t.byName {
		t.list = append(t.list, v)
		t.leased = t.leased || v.leases != nil
	}
	in.nss.Store(t)
}

// table is the immutable set of an instance's namespaces; swap replaces it.
type table struct {
	byName map[string]*ns
	list   []*ns
	leased bool // a namespace of list is leased
}

// scanLimit is the namespace count up to which lookup scans a slice.
const scanLimit = 8

// Remove makes a final sync of the namespace within ctx, then drops it and
// its counters. The final sync's error is returned; the namespace is gone
// either way.
func (in *Instance) Remove(ctx context.Context, name string) error {
	in.mu.Lock()
	var (
		n   *ns
		err error
	)
	for { // an Update of that name finishes first
		if n, err = in.lookup(name); err != nil {
			in.mu.Unlock()
			return err
		}
		if !in.waitIdle(n.cfg.Name) {
			break
		}
	}
	in.swap(n.cfg.Name, nil)
	release := in.claim(n.cfg.Name) // New of the same name waits for us
	in.mu.Unlock()
	defer release()
	n.close()
	if n.syncer != nil {
		err = n.syncer.Stop(ctx)
	}
	n.dict.RemoveNamespace(n.cfg.Name)
	return err
}

// close marks the namespace's series closed: callers that raced the removal
// take their adds back (see shm.Series.Closed). The final push follows.
func (n *ns) close() {
	for _, sr := range n.series {
		sr.Close()
	}
}

// Close makes a final sync of every namespace within ctx, then stops the
// instance: later calls return ErrClosed. An Update or Remove under way
// makes its own final push, bounded by the sync timeout or by its context;
// Close returns after those too, or when ctx ends. It is idempotent.
func (in *Instance) Close(ctx context.Context) error {
	in.mu.Lock()
	if in.closed.Swap(true) {
		in.mu.Unlock()
		return nil
	}
	nss := in.nss.Load().byName
	in.nss.Store(&table{})
	dicts := slices.Collect(maps.Values(in.dicts))
	busy := slices.Collect(maps.Values(in.busy)) // no call claims a name once closed
	in.mu.Unlock()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, n := range nss {
		n.close()
		if n.syncer == nil {
			continue
		}
		wg.Go(func() {
			if err := n.syncer.Stop(ctx); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := waitAll(ctx, busy); err != nil {
		errs = append(errs, err)
	}
	for _, d := range dicts {
		d.Close() // stop their background sweeps
	}
	if in.coarse {
		processClock.release()
	}
	return errors.Join(errs...)
}

// waitAll waits until every channel of busy is closed, or ctx ends.
func waitAll(ctx context.Context, busy []chan struct{}) error {
	for _, done := range busy {
		select {
		case <-done:
		case <-ctx.Done():
			return fmt.Errorf("ratelimiting: close: waiting for an Update or Remove: %w", ctx.Err())
		}
	}
	return nil
}

// Sync pushes the namespace's pending diffs and fetches the totals of the
// keys this node holds. It does nothing for a local-only namespace.
func (in *Instance) Sync(ctx context.Context, name string) error {
	n, err := in.lookup(name)
	if err != nil || n.syncer == nil {
		return err
	}
	return n.syncer.Sync(ctx)
}

// Fetch reads the store's totals of the keys this node holds in the
// namespace's current and previous windows, without pushing. It does
// nothing for a local-only namespace.
func (in *Instance) Fetch(ctx context.Context, name string) error {
	n, err := in.lookup(name)
	if err != nil || n.syncer == nil {
		return err
	}
	return n.syncer.Fetch(ctx)
}

// Namespaces returns the configuration of every namespace, by name.
func (in *Instance) Namespaces() []namespace.Config {
	m := in.nss.Load().byName
	out := make([]namespace.Config, 0, len(m))
	for _, n := range m {
		out = append(out, n.cfg)
	}
	slices.SortFunc(out, func(a, b namespace.Config) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}

// Stats returns a snapshot of every namespace, by name.
func (in *Instance) Stats() []NamespaceStats {
	m := in.nss.Load().byName
	out := make([]NamespaceStats, 0, len(m))
	for _, cfg := range in.Namespaces() {
		n := m[cfg.Name]
		if n == nil {
			continue
		}
		st := NamespaceStats{Config: n.cfg, Dict: DictStats(n.dict.Stats()), Leases: n.leases.snapshot()}
		if n.syncer != nil && n.countsNodes() {
			st.Nodes = n.syncer.Nodes()
		}
		if n.syncer != nil {
			st.Sync = SyncStats(n.syncer.Stats())
		}
		out = append(out, st)
	}
	return out
}

// nowIn returns the clock of namespace n in Unix milliseconds: the
// instance's, plus the store's offset when n counts in store time (its
// syncer's clock; see namespace.Config.Clock). One atomic load more than
// the instance clock; no lock, no allocation.
func (in *Instance) nowIn(n *ns) int64 {
	if n.syncer != nil {
		return n.syncer.Now()
	}
	return in.clock()
}

// setClock tells n's dict the clock its background sweep reads n's
// windows, buckets and logs at: namespaces of one dict may count on
// different clocks.
func (in *Instance) setClock(n *ns) {
	if n.syncer != nil {
		n.dict.SetClock(n.cfg.Name, n.syncer.Now)
		return
	}
	n.dict.SetClock(n.cfg.Name, in.clock)
}
