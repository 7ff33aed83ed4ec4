package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The schema is built by the numbered files of migrations/, applied in
// order, each with the row that records it in the version table:
// 001_schema.sql creates every table and function. Once a
// file has built schemas in use it is never changed: a change to the
// schema is a new file after it. Every migration must be able to run
// inside a transaction (no CREATE INDEX CONCURRENTLY).
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

type migration struct {
	version int
	name    string
	sql     string // with {{...}} placeholders
}

// migrations returns the embedded migrations sorted by version. Their names
// are NNN_name.sql with versions 1, 2, 3... without gaps.
func migrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || !strings.HasSuffix(e.Name(), ".sql") {
			return nil, fmt.Errorf("postgres: migration file %q: name must be NNN_name.sql", e.Name())
		}
		b, err := migrationFiles.ReadFile(path.Join("migrations", e.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: e.Name(), sql: string(b)})
	}
	slices.SortFunc(out, func(a, b migration) int { return a.version - b.version })
	for i, m := range out {
		if m.version != i+1 {
			return nil, fmt.Errorf("postgres: migration %q: version %d, want %d (no gaps or duplicates)", m.name, m.version, i+1)
		}
	}
	return out, nil
}

// render replaces the placeholders of a migration with the quoted names.
func (n names) render(sql string) string {
	return strings.NewReplacer(
		"{{counters}}", n.counters,
		"{{lanes}}", n.lanes,
		"{{check}}", n.check,
		"{{buckets}}", n.buckets,
		"{{bucket_add}}", n.bucketAdd,
		"{{anchored}}", n.anchored,
		"{{logs}}", n.logs,
		"{{log_entries}}", n.logEntries,
	).Replace(sql)
}

// lockKey is the advisory lock that serializes migrations of one store
// (schema and table), across every process sharing the database.
func lockKey(cfg Config) int64 {
	h := fnv.New64a()
	h.Write([]byte("ratesync/strategy/postgres:" + cfg.Schema + "." + cfg.Table))
	return int64(h.Sum64())
}

// errNewerSchema marks a schema recorded at a version this build does not
// know, and errOtherSchema one whose recorded migrations are not this
// build's: the server's data refuses this node, as a missing privilege does.
var (
	errNewerSchema = errors.New("newer than this build knows")
	errOtherSchema = errors.New("made by migrations this build does not have")
)

// migrate brings the schema up to the latest version in one transaction,
// on one connection, that first takes a transaction-level advisory lock:
// nodes starting at once migrate one after the other, the first applies
// what is missing and the others find nothing left to do. The lock ends
// with the transaction, however it ends (no unlock to forget, nothing left
// on a pooled server connection behind PgBouncer), and a failed migration
// leaves the schema as it was.
// It returns the versions the schema was at and is at now.
func migrate(ctx context.Context, pool *pgxpool.Pool, cfg Config, n names) (from, to int, err error) {
	all, err := migrations()
	if err != nil {
		return 0, 0, err
	}
	from, err = migrateTx(ctx, pool, cfg, n, all)
	return from, len(all), err
}

func migrateTx(ctx context.Context, pool *pgxpool.Pool, cfg Config, n names, all []migration) (int, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return 0, dbErr(ctx, "begin migration", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) // after Commit: does nothing
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockKey(cfg)); err != nil {
		return 0, dbErr(ctx, "take the migration lock", err)
	}
	if err := ensureVersionTable(ctx, tx, cfg, n); err != nil {
		return 0, err
	}
	var current int
	if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM "+n.versions).Scan(&current); err != nil {
		return 0, dbErr(ctx, "read the schema version", err)
	}
	if err := sameMigrations(ctx, tx, cfg, n, all[:min(current, len(all))]); err != nil {
		return 0, err
	}
	if current > len(all) {
		return 0, fmt.Errorf("postgres: schema %s is at version %d, %w (%d): upgrade this node", cfg.Schema, current, errNewerSchema, len(all))
	}
	for _, m := range all[current:] {
		if _, err := tx.Exec(ctx, n.render(m.sql)); err != nil {
			return 0, dbErr(ctx, "apply migration "+m.name, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+n.versions+" (version, name) VALUES ($1, $2)", m.version, m.name); err != nil {
			return 0, dbErr(ctx, "record migration "+m.name, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, dbErr(ctx, "commit migration", err)
	}
	return current, nil
}

// ensureVersionTable creates the schema and its version table when they
// are missing.
func ensureVersionTable(ctx context.Context, tx pgx.Tx, cfg Config, n names) error {
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", cfg.Schema).Scan(&exists); err != nil {
		return dbErr(ctx, "look up schema "+cfg.Schema, err)
	}
	if !exists { // CREATE SCHEMA needs a privilege that using one does not
		if _, err := tx.Exec(ctx, "CREATE SCHEMA "+quote(cfg.Schema)); err != nil {
			return dbErr(ctx, "create schema "+cfg.Schema, err)
		}
	}
	if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_tables WHERE schemaname = $1 AND tablename = $2)",
		cfg.Schema, cfg.Table+versionSuffix).Scan(&exists); err != nil {
		return dbErr(ctx, "look up the version table", err)
	}
	if !exists {
		if _, err := tx.Exec(ctx, `CREATE TABLE `+n.versions+` (
			version    integer     PRIMARY KEY,
			name       text        NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now()
		)`); err != nil {
			return dbErr(ctx, "create the version table", err)
		}
	}
	return nil
}

