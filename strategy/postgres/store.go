// Package postgres is a strategy.Strategy kept in PostgreSQL: the central
// store of counters for a cluster of nodes (Kong's "cluster" strategy). It
// also implements strategy.PushCounter and strategy.Checker, so that
// synchronous namespaces make one round trip per batch of hits or checks,
// and strategy.BucketStore: it keeps buckets, anchored windows and sliding
// logs, applies their diffs with a push and decides their limits (and
// window limits with a precision) in CheckAndCount.
//
// It owns its schema and the SQL that reads and writes it: the schema is
// created or migrated (migrations/001_schema.sql and any numbered migration
// after it, embedded in the binary, applied in one transaction holding an
// advisory lock, so that nodes starting at once migrate once, and a failed
// migration changes nothing) by New when the
// server answers, else by the first call that reaches it: a store starts
// while PostgreSQL is down, and no statement runs on a schema that is not
// migrated. It does not own the connection pool (the caller's, never
// closed here), nor when to push, fetch or purge (the syncer decides that).
//
// Schema (names from Config):
//
//	ratesync_counters(namespace text, window_size bigint, window_start bigint,
//	                  key bytea, count double precision,
//	                  PRIMARY KEY (namespace, window_size, window_start, key))
//	ratesync_lanes(node text PRIMARY KEY, seq numeric(20,0), updated_at timestamptz,
//	                  decided numeric(20,0), decisions boolean[])
//	ratesync_counters_buckets(namespace text, key bytea, kind smallint,
//	                  window_ms bigint, at_ms bigint, level double precision,
//	                  rate double precision,
//	                  PRIMARY KEY (namespace, key, kind, window_ms))
//	ratesync_counters_anchored(namespace text, key bytea, window_ms bigint,
//	                  at_ms bigint, level double precision,
//	                  PRIMARY KEY (namespace, key, window_ms))
//	ratesync_counters_logs(namespace text, key bytea, window_ms bigint,
//	                  id bigint (identity), newest_ms bigint,
//	                  sum double precision, entries integer,
//	                  PRIMARY KEY (namespace, key, window_ms))
//	ratesync_counters_logentries(log_id bigint, at_ms bigint,
//	                  cost double precision, PRIMARY KEY (log_id, at_ms))
//	ratesync_counters_migrations(version, name, applied_at)
//	ratesync_counters_check(...): the function behind CheckAndCount
//	ratesync_counters_bucket_add(...): the function that applies bucket,
//	                  anchored and log diffs
//
// Window starts and sizes are bigint milliseconds (no 2038 overflow, unlike
// Kong's int columns) and counts double precision (fractional hits and
// refunds). Keys are bytea: PostgreSQL text cannot hold NUL or invalid
// UTF-8, and every key the library accepts is stored and returned
// byte-exact. Namespaces and lane names (Batch.Node) are text: they must be
// valid UTF-8 without NUL, or the call fails with an error naming them.
// Batch.Seq is a uint64 stored exactly in numeric(20,0).
//
// A bucket is one row: its state (strategy.BucketState's At and Level) and
// the rate it last drained at, which tells Purge when it is empty. Bucket
// diffs and bucket limits are computed with internal/arith's arithmetic, in
// double precision, in the order internal/arith's Level, BucketAdd and
// arith.WindowFits write it, so that the store decides as a node does,
// bit for bit (migrations/001_schema.sql). Anchored windows and logs are
// kept the same way, with internal/arith's
// arithmetic:
//
//   - an anchored window is one row, its opening instant and count; a key
//     whose window closed keeps its row, a closed window, until Purge;
//   - a sliding log is a header row, which holds the log's running sum
//     (arith.Log's Sum: added to by each hit, subtracted from entry by
//     entry, oldest first, as entries stop weighing, and exactly 0 once the
//     log is empty), its number of entries and its newest instant, plus
//     one row per entry: the cost admitted at one millisecond, hits of the
//     same millisecond merged. A hit trims the log (deletes the entries
//     that stopped weighing, a range of the entries' primary key, and
//     subtracts their costs), then adds or changes one entry row and the
//     header; no statement rewrites a whole log, and only a denied check
//     that the log refuses reads its entries, oldest first, as far as
//     arith.RetryAt needs. Writers of a log's entries hold its
//     header's row lock. A log holds at most one entry per millisecond of
//     its window, and checks keep the costs of its entries that weigh at
//     most Limit: with costs of 1 or more, at most Limit entries (pushes
//     may add more, as a bucket goes into debt). Entries that stopped
//     weighing stay until a hit on the log or Purge deletes them;
//   - a window limit with a precision reads the Depth windows of its
//     Precision, rows of the counters table like any other (the current
//     one created when absent), and counts in the current one only.
//
// Every value is a bind parameter; SQL text holds only the validated,
// quoted names of Config. A push is one statement (one round trip, one
// transaction) that records the lane's seq, applies the batch's bucket,
// anchored and log diffs and upserts the batch's counters from arrays, at
// most once per (Node, Seq). A check call records, in the lane's row, its
// seq again (decided) and its checks' decisions, which a retry of the same
// call gets instead of new ones (see CheckAndCount). Writers lock the
// lane's row, then bucket
// rows, anchored windows, logs' headers, then counter rows, each table in
// one order, so concurrent pushes and checks never deadlock.
//
// Purge deletes, in batches of Config.PurgeBatch rows, the windows that
// started before the window preceding the previous one (it keeps current,
// previous and one spare window for nodes whose clock lags), the buckets
// that are empty, the anchored windows that are closed, the entries of
// logs that stopped weighing (and the logs left empty), and lanes unused
// for Config.LaneTTL. The syncer keeps a precision limit's windows by
// purging their size as of an earlier instant.
//
// The pool may use any pgx QueryExecMode (behind PgBouncer in transaction
// mode, one without server-side prepared statements, as pgx requires).
// The migration needs CREATE on the database when Config.Schema does not
// exist yet, and CREATE on the schema; later starts need neither. A
// role that only uses the store needs SELECT, INSERT, UPDATE and DELETE on
// the six tables and SELECT on the version table.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ratesync/ratesync/strategy"
)

