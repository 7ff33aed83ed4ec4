package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ratesync/ratesync/internal/arith"
	"github.com/ratesync/ratesync/internal/strategytest"
	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/postgres"
)

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

// The schema holds one check function and one function that applies bucket
// diffs, with the arguments the store binds.
func TestSchemaHoldsOneVersionOfEachFunction(t *testing.T) {
	_, pool := newStore(t, postgres.Config{})
	for name, want := range map[string]string{"ratesync_counters_check": "[31]", "ratesync_counters_bucket_add": "[9]"} {
		if got := overloads(t, pool, name); got != want {
			t.Errorf("%s with %s arguments, want %s", name, got, want)
		}
	}
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

// A check call keeps its decisions in its lane's row with its seq: a retry
// of that seq gets them; a push's seq, or a seq below the lane's, gets
// every check denied and counts nothing.
func TestCheckKeepsItsDecisionsWithTheSeq(t *testing.T) {
	s, pool := newStore(t, postgres.Config{})
	ctx := context.Background()
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

	res, err := s.CheckAndCount(ctx, "n", 2, checks)
	if got := decisions("seq 2", res, err); got != "true false" || count() != 2 {
		t.Fatalf("seq 2: %s, count %v; want true false, 2", got, count())
	}
	if got := lane(t, pool, "n"); got != "seq 2, decided 2 {t,f}" {
		t.Fatalf("lane after seq 2: %s", got)
	}
	res, err = s.CheckAndCount(ctx, "n", 2, checks)
	if got := decisions("retry of seq 2", res, err); got != "true false" || count() != 2 {
		t.Fatalf("retry of seq 2: %s, count %v; want true false (kept), 2", got, count())
	}
	res, err = s.CheckAndCount(ctx, "n", 1, checks)
	if got := decisions("seq 1", res, err); got != "false false" || count() != 2 {
		t.Fatalf("seq 1, below the lane's: %s, count %v; want false false, 2", got, count())
	}

	// A push sets the seq alone: a check call with its seq gets no decision.
	mustPush(t, s, strategy.Batch{Node: "n", Seq: 3, Diffs: []strategy.Diff{diff("ns", "k2", start, time.Minute, 1)}})
	if got := lane(t, pool, "n"); got != "seq 3, decided 2 {t,f}" {
		t.Fatalf("lane after a push of seq 3: %s", got)
	}
	fresh := []strategy.Check{{Namespace: "ns", Key: "k2", Cost: 1, Now: now, Limits: []strategy.CheckLimit{{WindowSize: time.Minute, Limit: 3}}}}
	res, err = s.CheckAndCount(ctx, "n", 3, fresh)
	if err != nil || res[0].Allowed || res[0].Totals[0].Current != 1 {
		t.Fatalf("check with a push's seq 3: %+v, %v; want not allowed, current 1", res, err)
	}
}
