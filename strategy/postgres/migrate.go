package postgres

import (
	"context"
	"embed"
	"fmt"
	"hash/fnv"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The schema is built by the numbered files of migrations/, applied in
// order, each with the row that records it in the version table. A file is
// never changed once released: a change is a new file. Every migration
// must be able to run inside a transaction (no CREATE INDEX CONCURRENTLY).
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

// migrate brings the schema up to the latest version in one transaction,
// on one connection, that first takes a transaction-level advisory lock:
// nodes starting at once migrate one after the other, the first applies
// what is missing and the others find nothing left to do. The lock ends
// with the transaction, however it ends (no unlock to forget, nothing left
// on a pooled server connection behind PgBouncer), and a failed migration
// leaves the schema as it was.
func migrate(ctx context.Context, pool *pgxpool.Pool, cfg Config, n names) error {
	all, err := migrations()
	if err != nil {
		return err
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return dbErr(ctx, "begin migration", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) // after Commit: does nothing
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockKey(cfg)); err != nil {
		return dbErr(ctx, "take the migration lock", err)
	}
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
	var current int
	if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM "+n.versions).Scan(&current); err != nil {
		return dbErr(ctx, "read the schema version", err)
	}
	if current > len(all) {
		return fmt.Errorf("postgres: schema %s is at version %d, newer than this build knows (%d): upgrade this node", cfg.Schema, current, len(all))
	}
	for _, m := range all[current:] {
		if _, err := tx.Exec(ctx, n.render(m.sql)); err != nil {
			return dbErr(ctx, "apply migration "+m.name, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+n.versions+" (version, name) VALUES ($1, $2)", m.version, m.name); err != nil {
			return dbErr(ctx, "record migration "+m.name, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return dbErr(ctx, "commit migration", err)
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
