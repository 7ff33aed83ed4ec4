package postgres_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/arith"
	"github.com/ratesync/ratesync/internal/strategytest"
	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/postgres"
)

// GetCounters with keys probes the primary key once per (window, key),
// with the table's statistics stale (never analyzed since it grew, as in
// the minutes before autovacuum comes) and whether the plan cache uses a
// custom or a generic plan: no scan of the window with the keys as a
// filter (which a generic plan searches linearly per row), no hash join.
func TestGetCountersProbesThePrimaryKey(t *testing.T) {
	s, pool := newStore(t, postgres.Config{})
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "ALTER TABLE public.ratesync_counters SET (autovacuum_enabled = false)"); err != nil {
		t.Fatal(err)
	}
	size := time.Minute
	start := arith.WindowStart(strategytest.Base, size)
	const rows, held = 20_000, 500
	diffs := make([]strategy.Diff, rows)
	for i := range diffs {
		diffs[i] = diff("ns", fmt.Sprintf("other-%06d", i), start, size, 1)
	}
	mustPush(t, s, strategy.Batch{Node: "load", Seq: 1, Diffs: diffs})
	keys := make([][]byte, held)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("other-%06d", i*(rows/held)))
	}

	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_, _ = conn.Exec(ctx, "DEALLOCATE get_keys")
		_, _ = conn.Exec(ctx, "RESET plan_cache_mode")
		conn.Release()
	}()
	if _, err := conn.Exec(ctx, "PREPARE get_keys (text, bigint[], bigint[], bytea[]) AS "+s.GetKeysSQL()); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		if _, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode); err != nil {
			t.Fatal(err)
		}
		// EXECUTE's arguments as literals: a utility statement takes no parameters.
		r, err := conn.Query(ctx, fmt.Sprintf("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) EXECUTE get_keys ('ns', '{%d,%d}', '{%d,%d}', '%s')",
			size.Milliseconds(), size.Milliseconds(), start.UnixMilli(), start.UnixMilli()-size.Milliseconds(), byteaArray(keys)))
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for r.Next() {
			var line string
			if err := r.Scan(&line); err != nil {
				t.Fatal(err)
			}
			lines = append(lines, line)
		}
		if err := r.Err(); err != nil {
			t.Fatal(err)
		}
		plan := strings.Join(lines, "\n")
		top := fmt.Sprintf("Nested Loop (actual rows=%d loops=1)", held)
		probe := regexp.MustCompile(fmt.Sprintf(`Index Scan using ratesync_counters_pkey on ratesync_counters c \(actual rows=\d+ loops=%d\)`, 2*held))
		cond := "Index Cond: ((namespace = $1) AND (window_size = w.window_size) AND (window_start = w.window_start) AND (key = k.key))"
		if mode == "force_custom_plan" {
			cond = strings.Replace(cond, "$1", "'ns'::text", 1)
		}
		if !strings.HasPrefix(plan, top) || !probe.MatchString(plan) || !strings.Contains(plan, cond) || strings.Contains(plan, "Filter") ||
			strings.Contains(plan, "Seq Scan") || strings.Contains(plan, "Hash") {
			t.Errorf("%s: plan of GetCounters with %d keys over %d rows, want one probe per (window, key):\n%s", mode, held, rows, plan)
		}
	}
}

// byteaArray is keys as the text of a bytea[] (hex elements).
func byteaArray(keys [][]byte) string {
	var b strings.Builder
	b.WriteString("{")
	for i, k := range keys {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"\\x%x"`, k)
	}
	b.WriteString("}")
	return b.String()
}

// Keys named twice, in any order, yield each counter once.
func TestGetCountersYieldsRepeatedKeysOnce(t *testing.T) {
	s, _ := newStore(t, postgres.Config{})
	size := time.Minute
	start := arith.WindowStart(strategytest.Base, size)
	mustPush(t, s, strategy.Batch{Node: "n", Seq: 1, Diffs: []strategy.Diff{
		diff("ns", "a", start, size, 1), diff("ns", "b", start, size, 2), diff("ns", "b", start.Add(-size), size, 3),
	}})
	got := counters(t, s, strategy.Query{Namespace: "ns", WindowSizes: []time.Duration{size, size}, Now: strategytest.Base,
		Keys: []string{"b", "a", "zz", "b", "a", "b"}})
	want := map[string]float64{
		fmt.Sprintf("%q@%d/%v", "a", start.UnixMilli(), size):            1,
		fmt.Sprintf("%q@%d/%v", "b", start.UnixMilli(), size):            2,
		fmt.Sprintf("%q@%d/%v", "b", start.Add(-size).UnixMilli(), size): 3,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}