var (
	_ strategy.Strategy    = (*Store)(nil)
	_ strategy.PushCounter = (*Store)(nil)
	_ strategy.Checker     = (*Store)(nil)
	_ strategy.BucketStore = (*Store)(nil)
)

// Store is a strategy kept in PostgreSQL. It is safe for concurrent use
// (its state is the database; each call takes a connection from the pool).
// Its zero value is not usable: use New.
type Store struct {
	pool *gate // the caller's pool, behind the schema's migration
	cfg  Config
	q    queries
}

// New returns a store on pool configured by cfg (zero fields mean the
// documented defaults), and creates or migrates its schema when the server
// answers within ctx. It fails for an invalid cfg (an error naming the
// field), when the server refuses the migration (a privilege missing, a
// schema in the way or newer than this build: the error says which), and
// with ctx.Err() when ctx is canceled. When the server cannot be reached
// (a connection that fails, or ctx's deadline passing first), New returns
// the store all the same: its calls fail as the server's do until one
// reaches it, and that one migrates the schema first (Ready waits for it).
// The pool stays the caller's.
func New(ctx context.Context, pool *pgxpool.Pool, cfg Config) (*Store, error) {
	if pool == nil {
		return nil, fmt.Errorf("postgres: pool = nil: a *pgxpool.Pool is required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if _, err := migrations(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	n := cfg.names()
	s := &Store{pool: &gate{pool: pool, cfg: cfg, n: n}, cfg: cfg, q: newQueries(n)}
	err := s.pool.ready(ctx)
	switch {
	case err == nil:
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		return nil, ctx.Err()
	case refused(err):
		return nil, err
	}
	return s, nil
}

// Ready returns nil once the schema is migrated, and otherwise migrates it
// within ctx (or waits for the call migrating it): the error of a server
// that cannot be reached or refuses, or ctx.Err(). Calls need not call it:
// each runs it first.
func (s *Store) Ready(ctx context.Context) error { return s.pool.ready(ctx) }

// Config returns the store's configuration with defaults applied.
func (s *Store) Config() Config { return s.cfg }

func quote(name string) string { return pgx.Identifier{name}.Sanitize() }

// checkText reports whether s can be stored in a text column: PostgreSQL
// text holds valid UTF-8 without NUL.
func checkText(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

const textRule = "must be valid UTF-8 without NUL (stored as PostgreSQL text)"

func checkNode(node string) error {
	if !checkText(node) {
		return fmt.Errorf("postgres: node %q: %s", node, textRule)
	}
	return nil
}

func checkNamespace(ns string) error {
	if !checkText(ns) {
		return fmt.Errorf("postgres: namespace %q: %s", ns, textRule)
	}
	return nil
}

func checkSize(key string, size time.Duration) error {
	if size <= 0 || size%time.Millisecond != 0 {
		return fmt.Errorf("postgres: key %q: window size %v: must be > 0 and whole milliseconds", key, size)
	}
	return nil
}

func checkDiff(d strategy.Diff) error {
	if err := checkNamespace(d.Namespace); err != nil {
		return err
	}
	if math.IsNaN(d.Value) || math.IsInf(d.Value, 0) {
		return fmt.Errorf("postgres: diff of key %q: value %v: must be finite", d.Key, d.Value)
	}
	return checkSize(d.Key, d.WindowSize)
}

// seqParam is a uint64 as numeric, exact over its whole range.
func seqParam(seq uint64) pgtype.Numeric {
	return pgtype.Numeric{Int: new(big.Int).SetUint64(seq), Valid: true}
}

// queries are the store's SQL statements, built once from the names.
type queries struct {
	push, pushCount, readRows       string
	pushBuckets, pushCountBuckets   string // with bucket diffs
	get, getKeys, window            string
	getBuckets                      string
	check                           string
	purge, purgeLanes, purgeBuckets string
	purgeAnchored                   string
	purgeLogs, trimLogs, putLogs    string
}

func newQueries(n names) queries {
	return queries{
		push:             pushSQL(n, false),
		pushCount:        pushCountSQL(n, false),
		pushBuckets:      pushSQL(n, true),
		pushCountBuckets: pushCountSQL(n, true),
		readRows:         readRowsSQL(n),
		get:              getSQL(n, false),
		getKeys:          getSQL(n, true),
		window:           windowSQL(n),
		getBuckets:       getBucketsSQL(n),
		check:            checkSQL(n),
		purge:            purgeSQL(n),
		purgeLanes:       purgeLanesSQL(n),
		purgeBuckets:     purgeBucketsSQL(n),
		purgeAnchored:    purgeAnchoredSQL(n),
		purgeLogs:        purgeLogsSQL(n),
		trimLogs:         trimLogsSQL(n),
		putLogs:          putLogsSQL(n),
	}
}
