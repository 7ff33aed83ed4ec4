// Package strategy is the contract between a node's syncer and a central
// store of counters, Kong's strategy interface in Go: push diffs, get
// counters, get a window, purge. It holds the interface, its value types and
// the optional interfaces a store may add (PushCounter, Checker,
// BucketStore, Clock); the stores themselves live in strategy/memory,
// strategy/redis and strategy/postgres.
//
// Counting model. A counter is identified by (namespace, key, window start,
// window size). Window starts are aligned to the Unix epoch
// (start = floor(t / size) * size) and both are whole milliseconds. Counts
// are float64: hits may be fractional, and negative diffs refund.
//
// Keys are opaque bytes: every strategy stores and returns any Go string
// byte-exact, including '|', NUL and invalid UTF-8.
package strategy

import (
	"context"
	"iter"
	"time"
)

// Diff is an amount to add to one counter.
type Diff struct {
	Namespace   string
	Key         string
	WindowStart time.Time
	WindowSize  time.Duration
	Value       float64
	// Span is the longest sliding window the counter is read in, a
	// multiple of WindowSize (see CheckLimit.Precision); 0 means
	// WindowSize. A store keeps a window at least until Span after its
	// end: the previous window for plain counters, the last Span/WindowSize
	// windows for sub-windows of a precision limit.
	Span time.Duration
}

// Batch is one push. A strategy applies a given (Node, Seq) at most once.
//
// Node names the sender's push lane; Seq numbers its batches. The syncer
// sends one batch at a time per Node, in increasing Seq order, and retries a
// batch whose push failed with the same Node and Seq, unchanged but for late
// diffs it drops, before it sends any newer one. At most once per
// (Node, Seq) therefore means: a strategy records the highest Seq it applied
// for each Node in the same atomic step as the batch's diffs, and applies
// nothing of a batch whose Seq is not above that record (it returns nil: the
// batch is already counted). A retry after a timeout whose first try landed
// counts nothing twice; a batch that never landed is applied by its retry.
type Batch struct {
	Node  string
	Seq   uint64
	Diffs []Diff
	// Buckets are bucket diffs, applied in the same atomic step as Diffs.
	// Only strategies that implement BucketStore are sent any.
	Buckets []BucketDiff
}

// Counter is one counter's total as held by the store.
type Counter struct {
	Key         string
	WindowStart time.Time
	WindowSize  time.Duration
	Count       float64
}

// Query selects counters for GetCounters.
type Query struct {
	Namespace   string
	WindowSizes []time.Duration
	Now         time.Time // current and previous windows of each size, as of Now
	Keys        []string  // nil: every key of the namespace
	// Windows is, per size of WindowSizes, how many windows of it to read:
	// the one holding Now and the ones before it, newest first. A missing
	// entry, or one below 2, means 2: the current and the previous window.
	// A sliding window of W counted in sub-windows of size p needs W/p + 1.
	Windows []int
}

// Depth returns how many windows of WindowSizes[i] q reads: Windows[i],
// at least 2.
func (q *Query) Depth(i int) int {
	if i < len(q.Windows) && q.Windows[i] > 2 {
		return q.Windows[i]
	}
	return 2
}

// Strategy is a central store of counters shared by the nodes of a cluster.
//
// Implementations are safe for concurrent use. Every method may block on
// I/O and must return promptly once ctx is done, with ctx.Err() or an error
// wrapping it. Slices passed in (Batch.Diffs, Query.WindowSizes, Query.Keys)
// belong to the caller and are only read during the call.
type Strategy interface {
	// PushDiffs adds each diff of b to its counter, as one atomic step
	// together with the record of (b.Node, b.Seq): see Batch. Diffs may name
	// the same counter more than once. Called by the syncer, one call at a
	// time per b.Node.
	PushDiffs(ctx context.Context, b Batch) error

	// GetCounters yields the counters of q.Namespace in the current and the
	// previous window of each size in q.WindowSizes as of q.Now (and the
	// windows before those, down to q.Depth of the size), restricted
	// to q.Keys when it is not nil. Counters the store does not hold are not
	// yielded (their count is zero). An error ends the sequence: it is
	// yielded with a zero Counter. Called by the syncer after each push, and
	// by Instance.Fetch.
	GetCounters(ctx context.Context, q Query) iter.Seq2[Counter, error]

	// GetWindow returns one counter's count, 0 when the store does not hold
	// it. Called on demand (the node's HTTP API, tests, tools).
	GetWindow(ctx context.Context, namespace, key string, windowStart time.Time, windowSize time.Duration) (float64, error)

	// Purge removes what the namespace no longer needs as of now: at least
	// the windows of windowSizes older than the previous window may go, and
	// records of push lanes unused for long. Called by the syncer now and
	// then (about hourly, jittered); stores that expire data by themselves
	// may do little.
	Purge(ctx context.Context, namespace string, windowSizes []time.Duration, now time.Time) error
}

// Totals is a key's count in the window a diff went to and in the window
// just before it (same key, same size).
type Totals struct {
	Current  float64
	Previous float64
}

// PushCounter is implemented by strategies that can apply a batch and read
// the totals it produced in the same step. The syncer uses it in synchronous
// mode (SyncRate 0): one round trip per batch of hits instead of a push and
// a read.
type PushCounter interface {
	// PushAndCount applies b exactly as PushDiffs does and returns, for each
	// diff of b in order, the totals of its key right after that diff was
	// applied, so that each caller learns the count as of its own hit. When
	// (b.Node, b.Seq) was already applied, it applies nothing and returns the
	// current totals.
	PushAndCount(ctx context.Context, b Batch) ([]Totals, error)
}

