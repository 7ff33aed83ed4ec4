// Package redis is a strategy.Strategy kept in Redis: standalone, Sentinel
// (a failover client) or Cluster, through any goredis.UniversalClient. It
// owns the layout of counters in Redis, the Lua scripts that change them and
// the records that make each batch count at most once. It does not own the
// client (the caller makes, configures and closes it), nor anything about
// limits, syncing or configuration files.
//
// # Layout
//
// A window of a namespace is split into Config.Shards hashes by a hash of
// the counter's key; each hash maps the keys (fields, stored byte-exact) of
// one (namespace, window size, window start, shard) to their counts
// (HINCRBYFLOAT: fractional and negative values work). Every key of a
// namespace shard carries the hash tag {Prefix:namespace:shard}, so all
// windows of a shard and its lane records share one Cluster slot, and the
// shards of a busy window spread over 16 (by default) slots:
//
//	{ratesync:api:3}:60000:1700000040000   hash: key -> count
//	{ratesync:api:3}:lane:api|node-a/9f2c   last Seq applied for that node (and its decisions)
//	{ratesync:api:3}:b:4:1000:user:42       bucket (kind 4, window 1s) of key user:42
//	{ratesync:api:3}:a:1000:user:42         anchored window (1s) of key user:42
//	{ratesync:api:3}:l:1000:user:42         sliding log (1s) of key user:42: its entries
//	{ratesync:api:3}:ls:1000:user:42        the same log's newest entry and sum
//
// A bucket (strategy.BucketStore) is one small string per (key, kind,
// window) in the shard of its key: "at level rate" (see bucket.go), so the
// scripts change it in the same slot and atomic step as the windows and
// lane record of that shard. An anchored window (strategy.KindAnchored) is
// one such string too: "at level", the instant it opened and its count
// (about 120 bytes with its key, by MEMORY USAGE on Redis 7.0).
//
// A sliding log (strategy.KindLog) is two keys of the same shard: a sorted
// set of its entries, one member "at:cost" per millisecond that holds
// hits (score at; the hits of one millisecond are merged into one member),
// and a string "newest sum", the newest entry's instant and the sum of the
// entries' costs, kept as arith.Log keeps Sum so that every decision is
// the memory store's, bit for bit. A check trims the entries that stopped
// weighing (ZRANGEBYSCORE and ZREMRANGEBYSCORE up to now - window: each
// entry is read and removed once) and adds its hit at its millisecond, so
// it costs O(log n) in the n entries of the log, never a walk of them; a
// denied check reads the oldest entries by rank, in chunks, only as far as
// the request must wait (its RetryAt). A log holds at most one entry per
// millisecond of its window that admitted hits (and no more entries than
// its limit over the smallest cost), plus pushed entries not yet trimmed:
// about 30 to 50 bytes an entry up to 128 entries (a listpack), about 130
// beyond (a skiplist), and some 120 bytes for the sum's key: a log of
// 10,000 entries takes some 1.3 MB. Precision limits use the windows'
// hashes: the sub-windows of size Precision are the namespace's windows of
// that size, read Depth deep.
//
// # At most once
//
// PushDiffs splits a batch by namespace shard and runs one script per shard
// group (push.lua), all in one pipelined round trip (go-redis splits a
// Cluster pipeline per node). On a client of one server (standalone,
// Sentinel), consecutive groups of up to 256 diffs or checks in all share
// one script instead, which saves Redis the fixed cost of a script call per
// group; a server that refuses keys of several slots in one script (a proxy
// of a sharded deployment: CROSSSLOT) turns that off for the store. For
// each group, the script compares the batch's Seq with the group's lane
// record (last Seq applied by b.Node in that shard), and when it is above
// it, applies the increments and bucket diffs, sets the TTLs and records
// the Seq, in one atomic step. A retry of a batch, whole or with late diffs
// dropped, therefore applies exactly the groups its first try did not: a
// lost reply never counts anything twice, and a batch that never landed is
// applied by its retry. Seq is compared exactly for every uint64 (as two
// 10-digit halves, since Lua numbers are doubles). The records are per
// shard, so the guarantee relies on what the syncer does anyway: one batch
// at a time per Node, in increasing Seq order, retries before newer
// batches.
//
// CheckAndCount (check.lua) keeps one lane record per script instead: the
// record of the shard of the script's first group stands for every group
// of the script, which Redis runs as one atomic step. Its GET and SET are
// then made once per call rather than once per shard, and the checks are
// still each counted and decided exactly once:
//
//   - every try of a call is the same scripts of the same groups, in the
//     same order: the groups (one per namespace shard, in the order of
//     first use) follow from the checks, which a retry repeats in the same
//     order (strategy.Checker), and their split into scripts from the
//     groups and from whether the store merges groups; it stops merging
//     only when a server refuses a script of several slots (CROSSSLOT),
//     which ran nothing, and no script of several groups ever runs on such
//     a server, while the scripts of one group that did run there keep the
//     record of their own shard, as they keep it after;
//   - the syncer sends a lane's calls one at a time, in Seq order, every
//     try of a Seq before any newer Seq, pushes and checks numbered from
//     one sequence; so when a try of Seq q reaches a script's record, the
//     record holds q only when an earlier try of that very script applied
//     it (the groups of a call are distinct shards, so no other script of
//     q records there), and never more than q;
//   - so a script applies when its record is below q, and otherwise counts
//     nothing and replies the decisions the record holds: each of its
//     groups applies exactly once. The records of the other shards of a
//     check call are not read or written; pushes keep their own per group,
//     which hold older Seqs than any try of a newer call.
//
// A call repeated after a newer one (which the syncer never sends) counts
// nothing either way, and is replied the decisions the record of its first
// shard still holds, else none (not allowed).
//
// A lane record is a string: the Seq as 20 decimal digits, then, when
// check.lua wrote it, one character per check of its script in order, '1'
// for a check that passed and '0' for one that did not, the groups' apart
// by '/' (pushes write the Seq alone). The same SET writes both, so a
// check retried with the same Seq (its reply lost, or go-redis resending
// the script) counts nothing again and gets the decisions made the first
// time. Scripts compare only the first 20 characters, so records of every
// form are read by every version, and lane records are per node name, new
// at each start of a node: nodes of different versions never share one.
//
// A script the server lost (restart, failover, SCRIPT FLUSH) is reloaded on
// NOSCRIPT and the groups that failed are sent again; that is safe because
// each group is idempotent by its Seq record.
//
// push.lua and check.lua (CheckAndCount's) each start with lane.lua, their
// shared prelude: the Seq comparison and record, the walk over the groups
// of a call and the increments they make. Each script sent is the prelude
// followed by its body (scripts.go), so each still runs alone.
//
// # Cost
//
// A call of CheckAndCount whose checks have one plain window limit each
// (what Allow of a synchronous namespace sends) makes, inside its script:
// the lane record's GET and SET, once; then, for a shard group of up to 4
// checks of an integer cost (most groups of a call over many keys), per
// check: counted first (HINCRBY: the count is taken back, HINCRBY of minus
// the cost or HDEL, when the check does not pass) and a read of the
// previous window (HGET), in a loop the script runs before it makes the
// functions its other paths need; for a larger group, one read of each
// window and one write of the current one, whatever the number of its
// checks (HMGET of the group's fields, and HSET of its sums); and a PTTL
// (and PEXPIRE) only where a field is new. The groups of the loop go
// first in the call. The call's windows, limits and costs go once per
// call (its plans: check.lua), and each check adds its key alone to the
// arguments. A synchronous batch of 12 decisions over 10,000 keys and 16
// shards so costs some 26 commands, about 2 per decision, and Redis some
// 400,000 instructions (BENCHMARKS.md, sections 10.2 and 10.3).
// Check.lua's other path (several limits, a precision, keyed limits)
// reads and writes each (hash, field) once per group as well. The scripts
// need Redis 4.0 or later (HSET of several fields, UNLINK).
//
// # Expiry and Purge
//
// A window hash of size S starting at T expires TTLMargin after T + 2S, by
// the clock of the node whose write made it (relative PEXPIRE, so the
// server's clock does not matter), and at least TTLMargin after that
// write. A window read over a longer span W (a diff's Span, the
// sub-windows of a check's precision limit) lasts until T + S + W +
// TTLMargin instead. A script sets a hash's TTL (PTTL, then PEXPIRE when
// the TTL it needs is longer: it never shortens one, as the keys of a
// shard share their window's hash, whatever the spans they are read over)
// only when one of its writes may have made a field there, so maybe the
// hash (the field held none, or HINCRBY replied its very increment, or
// HINCRBYFLOAT wrote it), or when the hash is read over a longer span than
// its size. A hash is only ever made by such a write, so every hash has
// the TTL of the write that made it, and writes to its fields after that
// cost no TTL command: the steady traffic of a window pays one PTTL per
// key and window, not one per write. (Versions before this one checked
// the TTL at every write; both run side by side on the same keys.) A lane
// record expires
// LaneTTL after the last batch it recorded, so the records of departed nodes
// go by themselves. A bucket expires a minute after it drains empty, by the
// clock of the request that last changed it (relative PX again): the same
// as holding it empty. An anchored window expires a minute after it closes,
// a log's two keys a minute after its newest entry stops weighing, by the
// same clock: an idle key costs nothing. A log whose entries all stopped
// weighing loses both keys at its next check. Purge therefore has nothing
// to do.
//
// # Redis restarted empty
//
// Counts, lane records and scripts are gone. Scripts are reloaded on the
// first NOSCRIPT. Nodes keep their local counts until their next sync: they
// push their dirty diffs and retry their in-flight batch (its lane record is
// gone, so it is applied: it was lost with the old data), then fetch, which
// sets each counter's synced part to the store's new count. Counts pushed
// before the restart are lost; the cluster converges on what was pushed
// after it plus the in-flight batches. A failover to a replica behaves the
// same for the writes it had not replicated (a script's writes replicate as
// one transaction, so a count and its Seq record are lost together).
//
// # Timeouts
//
// Config.Timeout bounds a call whose context has no deadline. How a call
// ends with its context depends on the client:
//
//   - A client that watches contexts (ContextTimeoutEnabled in the options
//     of a goredis.Client, failover client, ClusterClient or Ring, with
//     socket deadlines not disabled: ReadTimeout and WriteTimeout not -2)
//     runs the call on the caller's goroutine and bounds it itself: every
//     socket read and write ends at the context's deadline, and waits for
//     a pooled connection and between retries end when the context does. A
//     context canceled before its deadline is therefore seen between
//     commands; a reply already awaited is awaited until the deadline (or
//     the client's ReadTimeout, if sooner).
//   - With any other client (go-redis's default: ContextTimeoutEnabled
//     false), the call runs on a helper goroutine and returns as soon as its
//     context ends, deadline or cancel, while the client finishes the
//     exchange in the background within its own read and write timeouts.
//     Helpers are reused from call to call, and leave within 20s idle.
//
// A push abandoned either way may still land; its retry is then counted
// nothing.
package redis

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesync/ratesync/strategy"
)

