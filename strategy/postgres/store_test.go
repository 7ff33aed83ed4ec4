package postgres_test

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/arith"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ratesync/ratesync/internal/strategytest"
	"github.com/ratesync/ratesync/internal/testenv"
	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/postgres"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// newDB returns a fresh database and a pool on it, and remembers its
// server for the examples.
func newDB(t testing.TB) (*testenv.Postgres, *pgxpool.Pool) {
	t.Helper()
	p := testenv.NewPostgres(t)
	rememberServer(p.URL)
	return p, p.Pool(t)
}

// newStore returns a store with cfg on a fresh database.
func newStore(t testing.TB, cfg postgres.Config) (*postgres.Store, *pgxpool.Pool) {
	t.Helper()
	_, pool := newDB(t)
	s, err := postgres.New(context.Background(), pool, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s, pool
}

func TestContract(t *testing.T) {
	strategytest.Run(t, func(t *testing.T) strategy.Strategy {
		s, _ := newStore(t, postgres.Config{})
		return s
	})
}

func diff(ns, key string, start time.Time, size time.Duration, v float64) strategy.Diff {
	return strategy.Diff{Namespace: ns, Key: key, WindowStart: start, WindowSize: size, Value: v}
}

func mustPush(t *testing.T, s strategy.Strategy, b strategy.Batch) {
	t.Helper()
	if err := s.PushDiffs(context.Background(), b); err != nil {
		t.Fatalf("PushDiffs(%q, %d): %v", b.Node, b.Seq, err)
	}
}

func mustWindow(t *testing.T, s strategy.Strategy, ns, key string, start time.Time, size time.Duration) float64 {
	t.Helper()
	v, err := s.GetWindow(context.Background(), ns, key, start, size)
	if err != nil {
		t.Fatalf("GetWindow(%q, %q): %v", ns, key, err)
	}
	return v
}

func mustCheck(t *testing.T, s *postgres.Store, node string, seq uint64, checks []strategy.Check) []strategy.CheckResult {
	t.Helper()
	res, err := s.CheckAndCount(context.Background(), node, seq, checks)
	if err != nil {
		t.Fatalf("CheckAndCount: %v", err)
	}
	return res
}

// counters reads q fully into a map of key to count (one window size and
// start expected per key unless the caller knows better).
func counters(t *testing.T, s strategy.Strategy, q strategy.Query) map[string]float64 {
	t.Helper()
	out := make(map[string]float64)
	for c, err := range s.GetCounters(context.Background(), q) {
		if err != nil {
			t.Fatalf("GetCounters: %v", err)
		}
		out[fmt.Sprintf("%q@%d/%v", c.Key, c.WindowStart.UnixMilli(), c.WindowSize)] = c.Count
	}
	return out
}

func migrationCount(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("migrations")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

func TestConcurrentNewMigratesOnce(t *testing.T) {
	p, pool := newDB(t)
	const nodes = 4
	var wg sync.WaitGroup
	errs := make([]error, nodes)
	for i := range nodes {
		node := p.Pool(t) // a pool per node, as separate processes would have
		wg.Go(func() {
			_, errs[i] = postgres.New(context.Background(), node, postgres.Config{})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("New #%d: %v", i, err)
		}
	}
	want := migrationCount(t)
	var rows, maxVersion int
	if err := pool.QueryRow(context.Background(),
		`SELECT count(*), max(version) FROM public.ratesync_counters_migrations`).Scan(&rows, &maxVersion); err != nil {
		t.Fatal(err)
	}
	if rows != want || maxVersion != want {
		t.Fatalf("version table: %d rows, max version %d; want %d and %d (each migration applied once)", rows, maxVersion, want, want)
	}
	// A later start finds nothing to do.
	if _, err := postgres.New(context.Background(), pool, postgres.Config{}); err != nil {
		t.Fatalf("New after migration: %v", err)
	}
	var after int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM public.ratesync_counters_migrations`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after != want {
		t.Fatalf("version table has %d rows after another New, want %d", after, want)
	}
}

func TestNewRefusesANewerSchema(t *testing.T) {
	_, pool := newStore(t, postgres.Config{})
	if _, err := pool.Exec(context.Background(),
		`INSERT INTO public.ratesync_counters_migrations (version, name) VALUES (999, '999_future.sql')`); err != nil {
		t.Fatal(err)
	}
	_, err := postgres.New(context.Background(), pool, postgres.Config{})
	if err == nil || !strings.Contains(err.Error(), "version 999") {
		t.Fatalf("New on a schema at version 999: err = %v, want one naming version 999", err)
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	// No connection is made: New validates before it migrates.
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	long := strings.Repeat("t", 53)
	for _, c := range []struct {
		name string
		cfg  postgres.Config
		want []string
	}{
		{"schema with a quote", postgres.Config{Schema: `a"b`}, []string{"Config.Schema", `a\"b`, "must match"}},
		{"uppercase table", postgres.Config{Table: "Counters"}, []string{"Config.Table", "Counters", "must match"}},
		{"table too long", postgres.Config{Table: long}, []string{"Config.Table", long, "at most 52 bytes"}},
		{"lane table with a dot", postgres.Config{LaneTable: "x.y"}, []string{"Config.LaneTable", "x.y"}},
		{"lane table equal to table", postgres.Config{Table: "t", LaneTable: "t"}, []string{"Config.LaneTable", `"t"`, "must differ"}},
		{"lane table equal to the version table", postgres.Config{Table: "t", LaneTable: "t_migrations"}, []string{"Config.LaneTable", "must differ"}},
		{"negative purge batch", postgres.Config{PurgeBatch: -1}, []string{"Config.PurgeBatch", "-1", "must be > 0"}},
		{"negative lane TTL", postgres.Config{LaneTTL: -time.Hour}, []string{"Config.LaneTTL", "-1h0m0s", "must be > 0"}},
		{"sub-millisecond lane TTL", postgres.Config{LaneTTL: time.Hour + time.Microsecond}, []string{"Config.LaneTTL", "whole number of milliseconds"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := postgres.New(context.Background(), pool, c.cfg)
			if err == nil {
				t.Fatal("New: no error")
			}
			if !strings.HasPrefix(err.Error(), "postgres: ") {
				t.Errorf("error %q does not start with %q", err, "postgres: ")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
	if _, err := postgres.New(context.Background(), nil, postgres.Config{}); err == nil {
		t.Error("New with a nil pool: no error")
	}
}

func TestZeroConfigMeansDefaults(t *testing.T) {
	s, _ := newStore(t, postgres.Config{})
	got := s.Config()
	want := postgres.Config{
		Schema: postgres.DefaultSchema, Table: postgres.DefaultTable, LaneTable: postgres.DefaultLaneTable,
		PurgeBatch: postgres.DefaultPurgeBatch, LaneTTL: postgres.DefaultLaneTTL,
	}
	if got != want {
		t.Fatalf("Config() = %+v, want %+v", got, want)
	}
}

func TestStoresWithOtherNamesAreIndependent(t *testing.T) {
	_, pool := newDB(t)
	ctx := context.Background()
	a, err := postgres.New(ctx, pool, postgres.Config{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := postgres.New(ctx, pool, postgres.Config{Schema: "rl_other", Table: "hits", LaneTable: "hit_lanes"})
	if err != nil {
		t.Fatal(err)
	}
	start := arith.WindowStart(strategytest.Base, time.Minute)
	mustPush(t, a, strategy.Batch{Node: "n", Seq: 1, Diffs: []strategy.Diff{diff("ns", "k", start, time.Minute, 1)}})
	mustPush(t, b, strategy.Batch{Node: "n", Seq: 1, Diffs: []strategy.Diff{diff("ns", "k", start, time.Minute, 10)}})
	if got := mustWindow(t, a, "ns", "k", start, time.Minute); got != 1 {
		t.Errorf("default store: %v, want 1", got)
	}
	if got := mustWindow(t, b, "ns", "k", start, time.Minute); got != 10 {
		t.Errorf("store in rl_other: %v, want 10 (same node and seq, own lanes)", got)
	}
	var tables int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'rl_other' AND tablename IN ('hits', 'hit_lanes', 'hits_migrations')`).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 3 {
		t.Fatalf("%d of the 3 tables in schema rl_other", tables)
	}
}

// A key full of SQL metacharacters in a batch of ordinary keys: Kong's
// textual substitution would break the whole batch; bind parameters do not.
func TestKeyWithSQLMetacharactersDoesNotBreakTheBatch(t *testing.T) {
	s, _ := newStore(t, postgres.Config{})
	size := time.Minute
	start := arith.WindowStart(strategytest.Base, size)
	nasty := `it's 50% off? $1 '; DROP TABLE ratesync_counters; -- ?|%s`
	var diffs []strategy.Diff
	for i := range 50 {
		diffs = append(diffs, diff("ns", fmt.Sprintf("plain-%02d", i), start, size, 1))
		if i == 25 {
			diffs = append(diffs, diff("ns", nasty, start, size, 7), diff("ns", "?", start, size, 2), diff("ns", "%", start, size, 3))
		}
	}
	mustPush(t, s, strategy.Batch{Node: "n", Seq: 1, Diffs: diffs})
	got := counters(t, s, strategy.Query{Namespace: "ns", WindowSizes: []time.Duration{size}, Now: strategytest.Base})
	if len(got) != 53 {
		t.Fatalf("%d counters, want 53", len(got))
	}
	for key, want := range map[string]float64{nasty: 7, "?": 2, "%": 3, "plain-00": 1, "plain-49": 1} {
		if v := mustWindow(t, s, "ns", key, start, size); v != want {
			t.Errorf("%q = %v, want %v", key, v, want)
		}
	}
	only := counters(t, s, strategy.Query{Namespace: "ns", WindowSizes: []time.Duration{size}, Now: strategytest.Base, Keys: []string{nasty, "?"}})
	if len(only) != 2 {
		t.Fatalf("Keys filter with the nasty key: %v, want 2 counters", only)
	}
}

func TestSeqIsExactOverTheWholeUint64Range(t *testing.T) {
	s, _ := newStore(t, postgres.Config{})
	size := time.Minute
	start := arith.WindowStart(strategytest.Base, size)
	b := func(seq uint64, v float64) strategy.Batch {
		return strategy.Batch{Node: "n", Seq: seq, Diffs: []strategy.Diff{diff("ns", "k", start, size, v)}}
	}
	mustPush(t, s, b(1<<63+1, 1))             // above int64
	mustPush(t, s, b(1<<63, 10))              // one less: stale
	mustPush(t, s, b(1<<63+1, 100))           // replay
	mustPush(t, s, b(math.MaxUint64-1, 1000)) // float64 could not tell it from MaxUint64
	mustPush(t, s, b(math.MaxUint64, 10000))
	if got := mustWindow(t, s, "ns", "k", start, size); got != 11001 {
		t.Fatalf("count = %v, want 11001", got)
	}
}

func TestTextFieldsAreValidated(t *testing.T) {
	s, _ := newStore(t, postgres.Config{})
	ctx := context.Background()
	start := arith.WindowStart(strategytest.Base, time.Minute)
	err := s.PushDiffs(ctx, strategy.Batch{Node: "n", Seq: 1, Diffs: []strategy.Diff{
		diff("ns", "ok", start, time.Minute, 1), diff("bad\x00ns", "k", start, time.Minute, 1),
	}})
	if err == nil || !strings.Contains(err.Error(), `namespace "bad\x00ns"`) {
		t.Fatalf("push with a NUL in a namespace: err = %v, want one naming the namespace", err)
	}
	if got := mustWindow(t, s, "ns", "ok", start, time.Minute); got != 0 {
		t.Fatalf("a rejected batch applied %v", got)
	}
	if err := s.PushDiffs(ctx, strategy.Batch{Node: "\xff", Seq: 1}); err == nil || !strings.Contains(err.Error(), "node") {
		t.Fatalf("push with an invalid UTF-8 node: err = %v, want one naming the node", err)
	}
	for _, bad := range []strategy.Diff{
		diff("ns", "k", start, time.Minute, math.NaN()),
		diff("ns", "k", start, time.Minute, math.Inf(1)),
		diff("ns", "k", start, 0, 1),
		diff("ns", "k", start, time.Microsecond, 1),
	} {
		if err := s.PushDiffs(ctx, strategy.Batch{Node: "n", Seq: 2, Diffs: []strategy.Diff{bad}}); err == nil || !strings.HasPrefix(err.Error(), "postgres: ") {
			t.Errorf("push of %+v: err = %v, want a postgres: error", bad, err)
		}
	}
}

func TestCanceledContextIsReturnedUnchanged(t *testing.T) {
	s, _ := newStore(t, postgres.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := arith.WindowStart(strategytest.Base, time.Minute)
	if err := s.PushDiffs(ctx, strategy.Batch{Node: "n", Seq: 1}); err != context.Canceled {
		t.Errorf("PushDiffs: %v, want context.Canceled", err)
	}
	if _, err := s.PushAndCount(ctx, strategy.Batch{Node: "n", Seq: 1}); err != context.Canceled {
		t.Errorf("PushAndCount: %v, want context.Canceled", err)
	}
	if _, err := s.GetWindow(ctx, "ns", "k", start, time.Minute); err != context.Canceled {
		t.Errorf("GetWindow: %v, want context.Canceled", err)
	}
	if err := s.Purge(ctx, "ns", []time.Duration{time.Minute}, strategytest.Base); err != context.Canceled {
		t.Errorf("Purge: %v, want context.Canceled", err)
	}
	if _, err := s.CheckAndCount(ctx, "n", 1, nil); err != context.Canceled {
		t.Errorf("CheckAndCount: %v, want context.Canceled", err)
	}
	// A deadline that passes while the statement waits.
	_, pool := newDB(t)
	s2, err := postgres.New(context.Background(), pool, postgres.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tx := lockLane(t, pool, "n", 0)
	defer tx.Rollback(context.Background())
	dctx, dcancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer dcancel()
	if err := s2.PushDiffs(dctx, strategy.Batch{Node: "n", Seq: 1}); err != context.DeadlineExceeded {
		t.Errorf("PushDiffs blocked past its deadline: %v, want context.DeadlineExceeded", err)
	}
}

// lockLane holds the lane row of node (creating it at seq) in a transaction
// the caller ends: pushes of that lane wait for it, as a retry waits for its
// still-running first attempt.
func lockLane(t *testing.T, pool *pgxpool.Pool, node string, seq uint64) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO public.ratesync_lanes (node, seq) VALUES ($1, $2::numeric) ON CONFLICT DO NOTHING`, node, fmt.Sprint(seq)); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM public.ratesync_lanes WHERE node = $1 FOR UPDATE`, node); err != nil {
		t.Fatal(err)
	}
	return tx
}

// A retry that races its still-running first attempt: both wait on the lane
// row; one applies, the other finds its seq recorded and applies nothing (a
// check's gets the decision the first made).
func TestRetryRacingItsFirstAttemptCountsOnce(t *testing.T) {
	s, pool := newStore(t, postgres.Config{})
	ctx := context.Background()
	size := time.Minute
	start := arith.WindowStart(strategytest.Base, size)
	b := strategy.Batch{Node: "n", Seq: 7, Diffs: []strategy.Diff{diff("ns", "a", start, size, 1), diff("ns", "b", start, size, 2)}}
	check := []strategy.Check{{Namespace: "ns", Key: "c", Cost: 1, Now: strategytest.Base, Limits: []strategy.CheckLimit{{WindowSize: size, Limit: 10}}}}

	tx := lockLane(t, pool, "n", 0)
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	totals := make(chan []strategy.Totals, 2)
	results := make(chan []strategy.CheckResult, 2)
	for range 2 {
		wg.Go(func() { errs <- s.PushDiffs(ctx, b) })
		wg.Go(func() {
			tt, err := s.PushAndCount(ctx, b)
			errs <- err
			totals <- tt
		})
	}
	time.Sleep(200 * time.Millisecond) // let them queue on the lane row
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	// Checks on the same lane, next seq, racing likewise.
	tx = lockLane(t, pool, "n", 0)
	for range 2 {
		wg.Go(func() {
			r, err := s.CheckAndCount(ctx, "n", 8, check)
			errs <- err
			results <- r
		})
	}
	time.Sleep(200 * time.Millisecond)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	close(totals)
	close(results)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if a, bb := mustWindow(t, s, "ns", "a", start, size), mustWindow(t, s, "ns", "b", start, size); a != 1 || bb != 2 {
		t.Fatalf("a = %v, b = %v after four racing tries of one batch; want 1 and 2", a, bb)
	}
	for tt := range totals {
		if len(tt) != 2 || tt[0].Current != 1 || tt[1].Current != 2 {
			t.Errorf("PushAndCount totals %+v, want current 1 and 2 (applied, or the current totals of a replay)", tt)
		}
	}
	for r := range results {
		if !r[0].Allowed || r[0].Totals[0].Current != 1 {
			t.Errorf("check %+v, want allowed (the one decision, made by whichever try applied), current 1", r[0])
		}
	}
	if got := mustWindow(t, s, "ns", "c", start, size); got != 1 {
		t.Fatalf("c = %v, want 1", got)
	}
}

// A replayed batch never touches counter or bucket rows: it does not wait
// on a row another transaction holds (the lane is checked first, and
// alone).
func TestReplayTouchesNoCounterRow(t *testing.T) {
	s, pool := newStore(t, postgres.Config{})
	ctx := context.Background()
	size := time.Minute
	start := arith.WindowStart(strategytest.Base, size)
	b := strategy.Batch{Node: "n", Seq: 1, Diffs: []strategy.Diff{diff("ns", "k", start, size, 1)},
		Buckets: []strategy.BucketDiff{{Namespace: "ns", Key: "k", Kind: 1, Window: size, At: strategytest.Base.UnixMilli(), Cost: 1, Rate: 1}}}
	check := []strategy.Check{{Namespace: "ns", Key: "k", Cost: 1, Now: strategytest.Base,
		Limits: []strategy.CheckLimit{{WindowSize: size, Limit: 10}, {Kind: 1, WindowSize: size, Limit: 1, Burst: 10}}}}
	mustPush(t, s, b)
	if _, err := s.CheckAndCount(ctx, "n", 2, check); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM public.ratesync_counters, public.ratesync_counters_buckets FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.PushDiffs(rctx, b); err != nil {
		t.Fatalf("replay while the rows are locked: %v", err)
	}
	if _, err := s.PushAndCount(rctx, b); err != nil {
		t.Fatalf("replayed PushAndCount while the rows are locked: %v", err)
	}
	res, err := s.CheckAndCount(rctx, "n", 2, check)
	if err != nil {
		t.Fatalf("replayed CheckAndCount while the rows are locked: %v", err)
	}
	if !res[0].Allowed || res[0].Totals[0].Current != 2 || res[0].Buckets[1].Level != 2*60000 {
		t.Fatalf("replayed check: %+v, want allowed as decided then, with the current state (count 2, level 120000)", res[0])
	}
}

// Differential test: random batches and checks give the memory store's
// answers.
func TestAgreesWithTheMemoryStore(t *testing.T) {
	s, _ := newStore(t, postgres.Config{})
	ref := newMemory()
	ctx := context.Background()
	sizes := []time.Duration{time.Second, time.Minute, 3 * time.Minute}
	keys := []string{"a", "b", "c", "nul\x00", "\xff"}
	now := strategytest.Base.Add(90*time.Second + 250*time.Millisecond)
	rng := newRand(1)
	for seq := uint64(1); seq <= 40; seq++ {
		var diffs []strategy.Diff
		for range 1 + rng.IntN(12) {
			size := sizes[rng.IntN(len(sizes))]
			start := arith.WindowStart(now, size).Add(-time.Duration(rng.IntN(2)) * size)
			diffs = append(diffs, diff([]string{"x", "y"}[rng.IntN(2)], keys[rng.IntN(len(keys))], start, size, float64(rng.IntN(7)-1)))
		}
		b := strategy.Batch{Node: "n", Seq: seq, Diffs: diffs}
		got, err := s.PushAndCount(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := ref.PushAndCount(ctx, b)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("batch %d %+v: totals %v, want %v", seq, diffs, got, want)
		}
		if seq%5 == 0 { // a replay
			got, _ := s.PushAndCount(ctx, b)
			want, _ := ref.PushAndCount(ctx, b)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("replay of batch %d: totals %v, want %v", seq, got, want)
			}
		}
	}
	for seq := uint64(100); seq <= 140; seq++ {
		var checks []strategy.Check
		for range 1 + rng.IntN(6) {
			c := strategy.Check{Namespace: "x", Key: keys[rng.IntN(len(keys))], Cost: float64(rng.IntN(3)), Now: now.Add(time.Duration(rng.IntN(3000)) * time.Millisecond)}
			for range rng.IntN(4) {
				c.Limits = append(c.Limits, strategy.CheckLimit{WindowSize: sizes[rng.IntN(len(sizes))], Limit: float64(1 + rng.IntN(30)), Fixed: rng.IntN(3) == 0})
			}
			checks = append(checks, c)
		}
		got, err := s.CheckAndCount(ctx, "n", seq, checks)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := ref.CheckAndCount(ctx, "n", seq, checks)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("checks %d %+v:\n got %v\nwant %v", seq, checks, got, want)
		}
	}
	for _, ns := range []string{"x", "y"} {
		q := strategy.Query{Namespace: ns, WindowSizes: sizes, Now: now}
		got, want := counters(t, s, q), counters(t, ref, q)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("namespace %s:\n got %v\nwant %v", ns, got, want)
		}
	}
}

// Concurrent pushes of overlapping keys in different orders, and checks on
// the same keys, from many lanes: a deadlock would fail one of them.
func TestConcurrentPushesAndChecksNeverDeadlock(t *testing.T) {
	s, _ := newStore(t, postgres.Config{})
	ctx := context.Background()
	size := time.Minute
	now := strategytest.Base.Add(10 * time.Second)
	start := arith.WindowStart(now, size)
	const lanes, rounds, nkeys = 8, 20, 30
	var wg sync.WaitGroup
	errs := make(chan error, lanes*rounds)
	for l := range lanes {
		wg.Go(func() {
			rng := newRand(uint64(l))
			for r := range rounds {
				seq := uint64(r + 1)
				node := fmt.Sprintf("lane-%d", l)
				if l%2 == 0 {
					var diffs []strategy.Diff
					for _, k := range rng.Perm(nkeys) {
						diffs = append(diffs, diff("ns", fmt.Sprintf("k%02d", k), start, size, 1), diff("ns", fmt.Sprintf("k%02d", k), start.Add(-size), size, 1))
					}
					if err := s.PushDiffs(ctx, strategy.Batch{Node: node, Seq: seq, Diffs: diffs}); err != nil {
						errs <- err
					}
					continue
				}
				var checks []strategy.Check
				for _, k := range rng.Perm(nkeys)[:10] {
					checks = append(checks, strategy.Check{Namespace: "ns", Key: fmt.Sprintf("k%02d", k), Cost: 1, Now: now,
						Limits: []strategy.CheckLimit{{WindowSize: size, Limit: 1e9}, {WindowSize: time.Second, Limit: 1e9}}})
				}
				if _, err := s.CheckAndCount(ctx, node, seq, checks); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var total float64
	for k := range nkeys {
		total += mustWindow(t, s, "ns", fmt.Sprintf("k%02d", k), start, size)
	}
	if want := float64(lanes/2*rounds*nkeys + lanes/2*rounds*10); total != want {
		t.Fatalf("total of the current window = %v, want %v", total, want)
	}
}

// appRole creates a login role with no right to create anything, granted
// what a store needs on tables (SELECT, INSERT, UPDATE, DELETE) and on the
// version table (SELECT) of the default Config, and returns a pool that
// logs in as it.
func appRole(t *testing.T, p *testenv.Postgres, owner *pgxpool.Pool, tables ...string) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	role := testenv.Name("ratesync_app_")
	if _, err := owner.Exec(ctx, "CREATE ROLE "+role+" LOGIN"); err != nil {
		t.Skipf("cannot create a role on this server: %v", err)
	}
	t.Cleanup(func() {
		_, _ = owner.Exec(ctx, "DROP OWNED BY "+role)
		_, _ = owner.Exec(ctx, "DROP ROLE "+role)
	})
	for _, grant := range []string{
		"REVOKE CREATE ON SCHEMA public FROM PUBLIC",
		"REVOKE CREATE, TEMPORARY ON DATABASE " + p.Database + " FROM PUBLIC",
		"GRANT USAGE ON SCHEMA public TO " + role,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON " + strings.Join(tables, ", ") + " TO " + role,
		"GRANT SELECT ON public.ratesync_counters_migrations TO " + role,
	} {
		if _, err := owner.Exec(ctx, grant); err != nil {
			t.Fatalf("%s: %v", grant, err)
		}
	}
	u, err := url.Parse(p.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	app, err := pgxpool.New(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(app.Close)
	return app
}

// useEverything runs every method of s once, as a role that uses the store
// would, on a key that only bytea holds, and fails t if one fails or
// answers wrong.
func useEverything(t *testing.T, s *postgres.Store, seq uint64) {
	t.Helper()
	ctx := context.Background()
	now := strategytest.Base.Add(30 * time.Second)
	start := arith.WindowStart(now, time.Minute)
	const key = "k\x00\xff"
	mustPush(t, s, strategy.Batch{Node: "n", Seq: seq, Diffs: []strategy.Diff{diff("ns", key, start, time.Minute, 1)},
		Buckets: []strategy.BucketDiff{
			{Namespace: "ns", Key: key, Kind: 1, Window: time.Minute, At: now.UnixMilli(), Cost: 1, Rate: 10},
			{Namespace: "ns", Key: key, Kind: strategy.KindAnchored, Window: time.Minute, At: now.UnixMilli(), Cost: 1, Rate: 10},
			{Namespace: "ns", Key: key, Kind: strategy.KindLog, Window: time.Minute, At: now.UnixMilli() - 1, Cost: 1, Rate: 10},
		}})
	if _, err := s.PushAndCount(ctx, strategy.Batch{Node: "n", Seq: seq + 1, Diffs: []strategy.Diff{diff("ns", key, start, time.Minute, 1)}}); err != nil {
		t.Fatalf("PushAndCount: %v", err)
	}
	res, err := s.CheckAndCount(ctx, "n", seq+2, []strategy.Check{{Namespace: "ns", Key: key, Cost: 1, Now: now,
		Limits: []strategy.CheckLimit{{WindowSize: time.Minute, Limit: 10}, {Kind: 1, WindowSize: time.Minute, Limit: 10, Burst: 10},
			{Kind: strategy.KindAnchored, WindowSize: time.Minute, Limit: 10}, {Kind: strategy.KindLog, WindowSize: time.Minute, Limit: 10},
			{WindowSize: 3 * time.Minute, Limit: 10, Precision: time.Minute}}}})
	if err != nil {
		t.Fatalf("CheckAndCount: %v", err)
	}
	if r := res[0]; !r.Allowed || r.Totals[0].Current != 3 || r.Buckets[1].Level != 120000 || r.Buckets[2].Level != 2 || r.Buckets[3].Level != 2 ||
		len(r.Windows) != 5 || len(r.Windows[4]) != 4 || r.Windows[4][0] != 3 {
		t.Fatalf("CheckAndCount: %+v, want allowed, count 3, level 120000, anchored and log at 2, 4 windows of 1m", r)
	}
	if err := s.Purge(ctx, "ns", []time.Duration{time.Minute}, now); err != nil {
		t.Fatalf("Purge: %v", err)
	}
	b, err := s.GetBuckets(ctx, "ns", []strategy.BucketRef{{Key: key, Kind: 1, Window: time.Minute}})
	if err != nil || len(b) != 1 || b[0].Level != 120000 || b[0].At != now.UnixMilli() {
		t.Fatalf("GetBuckets: %+v, %v; want level 120000 at %d", b, err, now.UnixMilli())
	}
	q := strategy.Query{Namespace: "ns", WindowSizes: []time.Duration{time.Minute}, Now: now, Keys: []string{key}}
	if got := counters(t, s, q); fmt.Sprint(got) != fmt.Sprintf("map[%q@%d/1m0s:3]", key, start.UnixMilli()) {
		t.Fatalf("GetCounters: %v, want the key at 3", got)
	}
}

// Once the schema is migrated, a role with no right to create anything can
// start (New) and use the store.
func TestMigratedStoreNeedsNoCreatePrivilege(t *testing.T) {
	p, owner := newDB(t)
	ctx := context.Background()
	if _, err := postgres.New(ctx, owner, postgres.Config{}); err != nil {
		t.Fatal(err)
	}
	app := appRole(t, p, owner, "public.ratesync_counters", "public.ratesync_lanes", "public.ratesync_counters_buckets",
		"public.ratesync_counters_anchored", "public.ratesync_counters_logs", "public.ratesync_counters_logentries")
	s, err := postgres.New(ctx, app, postgres.Config{})
	if err != nil {
		t.Fatalf("New as a role without CREATE: %v", err)
	}
	useEverything(t, s, 1)
	// Without the schema, the same role cannot create it: the error says what failed.
	_, err = postgres.New(ctx, app, postgres.Config{Schema: "elsewhere"})
	if err == nil || !strings.Contains(err.Error(), "postgres: create schema elsewhere") {
		t.Fatalf("New of a new schema without CREATE: err = %v, want one naming the schema", err)
	}
}

// Every statement works in every pgx QueryExecMode, including those that
// prepare nothing on the server (PgBouncer in transaction mode) and the
// simple protocol, where the check function's overloads are told apart by
// their number of arguments alone.
func TestEveryQueryExecMode(t *testing.T) {
	for _, mode := range []pgx.QueryExecMode{
		pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeDescribeExec,
		pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol,
	} {
		t.Run(mode.String(), func(t *testing.T) {
			p, _ := newDB(t)
			cfg, err := pgxpool.ParseConfig(p.URL)
			if err != nil {
				t.Fatal(err)
			}
			cfg.ConnConfig.DefaultQueryExecMode = mode
			pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			s, err := postgres.New(context.Background(), pool, postgres.Config{})
			if err != nil {
				t.Fatal(err)
			}
			useEverything(t, s, 1)
		})
	}
}