// sameMigrations checks that the version table records applied, this
// build's migrations, by name: a schema made by other migrations (a build
// whose files differ) is refused, naming the first that differs, rather
// than taken as current.
func sameMigrations(ctx context.Context, tx pgx.Tx, cfg Config, n names, applied []migration) error {
	rows, err := tx.Query(ctx, "SELECT version, name FROM "+n.versions+" ORDER BY version")
	if err != nil {
		return dbErr(ctx, "read the applied migrations", err)
	}
	recorded, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
		Version int
		Name    string
	}])
	if err != nil {
		return dbErr(ctx, "read the applied migrations", err)
	}
	for i, m := range applied {
		if i >= len(recorded) || recorded[i].Version != m.version || recorded[i].Name != m.name {
			got := "nothing"
			if i < len(recorded) {
				got = fmt.Sprintf("%d %q", recorded[i].Version, recorded[i].Name)
			}
			return fmt.Errorf("postgres: schema %s, table %s: version %d should record migration %q and records %s: the schema was %w; drop its tables (or name another table) and start again", cfg.Schema, n.versions, m.version, m.name, got, errOtherSchema)
		}
	}
	return nil
}

// dbErr returns ctx.Err() unchanged when ctx is done (the cause of err), and
// otherwise err wrapped with what failed.
func dbErr(ctx context.Context, what string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	return fmt.Errorf("postgres: %s: %w", what, err)
}

// gate is the store's way to the caller's pool. Every statement of the
// store goes through it, and none runs before the schema is migrated: the
// first call that reaches the server migrates it, once. New tries first;
// when the server cannot be reached then, the store starts all the same (as
// a Redis store loads its scripts on first use), and its calls fail as
// calls to an unreachable server until one migrates.
type gate struct {
	pool *pgxpool.Pool
	cfg  Config
	n    names

	migrated atomic.Bool // the schema is at this build's version

	mu      sync.Mutex
	running *attempt // the migration under way, nil when none
	refusal string   // the last refusal logged, "" when none since the last success
}

// attempt is one migration; its callers and those that wait for it read
// err once done is closed.
type attempt struct {
	done chan struct{}
	err  error
}

// ready returns nil once the schema is migrated. Before that, one call at
// a time migrates it, within its own ctx; the calls that arrive meanwhile
// wait for that migration, within theirs, and share its outcome: they fail
// as it did when the server could not be reached or refused, and try
// themselves when it ended because its caller gave up. A ctx that ends
// while waiting returns ctx.Err() unchanged.
func (g *gate) ready(ctx context.Context) error {
	for {
		if g.migrated.Load() {
			return nil
		}
		g.mu.Lock()
		a := g.running
		if a == nil {
			a = &attempt{done: make(chan struct{})}
			g.running = a
			g.mu.Unlock()
			a.err = g.migrate(ctx)
			g.mu.Lock()
			g.running = nil
			g.mu.Unlock()
			close(a.done)
			return a.err
		}
		g.mu.Unlock()
		select {
		case <-a.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		if a.err == nil {
			return nil
		}
		if !errors.Is(a.err, context.Canceled) && !errors.Is(a.err, context.DeadlineExceeded) {
			return a.err
		}
		// Its caller gave up (or ran out of time): try within ctx.
	}
}

// migrate runs one migration and records its outcome: the schema migrated,
// logged at INFO when it changed; a refusal of the server logged at WARN,
// once for each new reason.
func (g *gate) migrate(ctx context.Context) error {
	from, to, err := migrate(ctx, g.pool, g.cfg, g.n)
	log := g.cfg.logger()
	if err == nil {
		g.migrated.Store(true)
		g.mu.Lock()
		g.refusal = ""
		g.mu.Unlock()
		if from != to {
			log.Info("postgres: schema migrated", "schema", g.cfg.Schema, "table", g.cfg.Table, "from_version", from, "to_version", to)
		}
		return nil
	}
	if refused(err) {
		g.mu.Lock()
		again := g.refusal == err.Error()
		g.refusal = err.Error()
		g.mu.Unlock()
		if !again {
			log.Warn("postgres: the server refuses the schema migration: every call fails until it is fixed", "schema", g.cfg.Schema, "table", g.cfg.Table, "err", err)
		}
	}
	return err
}

// refused reports whether err, which ended a migration, is the server's
// refusal (a privilege missing, a schema in the way, a schema newer than
// this build) rather than the server out of reach: a connection that
// failed or broke, a timeout, a server starting, stopping or out of
// resources, a transaction to run again.
func refused(err error) bool {
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code[:min(2, len(pe.Code))] { // the SQLSTATE's class
		case "08", "40", "53", "57", "58":
			return false
		}
		return true
	}
	return errors.Is(err, errNewerSchema) || errors.Is(err, errOtherSchema)
}

// Query, QueryRow, Exec and Begin are the pool's, once the schema is
// migrated.

func (g *gate) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := g.ready(ctx); err != nil {
		return nil, err
	}
	return g.pool.Query(ctx, sql, args...)
}

func (g *gate) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := g.ready(ctx); err != nil {
		return errRow{err}
	}
	return g.pool.QueryRow(ctx, sql, args...)
}

func (g *gate) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := g.ready(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	return g.pool.Exec(ctx, sql, args...)
}

func (g *gate) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := g.ready(ctx); err != nil {
		return nil, err
	}
	return g.pool.Begin(ctx)
}

// errRow is a row whose Scan returns err.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
