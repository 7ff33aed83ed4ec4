package postgres_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/arith"

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
		"{{bucket_add}}", "public.ratesync_counters_bucket_add", "{{anchored}}", "public.ratesync_counters_anchored",
		"{{logs}}", "public.ratesync_counters_logs", "{{log_entries}}", "public.ratesync_counters_logentries")
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
	cur := arith.WindowStart(now, size).UnixMilli()
	var (
		applied   bool
		allowed   []bool
		curs, prv []float64
	)
	err := pool.QueryRow(context.Background(),
		`SELECT applied, allowed, cur, prev FROM public.ratesync_counters_check($1, $2::numeric, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`,
		"old-node", seq, []string{"old", "old"}, []int64{60000, 60000}, []int64{cur - 60000, cur}, [][]byte{[]byte(key), []byte(key)},
		[]bool{false, true}, []float64{1}, []int32{1}, []int32{2}, []int32{1}, []float64{arith.Weight(now.UnixMilli()-arith.WindowStart(now, size).UnixMilli(), size.Milliseconds())}, []float64{10},
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

// upgrade migrates a store at version from: New as app, a role that may
// not create anything, fails naming the next migration and leaves the
// schema as it was; New as owner brings it to the latest version.
func upgrade(t *testing.T, app, owner *pgxpool.Pool, from int) {
	t.Helper()
	ctx := context.Background()
	next := fmt.Sprintf("%03d_", from+1)
	if _, err := postgres.New(ctx, app, postgres.Config{}); err == nil || !strings.Contains(err.Error(), "apply migration "+next) {
		t.Fatalf("New as a role without CREATE on a store at version %d: err = %v, want one naming migration %s", from, err, next)
	}
	if v := schemaVersion(t, owner); v != from {
		t.Fatalf("schema version %d after a failed migration, want %d", v, from)
	}
	if _, err := postgres.New(ctx, owner, postgres.Config{}); err != nil {
		t.Fatalf("New on a store at version %d: %v", from, err)
	}
	if v := schemaVersion(t, owner); v != migrationCount(t) {
		t.Fatalf("schema version %d after New, want %d", v, migrationCount(t))
	}
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
	upgrade(t, app, owner, 3)
	if ok, n := oldCheck(t, app, 2, "k", now); !ok || n != 2 {
		t.Fatalf("check of a node of the previous release after the upgrade: allowed %v, count %v; want allowed, 2", ok, n)
	}
	s, err := postgres.New(ctx, app, postgres.Config{})
	if err != nil {
		t.Fatalf("New as the role after the upgrade: %v", err)
	}
	if got := mustWindow(t, s, "old", "k", arith.WindowStart(now, time.Minute), time.Minute); got != 2 {
		t.Fatalf("count of the previous release's key: %v, want 2", got)
	}
	useEverything(t, s, 10)
}

// checkOf004 runs one check (cost 1) of key in namespace "old" as a node of
// the release of migration 004 does: with the 23 arguments of its function,
// a sliding window of 10 per minute and a bucket of kind 1 (10 per minute,
// burst 10). It returns whether the check passed, the count of the window
// and the bucket's level after it.
func checkOf004(t *testing.T, pool *pgxpool.Pool, seq uint64, key string, now time.Time) (bool, float64, float64) {
	t.Helper()
	size := time.Minute
	cur := arith.WindowStart(now, size).UnixMilli()
	var (
		applied   bool
		allowed   []bool
		curs, prv []float64
		at        []int64
		level     []float64
	)
	err := pool.QueryRow(context.Background(),
		`SELECT applied, allowed, cur, prev, bucket_at, bucket_level FROM public.ratesync_counters_check(
			$1, $2::numeric, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23)`,
		"node-004", seq,
		[]string{"old", "old"}, []int64{60000, 60000}, []int64{cur - 60000, cur}, [][]byte{[]byte(key), []byte(key)}, []bool{false, true},
		[]string{"old"}, [][]byte{[]byte(key)}, []int16{1}, []int64{60000},
		[]float64{1}, []int32{2}, []int64{now.UnixMilli()},
		[]int32{2, 0}, []int32{1, 0}, []int32{0, 1}, []int64{60000, 60000}, []int64{now.UnixMilli() - cur, 0}, []bool{false, false},
		[]float64{10, 10}, []float64{600000, 600000}, []float64{0, 60000},
	).Scan(&applied, &allowed, &curs, &prv, &at, &level)
	if err != nil {
		t.Fatalf("check with the function of release 004: %v", err)
	}
	return applied && allowed[0], curs[0], level[1]
}

// pushOf004 applies one bucket diff (kind 1, a minute, cost 1 at at, rate
// 10) to key in namespace "old" with the 8-argument function of release
// 004, as its push statement does.
func pushOf004(t *testing.T, pool *pgxpool.Pool, key string, at int64) {
	t.Helper()
	var n int
	err := pool.QueryRow(context.Background(), `SELECT public.ratesync_counters_bucket_add($1::text[], $2::bytea[], $3::smallint[],
		$4::bigint[], $5::bigint[], $6::float8[], $7::float8[], $8::integer[])`,
		[]string{"old"}, [][]byte{[]byte(key)}, []int16{1}, []int64{60000}, []int64{at}, []float64{60000}, []float64{10}, []int32{1}).Scan(&n)
	if err != nil || n != 1 {
		t.Fatalf("push with the function of release 004: %d diffs, %v", n, err)
	}
}

// overloads returns the numbers of arguments of the functions of the
// default Config named name, in order.
func overloads(t *testing.T, pool *pgxpool.Pool, name string) string {
	t.Helper()
	var got []int16
	if err := pool.QueryRow(context.Background(), `SELECT coalesce(array_agg(p.pronargs ORDER BY p.pronargs), '{}') FROM pg_proc p
		WHERE p.pronamespace = 'public'::regnamespace AND p.proname = $1`, name).Scan(&got); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(got)
}

// A store of the previous release (version 4), used by a role that may
// not create anything: that role cannot migrate it (New fails and changes
// nothing); once its owner has, the counters and buckets are kept, nodes
// of the previous release still running keep checking and pushing with
// the functions they know (beside the new ones), and the role uses the
// anchored windows' and logs' tables with the rights it had on the
// counters table.
func TestUpgradeFrom004AddsAnchoredWindowsAndLogs(t *testing.T) {
	p, owner := newDB(t)
	ctx := context.Background()
	migrateTo(t, owner, 4)
	now := strategytest.Base.Add(30 * time.Second)
	if ok, n, lvl := checkOf004(t, owner, 1, "k", now); !ok || n != 1 || lvl != 60000 {
		t.Fatalf("check at version 4: allowed %v, count %v, level %v; want allowed, 1, 60000", ok, n, lvl)
	}
	pushOf004(t, owner, "k", now.UnixMilli())
	app := appRole(t, p, owner, "public.ratesync_counters", "public.ratesync_lanes", "public.ratesync_counters_buckets")
	upgrade(t, app, owner, 4)
	if got := overloads(t, owner, "ratesync_counters_check"); got != "[13 23 31 32]" {
		t.Fatalf("check functions with %s arguments, want [13 23 31 32] (those of releases 003, 004 and 005 kept)", got)
	}
	if got := overloads(t, owner, "ratesync_counters_bucket_add"); got != "[8 9]" {
		t.Fatalf("bucket functions with %s arguments, want [8 9] (release 004's kept)", got)
	}
	// A node of the previous release: two more hits in the window and the bucket.
	if ok, n, lvl := checkOf004(t, app, 2, "k", now); !ok || n != 2 || lvl != 180000 {
		t.Fatalf("check of a node of release 004 after the upgrade: allowed %v, count %v, level %v; want allowed, 2, 180000", ok, n, lvl)
	}
	pushOf004(t, app, "k", now.UnixMilli())
	s, err := postgres.New(ctx, app, postgres.Config{})
	if err != nil {
		t.Fatalf("New as the role after the upgrade: %v", err)
	}
	res, err := s.CheckAndCount(ctx, "n", 1, []strategy.Check{{Namespace: "old", Key: "k", Cost: 1, Now: now, Limits: []strategy.CheckLimit{
		{WindowSize: time.Minute, Limit: 10}, {Kind: 1, WindowSize: time.Minute, Limit: 10, Burst: 10},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	if r := res[0]; !r.Allowed || r.Totals[0].Current != 3 || r.Buckets[1].Level != 300000 || r.Buckets[1].At != now.UnixMilli() {
		t.Fatalf("check of this release on the previous release's key: %+v, want allowed, count 3, level 300000", r)
	}
	useEverything(t, s, 10)
}

// lane returns the lane row of node: its seq, and the seq and decisions
// it keeps ("<nil>" when none).
func lane(t *testing.T, pool *pgxpool.Pool, node string) string {
	t.Helper()
	var seq, decided, decisions string
	if err := pool.QueryRow(context.Background(), `SELECT seq::text, coalesce(decided::text, '<nil>'), coalesce(decisions::text, '<nil>')
		FROM public.ratesync_lanes WHERE node = $1`, node).Scan(&seq, &decided, &decisions); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("seq %s, decided %s %s", seq, decided, decisions)
}

// A store of the previous release (version 5), used by a role that may
// not create anything: once its owner has migrated it, a lane recorded
// before (a seq and no decisions) gives a retry of its seq no decision,
// nodes of the previous release still running keep checking with the
// function they know (which keeps no decisions), and this release's calls
// keep theirs, which a later seq of either release supersedes.
func TestUpgradeFrom005KeepsDecisions(t *testing.T) {
	p, owner := newDB(t)
	ctx := context.Background()
	migrateTo(t, owner, 5)
	if _, err := owner.Exec(ctx, `INSERT INTO public.ratesync_lanes (node, seq) VALUES ('n', 1)`); err != nil {
		t.Fatal(err)
	}
	app := appRole(t, p, owner, "public.ratesync_counters", "public.ratesync_lanes", "public.ratesync_counters_buckets",
		"public.ratesync_counters_anchored", "public.ratesync_counters_logs", "public.ratesync_counters_logentries")
	upgrade(t, app, owner, 5)
	if got := overloads(t, owner, "ratesync_counters_check"); got != "[13 23 31 32]" {
		t.Fatalf("check functions with %s arguments, want [13 23 31 32] (those of releases 003, 004 and 005 kept)", got)
	}
	s, err := postgres.New(ctx, app, postgres.Config{})
	if err != nil {
		t.Fatalf("New as the role after the upgrade: %v", err)
	}
	now := strategytest.Base.Add(30 * time.Second)
	start := arith.WindowStart(now, time.Minute)
	checks := []strategy.Check{
		{Namespace: "ns", Key: "k", Cost: 2, Now: now, Limits: []strategy.CheckLimit{{WindowSize: time.Minute, Limit: 3, Fixed: true}}},
		{Namespace: "ns", Key: "k", Cost: 2, Now: now, Limits: []strategy.CheckLimit{{WindowSize: time.Minute, Limit: 3, Fixed: true}}},
	}
	decisions := func(what string, res []strategy.CheckResult, err error) string {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return fmt.Sprintf("%v %v", res[0].Allowed, res[1].Allowed)
	}
	count := func() float64 { return mustWindow(t, s, "ns", "k", start, time.Minute) }

	// The lane's seq 1, recorded before the upgrade: no decision kept.
	res, err := s.CheckAndCount(ctx, "n", 1, checks)
	if got := decisions("seq 1", res, err); got != "false false" || count() != 0 {
		t.Fatalf("seq 1 of a lane recorded before the upgrade: %s, count %v; want false false, 0", got, count())
	}
	res, err = s.CheckAndCount(ctx, "n", 2, checks)
	if got := decisions("seq 2", res, err); got != "true false" || count() != 2 {
		t.Fatalf("seq 2: %s, count %v; want true false, 2", got, count())
	}
	if got := lane(t, owner, "n"); got != "seq 2, decided 2 {t,f}" {
		t.Fatalf("lane after seq 2: %s", got)
	}
	res, err = s.CheckAndCount(ctx, "n", 2, checks)
	if got := decisions("retry of seq 2", res, err); got != "true false" || count() != 2 {
		t.Fatalf("retry of seq 2: %s, count %v; want true false (kept), 2", got, count())
	}

	// A node of the previous release on the same lane (as after a
	// downgrade): its seq 3 applies and keeps no decision, so neither
	// release's retry of seq 3 gets one.
	fresh := []strategy.Check{{Namespace: "ns", Key: "k2", Cost: 1, Now: now, Limits: []strategy.CheckLimit{{WindowSize: time.Minute, Limit: 3}}}}
	res, err = s.CheckAndCountOf005(ctx, "n", 3, fresh)
	if err != nil || !res[0].Allowed {
		t.Fatalf("seq 3 with the function of release 005: %+v, %v; want allowed", res, err)
	}
	if got := lane(t, owner, "n"); got != "seq 3, decided 2 {t,f}" {
		t.Fatalf("lane after a seq of release 005: %s", got)
	}
	for name, retry := range map[string]func(context.Context, string, uint64, []strategy.Check) ([]strategy.CheckResult, error){
		"this release's": s.CheckAndCount, "release 005's": s.CheckAndCountOf005,
	} {
		res, err = retry(ctx, "n", 3, fresh)
		if err != nil || res[0].Allowed || res[0].Totals[0].Current != 1 {
			t.Fatalf("%s retry of seq 3: %+v, %v; want not allowed, current 1", name, res, err)
		}
	}
	useEverything(t, s, 10)
}