var (
	_ strategy.Strategy    = (*Store)(nil)
	_ strategy.PushCounter = (*Store)(nil)
	_ strategy.Checker     = (*Store)(nil)
	_ strategy.BucketStore = (*Store)(nil)
)

// Store is a strategy kept in Redis. It is safe for concurrent use; its zero
// value is not: use New. It holds no resources of its own: closing the
// client ends it.
type Store struct {
	c       goredis.UniversalClient
	cfg     Config
	direct  bool        // the client bounds calls by their context: see call
	merge   atomic.Bool // a script may run several groups: see runScript
	laneTTL any         // cfg.LaneTTL in ms, boxed once for the scripts' arguments
}

// New returns a store on client configured by cfg (zero fields mean the
// defaults). It validates cfg, loads the scripts into the server (every
// node of a Cluster) and checks that the keys under cfg.Prefix are laid out
// with cfg.Shards shards, recording that layout when none is.
//
// New fails on an invalid cfg, a nil client, a server that answers with an
// error (authentication, a missing permission for SCRIPT LOAD or EVALSHA, a
// layout recorded with other Shards). When the server cannot be reached
// within cfg.Timeout, New succeeds all the same, so a node can start during
// a Redis outage: the scripts are loaded on first use.
func New(client goredis.UniversalClient, cfg Config) (*Store, error) {
	if client == nil {
		return nil, errors.New("redis: client = nil: must be a goredis client (standalone, failover or cluster)")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Store{c: client, cfg: cfg, direct: watchesContext(client), laneTTL: cfg.LaneTTL.Milliseconds()}
	_, oneServer := client.(*goredis.Client) // standalone or failover: every key on one server
	s.merge.Store(oneServer)
	err = s.call(context.Background(), nil, s.init)
	var rerr goredis.Error
	if errors.As(err, &rerr) || errors.Is(err, errLayout) {
		return nil, err
	}
	return s, nil
}

// errLayout marks a layout recorded with other settings.
var errLayout = errors.New("redis: layout mismatch")

// init loads the scripts and checks the layout record.
func (s *Store) init(ctx context.Context) error {
	if err := s.loadScripts(ctx); err != nil {
		return err
	}
	key, want := s.layoutKey(), s.layoutValue()
	set, err := s.c.SetNX(ctx, key, want, 0).Result()
	if err != nil || set {
		return wrapf(err, "SETNX %s", key)
	}
	got, err := s.c.Get(ctx, key).Result()
	if errors.Is(err, goredis.Nil) {
		return nil // deleted meanwhile
	}
	if err != nil {
		return wrapf(err, "GET %s", key)
	}
	if got != want {
		return fmt.Errorf("%w: Config.Shards = %d: the keys under Prefix %q are laid out as %q (key %q): every node sharing a prefix must use the same Shards; use another Prefix, or delete that key once no node uses the old layout",
			errLayout, s.cfg.Shards, s.cfg.Prefix, got, key)
	}
	return nil
}

func wrapf(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("redis: "+format+": %w", append(args, err)...)
}

// watchesContext reports whether client bounds each command by its
// context's deadline: go-redis's ContextTimeoutEnabled, with socket
// deadlines on. A ReadTimeout or WriteTimeout of -2 turns them off, and the
// context's deadline with them (the options of a Client hold it as -1 once
// set up; a ClusterClient's or Ring's pass it on to their node clients).
// Unknown clients do not.
func watchesContext(client goredis.UniversalClient) bool {
	switch c := client.(type) {
	case *goredis.Client: // standalone and failover clients
		o := c.Options()
		return o.ContextTimeoutEnabled && o.ReadTimeout >= 0 && o.WriteTimeout >= 0
	case *goredis.ClusterClient:
		o := c.Options()
		return o.ContextTimeoutEnabled && o.ReadTimeout >= -1 && o.WriteTimeout >= -1
	case *goredis.Ring:
		o := c.Options()
		return o.ContextTimeoutEnabled && o.ReadTimeout >= -1 && o.WriteTimeout >= -1
	}
	return false
}

// call runs fn with ctx, bounded by Config.Timeout when ctx has no deadline,
// and returns when fn does or ctx ends (see Timeouts in the package doc). A
// done ctx gives ctx.Err() unchanged; an expired Config.Timeout says so;
// other errors of fn are prefixed with "redis: " and op() (op nil: fn's
// errors as they are). op is called on errors only.
//
// When the client watches contexts (s.direct), fn runs on the caller's
// goroutine. Otherwise it runs on a helper goroutine, so that the client
// cannot hold the caller: fn must then touch nothing the caller may reuse
// once call has returned.
func (s *Store) call(ctx context.Context, op func() string, fn func(context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	cctx := ctx
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(ctx, s.cfg.Timeout)
		defer cancel()
	}
	var err error
	if s.direct {
		err = fn(cctx)
		if dl, _ := cctx.Deadline(); err != nil && !time.Now().Before(dl) {
			// The client's socket deadline was the context's, whose own
			// timer may not have fired yet: an instant, so that the checks
			// below see the context ended.
			<-cctx.Done()
		}
	} else {
		err = help(cctx, fn)
	}
	if err == nil {
		return nil
	}
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	if cerr := cctx.Err(); cerr != nil && timedOut(err) {
		if !errors.Is(err, cerr) {
			err = fmt.Errorf("%w (%w)", cerr, err)
		}
		return fmt.Errorf("redis: %s: no answer within Config.Timeout %v: %w", opName(op), s.cfg.Timeout, err)
	}
	if op == nil {
		return err
	}
	return fmt.Errorf("redis: %s: %w", op(), err)
}

func opName(op func() string) string {
	if op == nil {
		return "start" // New's call
	}
	return op()
}

// timedOut reports whether err is the end of a context or a socket deadline.
func timedOut(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.Is(err, os.ErrDeadlineExceeded)
}

// Helpers run the calls of clients that do not watch contexts. A helper
// that has run a call waits for the next one, so that busy stores reuse
// goroutines: a new goroutine per call would also grow its stack to what
// go-redis needs, by copying, on every call. A helper leaves at the second
// tick of its ticker (every helperIdle) that finds it waiting with no call
// since the first: none stays idle for 2 helperIdle. Helpers serve every
// Store; they hold nothing between calls.
const helperIdle = 10 * time.Second

type task struct {
	ctx  context.Context
	fn   func(context.Context) error
	done chan error // buffered: a helper never waits for an abandoned caller
}

var (
	helpers = make(chan *task) // idle helpers receive here
	tasks   = sync.Pool{New: func() any { return &task{done: make(chan error, 1)} }}
)

// help runs fn(ctx) on a helper and returns its error, or ctx.Err() as soon
// as ctx ends.
func help(ctx context.Context, fn func(context.Context) error) error {
	t := tasks.Get().(*task)
	t.ctx, t.fn = ctx, fn
	select {
	case helpers <- t:
	default:
		go helper(t)
	}
	select {
	case err := <-t.done:
		t.ctx, t.fn = nil, nil
		tasks.Put(t)
		return err
	case <-ctx.Done():
		return ctx.Err() // t stays with its helper, then goes
	}
}

func helper(t *task) {
	tick := time.NewTicker(helperIdle)
	defer tick.Stop()
	for {
		t.done <- t.fn(t.ctx)
		t = nil
		for idle := false; t == nil; {
			select {
			case t = <-helpers:
			case <-tick.C:
				if idle {
					return
				}
				idle = true
			}
		}
	}
}

// quote formats a counter key for an error message, cut to 64 bytes.
func quote(key string) string {
	if len(key) > 64 {
		return fmt.Sprintf("%q... (%d bytes)", key[:64], len(key))
	}
	return fmt.Sprintf("%q", key)
}

// checkSize validates a window size.
func checkSize(what string, size time.Duration) error {
	if size <= 0 || size%time.Millisecond != 0 {
		return fmt.Errorf("redis: %s: window size %v: must be > 0 and whole milliseconds", what, size)
	}
	return nil
}

// checkFinite validates a value that must be a finite number.
func checkFinite(what, field string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Errorf("redis: %s: %s = %v: must be finite", what, field, v)
	}
	return nil
}

// windowTTL returns the TTL, in ms, of the window of size starting at
// start, read in sliding windows of up to span (strategy.Diff.Span; at
// least size), as of now (all in ms): until start + size + span + margin,
// the end of the last span that reads it plus the margin, and at least
// margin. A plain window (span = size) lives until start + 2 size + margin.
func (s *Store) windowTTL(start, size, span, now int64) int64 {
	margin := s.cfg.TTLMargin.Milliseconds()
	return max(start+size+max(span, size)+margin-now, margin)
}
