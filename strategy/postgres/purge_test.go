package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/arith"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ratesync/ratesync/internal/strategytest"
	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/postgres"
)

func TestPurgeDeletesOldWindowsInBatches(t *testing.T) {
	s, pool := newStore(t, postgres.Config{PurgeBatch: 100})
	ctx := context.Background()
	size := time.Minute
	now := strategytest.Base.Add(2*time.Hour + 30*time.Second)
	cur := arith.WindowStart(now, size)
	const windows, keys = 60, 50 // 3,000 rows of ns/1m, most of them old
	seq := uint64(0)
	for w := range windows {
		var diffs []strategy.Diff
		for k := range keys {
			diffs = append(diffs, diff("ns", fmt.Sprintf("k%02d", k), cur.Add(-time.Duration(w)*size), size, 1))
		}
		seq++
		mustPush(t, s, strategy.Batch{Node: "loader", Seq: seq, Diffs: diffs})
	}
	old := cur.Add(-30 * size)
	seq++
	mustPush(t, s, strategy.Batch{Node: "loader", Seq: seq, Diffs: []strategy.Diff{
		diff("other", "k00", old, size, 1),        // another namespace
		diff("ns", "k00", old, 2*size, 1),         // a size Purge is not asked about
		diff("ns", "k00", cur.Add(size), size, 1), // a future window
	}})

	// A writer holds one old row: Purge skips it rather than wait.
	held := cur.Add(-40 * size).UnixMilli()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM public.ratesync_counters WHERE namespace = 'ns' AND window_size = 60000 AND window_start = $1 AND key = 'k07'::bytea FOR UPDATE`, held); err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.Purge(pctx, "ns", []time.Duration{size}, now); err != nil {
		t.Fatalf("Purge: %v", err)
	}
	rows := func(where string, args ...any) int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM public.ratesync_counters WHERE `+where, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := rows(`namespace = 'ns' AND window_size = 60000 AND window_start >= $1`, cur.Add(-2*size).UnixMilli()); n != 3*keys+1 {
		t.Errorf("%d rows in the current, previous, spare and future windows after Purge, want %d (kept)", n, 3*keys+1)
	}
	if n := rows(`namespace = 'ns' AND window_size = 60000 AND window_start < $1`, cur.Add(-2*size).UnixMilli()); n != 1 {
		t.Errorf("%d old rows left after Purge, want 1 (the locked one)", n)
	}
	if n := rows(`namespace = 'other' OR window_size <> 60000`); n != 2 {
		t.Errorf("%d rows of another namespace or size, want 2 (untouched)", n)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(ctx, "ns", []time.Duration{size}, now); err != nil {
		t.Fatalf("second Purge: %v", err)
	}
	if n := rows(`namespace = 'ns' AND window_size = 60000 AND window_start < $1`, cur.Add(-2*size).UnixMilli()); n != 0 {
		t.Errorf("%d old rows left after the second Purge, want 0", n)
	}
	got := counters(t, s, strategy.Query{Namespace: "ns", WindowSizes: []time.Duration{size}, Now: now})
	if len(got) != 2*keys {
		t.Errorf("GetCounters after Purge: %d counters, want %d (current and previous)", len(got), 2*keys)
	}
}

func TestPurgeDeletesLanesUnusedForLaneTTL(t *testing.T) {
	s, pool := newStore(t, postgres.Config{LaneTTL: time.Hour})
	ctx := context.Background()
	start := arith.WindowStart(strategytest.Base, time.Minute)
	for _, node := range []string{"gone", "idle-but-young", "busy"} {
		mustPush(t, s, strategy.Batch{Node: node, Seq: 5, Diffs: []strategy.Diff{diff("ns", "k", start, time.Minute, 1)}})
	}
	if _, err := pool.Exec(ctx, `UPDATE public.ratesync_lanes SET updated_at = now() - interval '61 minutes' WHERE node = 'gone'`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE public.ratesync_lanes SET updated_at = now() - interval '59 minutes' WHERE node = 'idle-but-young'`); err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(ctx, "ns", []time.Duration{time.Minute}, strategytest.Base); err != nil {
		t.Fatal(err)
	}
	var lanes []string
	rows, err := pool.Query(ctx, `SELECT node FROM public.ratesync_lanes ORDER BY node`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		lanes = append(lanes, n)
	}
	if fmt.Sprint(lanes) != "[busy idle-but-young]" {
		t.Fatalf("lanes after Purge: %v, want [busy idle-but-young]", lanes)
	}
}

// logRows returns the number of log headers and entries of the default
// Config's tables.
func logRows(t *testing.T, pool *pgxpool.Pool) (headers, entries int) {
	t.Helper()
	if err := pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM public.ratesync_counters_logs),
		(SELECT count(*) FROM public.ratesync_counters_logentries)`).Scan(&headers, &entries); err != nil {
		t.Fatal(err)
	}
	return headers, entries
}

// Purge drops the namespace's closed anchored windows and trims its logs
// (as arith.Log.Trim, a log left empty losing its header), in batches
// that resume after the last row; it keeps open windows, the entries that
// still weigh, other namespaces' state, and what a writer holds (until a
// later purge). The state it leaves decides as the memory store's does.
func TestPurgeDropsClosedAnchoredWindowsAndIdleLogs(t *testing.T) {
	s, pool := newStore(t, postgres.Config{PurgeBatch: 2})
	mem := newMemory()
	ctx := context.Background()
	t0 := strategytest.Base.Add(5 * time.Hour).UnixMilli()
	now := time.UnixMilli(t0 + 1000)
	var diffs []strategy.BucketDiff
	add := func(ns, key string, kind uint8, at int64, cost float64) {
		diffs = append(diffs, bucketDiff(ns, key, kind, time.Second, at, cost, 1))
	}
	for i := range 5 {
		add("ns", fmt.Sprintf("closed%d", i), strategy.KindAnchored, t0, 1)    // closes at now
		add("ns", fmt.Sprintf("open%d", i), strategy.KindAnchored, t0+1, 1)    // open until now+1
		add("ns", fmt.Sprintf("idle%d", i), strategy.KindLog, t0, 0.1)         // expires at now
		add("ns", fmt.Sprintf("idle%d", i), strategy.KindLog, t0-500, 0.3)     // expired before
		add("ns", fmt.Sprintf("part%d", i), strategy.KindLog, t0-10, 0.1)      // expired
		add("ns", fmt.Sprintf("part%d", i), strategy.KindLog, t0+1, 0.3)       // weighs until now+1
		add("other", fmt.Sprintf("closed%d", i), strategy.KindAnchored, t0, 1) // another namespace
		add("other", fmt.Sprintf("idle%d", i), strategy.KindLog, t0, 1)
	}
	add("ns", "held", strategy.KindAnchored, t0, 1)
	add("ns", "heldlog", strategy.KindLog, t0, 1)
	b := strategy.Batch{Node: "n", Seq: 1, Buckets: diffs}
	mustPush(t, s, b)
	_ = mem.PushDiffs(ctx, b)

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM public.ratesync_counters_anchored WHERE key = 'held'::bytea FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM public.ratesync_counters_logs WHERE key = 'heldlog'::bytea FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.Purge(pctx, "ns", nil, now); err != nil {
		t.Fatalf("Purge: %v", err)
	}
	rows := func(table, ns string) int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM public.`+table+` WHERE namespace = $1`, ns).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if a, l := rows("ratesync_counters_anchored", "ns"), rows("ratesync_counters_logs", "ns"); a != 6 || l != 6 {
		t.Fatalf("after Purge: %d anchored windows and %d logs of ns, want 6 and 6 (the open or weighing ones and the held ones)", a, l)
	}
	if _, e := logRows(t, pool); e != 5+1+5 {
		t.Fatalf("%d entries after Purge, want %d (part*: one each; heldlog; other's)", e, 5+1+5)
	}
	if a, l := rows("ratesync_counters_anchored", "other"), rows("ratesync_counters_logs", "other"); a != 5 || l != 5 {
		t.Fatalf("Purge of ns left %d anchored windows and %d logs of other, want 5 and 5", a, l)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(ctx, "ns", nil, now); err != nil {
		t.Fatalf("second Purge: %v", err)
	}
	_ = mem.Purge(ctx, "ns", nil, now)
	if a, l := rows("ratesync_counters_anchored", "ns"), rows("ratesync_counters_logs", "ns"); a != 5 || l != 5 {
		t.Fatalf("after the second Purge: %d anchored windows and %d logs of ns, want 5 and 5", a, l)
	}
	var checks []strategy.Check
	for _, k := range []string{"closed0", "open0", "idle0", "part0", "part4", "held", "heldlog"} {
		checks = append(checks, strategy.Check{Namespace: "ns", Key: k, Now: now, Limits: []strategy.CheckLimit{
			{Kind: strategy.KindAnchored, WindowSize: time.Second, Limit: 5}, {Kind: strategy.KindLog, WindowSize: time.Second, Limit: 5}}})
	}
	got := mustCheck(t, s, "reader", 1, checks)
	want, _ := mem.CheckAndCount(ctx, "reader", 1, checks)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after Purge:\n got %+v\nwant %+v", got, want)
	}
}
