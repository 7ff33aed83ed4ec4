package postgres_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ratesync/ratesync/internal/strategytest"
	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/postgres"
)

// migrateTo brings a fresh database to schema version (the default Config's
// names) as a release whose last migration was version left it: the first
// version files of migrations/, each recorded in the version table.
func migrateTo(t *testing.T, pool *pgxpool.Pool, version int) {
	t.Helper()
	ctx := context.Background()
	files, err := filepath.Glob("migrations/*.sql")
	if err != nil || len(files) < version {
		t.Fatalf("migrations: %v, %d files for version %d", err, len(files), version)
	}
	slices.Sort(files)
	render := strings.NewReplacer("{{counters}}", "public.ratesync_counters", "{{lanes}}", "public.ratesync_lanes",
		"{{check}}", "public.ratesync_counters_check", "{{buckets}}", "public.ratesync_counters_buckets",
		"{{bucket_add}}", "public.ratesync_counters_bucket_add")
	if _, err := pool.Exec(ctx, `CREATE TABLE public.ratesync_counters_migrations (
		version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	for i, f := range files[:version] {
		sql, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, render.Replace(string(sql))); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO public.ratesync_counters_migrations (version, name) VALUES ($1, $2)`, i+1, filepath.Base(f)); err != nil {
			t.Fatal(err)
		}
	}
}

// oldCheck runs one check (cost 1, limit 10 per minute, sliding) of key in
// namespace "old" as a node of a release before migration 004 does: with
// the 13 arguments of the function of 002 and 003. It returns whether the
// check passed and the count of the current window after it.
func oldCheck(t *testing.T, pool *pgxpool.Pool, seq uint64, key string, now time.Time) (bool, float64) {
	t.Helper()
	size := time.Minute
	cur := strategy.WindowStart(now, size).UnixMilli()
	var (
		applied   bool
		allowed   []bool
		curs, prv []float64
	)
	err := pool.QueryRow(context.Background(),
		`SELECT applied, allowed, cur, prev FROM public.ratesync_counters_check($1, $2::numeric, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`,
		"old-node", seq, []string{"old", "old"}, []int64{60000, 60000}, []int64{cur - 60000, cur}, [][]byte{[]byte(key), []byte(key)},
		[]bool{false, true}, []float64{1}, []int32{1}, []int32{2}, []int32{1}, []float64{strategy.Weight(now, size)}, []float64{10},
	).Scan(&applied, &allowed, &curs, &prv)
	if err != nil {
		t.Fatalf("check with the function of the previous release: %v", err)
	}
	return applied && allowed[0], curs[0]
}

// oldCheckBody is the definition of the 13-argument check function.
func oldCheckBody(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var def string
	if err := pool.QueryRow(context.Background(), `SELECT pg_get_functiondef(p.oid) FROM pg_proc p
		WHERE p.pronamespace = 'public'::regnamespace AND p.proname = 'ratesync_counters_check' AND p.pronargs = 13`).Scan(&def); err != nil {
		t.Fatal(err)
	}
	return def
}

func schemaVersion(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var v int
	if err := pool.QueryRow(context.Background(), `SELECT max(version) FROM public.ratesync_counters_migrations`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// A store migrated before migration 003 (the per-row function of 002) gets
// the set-based function when a node of this version starts, and keeps its
// counts.
func TestUpgradeFrom002ReplacesTheCheckFunction(t *testing.T) {
	_, pool := newDB(t)
	ctx := context.Background()
	migrateTo(t, pool, 2)
	now := strategytest.Base.Add(30 * time.Second)
	if ok, n := oldCheck(t, pool, 1, "k", now); !ok || n != 1 {
		t.Fatalf("check at version 2: allowed %v, count %v; want allowed, 1", ok, n)
	}
	if strings.Contains(oldCheckBody(t, pool), "OPEN walk") {
		t.Fatal("setup: the function is already migration 003's")
	}
	s, err := postgres.New(ctx, pool, postgres.Config{})
	if err != nil {
		t.Fatalf("New on a store at version 2: %v", err)
	}
	if v := schemaVersion(t, pool); v != migrationCount(t) {
		t.Fatalf("schema version %d after New, want %d", v, migrationCount(t))
	}
	if !strings.Contains(oldCheckBody(t, pool), "OPEN walk") {
		t.Fatal("New on a store at version 2 left the function of migration 002")
	}
	res, err := s.CheckAndCount(ctx, "n", 2, []strategy.Check{{Namespace: "old", Key: "k", Cost: 1, Now: now,
		Limits: []strategy.CheckLimit{{WindowSize: time.Minute, Limit: 10}}}})
	if err != nil {
		t.Fatal(err)
	}
	if !res[0].Allowed || res[0].Totals[0].Current != 2 {
		t.Fatalf("after the upgrade: %+v, want allowed with the count 2", res[0])
	}
}

// A store of the previous release (version 3), used by a role that may
// not create anything: that role cannot migrate it (New fails and changes
// nothing); once its owner has, the counts are kept, nodes of the previous
// release still running keep checking with the function they know, and the
// role uses the buckets table with the rights it had on the counters table.
func TestUpgradeFrom003AddsBuckets(t *testing.T) {
	p, owner := newDB(t)
	ctx := context.Background()
	migrateTo(t, owner, 3)
	now := strategytest.Base.Add(30 * time.Second)
	if ok, n := oldCheck(t, owner, 1, "k", now); !ok || n != 1 {
		t.Fatalf("check at version 3: allowed %v, count %v; want allowed, 1", ok, n)
	}
	app := appRole(t, p, owner, "public.ratesync_counters", "public.ratesync_lanes")
	if _, err := postgres.New(ctx, app, postgres.Config{}); err == nil || !strings.Contains(err.Error(), "004_buckets.sql") {
		t.Fatalf("New as a role without CREATE on a store at version 3: err = %v, want one naming migration 004", err)
	}
	if v := schemaVersion(t, owner); v != 3 {
		t.Fatalf("schema version %d after a failed migration, want 3", v)
	}
	if _, err := postgres.New(ctx, owner, postgres.Config{}); err != nil {
		t.Fatalf("New on a store at version 3: %v", err)
	}
	if v := schemaVersion(t, owner); v != migrationCount(t) {
		t.Fatalf("schema version %d after New, want %d", v, migrationCount(t))
	}
	if ok, n := oldCheck(t, app, 2, "k", now); !ok || n != 2 {
		t.Fatalf("check of a node of the previous release after the upgrade: allowed %v, count %v; want allowed, 2", ok, n)
	}
	s, err := postgres.New(ctx, app, postgres.Config{})
	if err != nil {
		t.Fatalf("New as the role after the upgrade: %v", err)
	}
	if got := mustWindow(t, s, "old", "k", strategy.WindowStart(now, time.Minute), time.Minute); got != 2 {
		t.Fatalf("count of the previous release's key: %v, want 2", got)
	}
	useEverything(t, s, 10)
}
