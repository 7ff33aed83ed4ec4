package postgres_test

import (
	"context"
	"fmt"
	"strings"
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

// A schema whose version table records other migrations than this build's
// (a build with other files), or a later version, is refused with an
// error that says what it records; one made by this build is taken as it
// is, and its counts stay.
func TestMigrateRefusesASchemaOfOtherMigrations(t *testing.T) {
	ctx := context.Background()
	versions := `CREATE TABLE public.ratesync_counters_migrations (
		version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`
	tests := []struct {
		name     string
		recorded string // rows of the version table
		want     []string
	}{
		{"another first migration", `(1, '001_tables.sql')`, []string{`version 1 should record migration "001_schema.sql" and records 1 "001_tables.sql"`, "drop its tables"}},
		{"a later version", `(1, '001_schema.sql'), (2, '002_next.sql')`, []string{"is at version 2", "newer than this build knows", "upgrade this node"}},
		{"more migrations, of other names", `(1, '001_tables.sql'), (2, '002_check.sql'), (3, '003_check_set.sql')`, []string{`version 1 should record migration "001_schema.sql" and records 1 "001_tables.sql"`, "drop its tables"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, pool := newDB(t)
			if _, err := pool.Exec(ctx, versions); err != nil {
				t.Fatal(err)
			}
			if _, err := pool.Exec(ctx, `INSERT INTO public.ratesync_counters_migrations (version, name) VALUES `+tt.recorded); err != nil {
				t.Fatal(err)
			}
			_, err := postgres.New(ctx, pool, postgres.Config{})
			if err == nil {
				t.Fatal("New took the schema")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}

	t.Run("this build's", func(t *testing.T) {
		s, pool := newStore(t, postgres.Config{})
		now := strategytest.Base
		b := strategy.Batch{Node: "n", Seq: 1, Diffs: []strategy.Diff{{Namespace: "ns", Key: "k", WindowStart: arith.WindowStart(now, time.Minute), WindowSize: time.Minute, Value: 3}}}
		if err := s.PushDiffs(ctx, b); err != nil {
			t.Fatal(err)
		}
		again, err := postgres.New(ctx, pool, postgres.Config{})
		if err != nil {
			t.Fatalf("New on a schema this build made: %v", err)
		}
		if n, err := again.GetWindow(ctx, "ns", "k", arith.WindowStart(now, time.Minute), time.Minute); err != nil || n != 3 {
			t.Fatalf("count after a second New = %v, %v; want 3", n, err)
		}
	})
}