// Clock is implemented by strategies that tell their own time: the common
// reference of a cluster's windows. Nodes' clocks differ (a node 1.5 s ahead
// would count in windows the others have not reached); the store's is one.
// The syncer measures each node's offset from it, NTP-style (Time's answer
// minus the node's clock halfway through the call, the estimate kept from
// the samples with the shortest round trips), and a namespace counts its
// windows in the node's clock plus that offset (namespace.StoreClock). A
// store kept in the node's own process (strategy/memory) has no reason to
// implement it: its time is the node's.
type Clock interface {
	// Time returns the store's current time as the store reads it (Redis
	// TIME, PostgreSQL clock_timestamp()): one small round trip. Called by
	// the syncer once per sync in periodic mode, about once a second while
	// synchronous calls flow, and when its background work starts. It may
	// block on I/O and must return promptly once ctx is done.
	Time(ctx context.Context) (time.Time, error)
}

// CheckLimit is one limit of a Check.
type CheckLimit struct {
	WindowSize time.Duration
	Limit      float64 // hits allowed per window; > 0
	Fixed      bool    // fixed window: the previous window does not count
	// Kind is 0 for a window limit, KindAnchored for an anchored window,
	// KindLog for a sliding log (see BucketStore for both). Any other
	// value makes the limit a bucket: the bucket (Key, Kind, WindowSize),
	// which refills Limit per WindowSize up to Burst.
	Kind  uint8
	Burst float64 // buckets: capacity, > 0
	// Precision, for a sliding window limit (Kind 0, not Fixed), counts it
	// in windows of this size: a divisor of WindowSize, which is then the
	// span they slide over (internal/arith.SpanFits). 0, or WindowSize itself, is a
	// plain sliding window of WindowSize.
	Precision time.Duration
}

// Sub returns the size of the windows a window limit counts in: Precision
// when set, else WindowSize.
func (l *CheckLimit) Sub() time.Duration {
	if l.Precision > 0 {
		return l.Precision
	}
	return l.WindowSize
}

// Depth returns how many windows of size Sub a window limit reads: 2 for
// a plain window (the current and the previous), WindowSize/Precision + 1
// with a precision.
func (l *CheckLimit) Depth() int {
	if l.Precision > 0 && l.Precision < l.WindowSize {
		return int(l.WindowSize/l.Precision) + 1
	}
	return 2
}

// Check is one request decided and counted in the store in one atomic step
// (synchronous mode): it passes when every limit lets it pass (internal/
// arith's WindowFits, SpanFits with a precision, BucketFits, AnchoredFits,
// LogFits), judged at Now, the node's clock. When it passes, Cost is added
// once to the current window of each distinct size (Sub) of its window
// limits, to each of its buckets (BucketAdd), anchored windows
// (AnchoredAdd) and logs (Log.Add); when it does not, nothing is counted.
type Check struct {
	Namespace string
	Key       string
	Cost      float64 // >= 0
	Now       time.Time
	Limits    []CheckLimit
}

// CheckResult is the outcome of one Check.
type CheckResult struct {
	Allowed bool
	// Totals holds, per limit in order, the counts right after the
	// decision: for a window limit its current and previous windows (of
	// size Sub). Zero for other limits.
	Totals []Totals
	// Buckets holds, per limit in order, the state right after the
	// decision of a bucket, anchored window or log (see BucketStore); zero
	// for window limits. Nil when the check has none.
	Buckets []BucketState
	// Windows holds, per limit in order, the counts of a precision limit's
	// Depth windows right after the decision, newest first; nil for other
	// limits. Nil when the check has no precision limit.
	Windows [][]float64
}

// Checker is implemented by strategies that can decide and count requests
// in one atomic step, so that N nodes in synchronous mode never admit more
// than a limit between them. The syncer uses it for Allow in synchronous
// namespaces.
type Checker interface {
	// CheckAndCount decides and counts each check, in order for each key,
	// as one batch applied at most once per (node, seq) like PushDiffs,
	// and records with seq the decisions it made, so that a call retried
	// after its reply was lost gets the same decisions: each check counts
	// exactly once whether or not the first reply arrived. Concurrent calls
	// never let the checks of one key see a count that another call is
	// changing.
	//
	// A store keeps the record of node per shard of its keys (a store
	// without shards keeps one): the last seq applied in that shard and,
	// when a call set it, the decision of each of that call's checks in the
	// shard, in order. PushDiffs and PushAndCount share the records: a push
	// records its seq with no decisions. The checks of a shard whose record
	// is
	//   - below seq (or absent): are decided and counted, and seq is
	//     recorded with their decisions;
	//   - seq itself, set by a call (a retry of the same call: the same
	//     checks in the same order): count nothing again and are returned
	//     as decided then, Allowed as recorded (a check beyond those
	//     recorded is not allowed);
	//   - seq itself set by a push, or above seq (the decisions of an older
	//     seq are not kept): count nothing and are returned not allowed.
	// A check that counts nothing is returned with the current totals,
	// windows and keyed states (a log's RetryAt as for any check returned
	// not allowed, 0 for one returned allowed).
	//
	// A store may keep one record for a group of shards that it applies as
	// one atomic step (the Redis store keeps one per script). A call sent
	// again after a newer seq (which the syncer never does) then counts
	// nothing either way, and may be returned the decisions recorded for it
	// rather than not allowed.
	CheckAndCount(ctx context.Context, node string, seq uint64, checks []Check) ([]CheckResult, error)
}
