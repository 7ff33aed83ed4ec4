package postgres_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/arith"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ratesync/ratesync/internal/strategytest"
	"github.com/ratesync/ratesync/internal/testenv"
	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/postgres"
)

// logBuffer is a slog destination that tests read while the store writes.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }

// closedPortURL is a PostgreSQL URL on a loopback port no server listens
// on: a connection to it is refused.
func closedPortURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return "postgres://nobody@" + addr + "/none"
}

// A store starts without its server, as a Redis store does: New succeeds,
// calls fail as the server's connection does, and once the server is up
// the first calls migrate the schema, once, and succeed.
func TestNewWithTheServerDownMigratesOnFirstCall(t *testing.T) {
	p := testenv.PrivatePostgres(t)
	pool := p.Pool(t)
	p.Stop(t)
	var logs logBuffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := postgres.New(ctx, pool, postgres.Config{Logger: logs.logger()})
	if err != nil {
		t.Fatalf("New with the server stopped: %v", err)
	}
	now := strategytest.Base
	start := arith.WindowStart(now, time.Minute)
	batch := func(node string) strategy.Batch {
		return strategy.Batch{Node: node, Seq: 1, Diffs: []strategy.Diff{diff("ns", "k", start, time.Minute, 1)}}
	}
	if err := s.PushDiffs(ctx, batch("down")); err == nil || !strings.Contains(err.Error(), "begin migration") {
		t.Fatalf("PushDiffs with the server stopped: %v, want a failure to reach it", err)
	}
	if _, err := s.GetWindow(ctx, "ns", "k", start, time.Minute); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("GetWindow with the server stopped: %v, want a failure to reach it", err)
	}
	if _, err := s.CheckAndCount(ctx, "down", 2, []strategy.Check{{Namespace: "ns", Key: "k", Now: now, Cost: 1,
		Limits: []strategy.CheckLimit{{Limit: 10, WindowSize: time.Minute}}}}); err == nil {
		t.Fatal("CheckAndCount with the server stopped: no error")
	}

	p.Start(t)
	// Concurrent first calls: one migrates, the others wait for it.
	const callers = 8
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() { errs[i] = s.PushDiffs(ctx, batch(fmt.Sprintf("node-%d", i))) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("PushDiffs #%d once the server is up: %v", i, err)
		}
	}
	if got, err := s.GetWindow(ctx, "ns", "k", start, time.Minute); err != nil || got != callers {
		t.Fatalf("GetWindow: %v, %v; want %d", got, err, callers)
	}
	var rows, version int
	if err := pool.QueryRow(ctx, `SELECT count(*), max(version) FROM public.ratesync_counters_migrations`).Scan(&rows, &version); err != nil {
		t.Fatal(err)
	}
	if want := migrationCount(t); rows != want || version != want {
		t.Errorf("version table: %d rows, version %d; want %d of each", rows, version, want)
	}
	if n := strings.Count(logs.String(), "postgres: schema migrated"); n != 1 {
		t.Errorf("%d lines logging the migration, want 1:\n%s", n, logs.String())
	}
	if err := s.Ready(ctx); err != nil {
		t.Errorf("Ready once migrated: %v", err)
	}
}

// A server that answers but refuses the migration (here, a role that may
// not create the tables) fails every call with its reason, logged once;
// once the schema is migrated by a role that may, the calls succeed.
func TestMigrationRefusedAfterAStartWithoutTheServer(t *testing.T) {
	p, owner := newDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	role := testenv.Name("ratesync_app_")
	if _, err := owner.Exec(ctx, "CREATE ROLE "+role+" LOGIN"); err != nil {
		t.Skipf("cannot create a role on this server: %v", err)
	}
	t.Cleanup(func() {
		_, _ = owner.Exec(context.Background(), "DROP OWNED BY "+role)
		_, _ = owner.Exec(context.Background(), "DROP ROLE "+role)
	})
	for _, sql := range []string{
		"REVOKE CREATE ON SCHEMA public FROM PUBLIC",
		"REVOKE CREATE, TEMPORARY ON DATABASE " + p.Database + " FROM PUBLIC",
		"GRANT USAGE ON SCHEMA public TO " + role,
	} {
		if _, err := owner.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	u, err := url.Parse(p.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.NewProxy(t, u.Host)
	u, err = url.Parse(p.URLVia(proxy))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	app, err := pgxpool.New(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(app.Close)

	proxy.Cut()
	var logs logBuffer
	s, err := postgres.New(ctx, app, postgres.Config{Logger: logs.logger()})
	if err != nil {
		t.Fatalf("New with the server out of reach: %v", err)
	}
	proxy.Restore()
	start := arith.WindowStart(strategytest.Base, time.Minute)
	for i := range 3 {
		_, err := s.GetWindow(ctx, "ns", "k", start, time.Minute)
		if err == nil || !strings.Contains(err.Error(), "create the version table") || !strings.Contains(err.Error(), "permission denied") {
			t.Fatalf("call %d on a server refusing the migration: %v, want the refusal", i, err)
		}
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 || !strings.Contains(logs.String(), "permission denied") {
		t.Errorf("%d WARN lines for 3 calls refused for one reason, want 1:\n%s", n, logs.String())
	}

	// The owner migrates; the role gets what using the store needs.
	if _, err := postgres.New(ctx, owner, postgres.Config{}); err != nil {
		t.Fatal(err)
	}
	grant := "GRANT SELECT, INSERT, UPDATE, DELETE ON public.ratesync_counters, public.ratesync_lanes, public.ratesync_counters_buckets, " +
		"public.ratesync_counters_anchored, public.ratesync_counters_logs, public.ratesync_counters_logentries TO " + role
	for _, sql := range []string{grant, "GRANT SELECT ON public.ratesync_counters_migrations TO " + role} {
		if _, err := owner.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	useEverything(t, s, 1)
}

// New's context bounds its attempt: a deadline that passes (or a server
// that cannot be reached) leaves the migration to the first call, a
// canceled context is the caller giving up.
func TestNewContext(t *testing.T) {
	pool, err := pgxpool.New(context.Background(), closedPortURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	<-ctx.Done()
	s, err := postgres.New(ctx, pool, postgres.Config{})
	if err != nil || s == nil {
		t.Fatalf("New past its deadline: %v, want the store", err)
	}
	if err := s.Ready(context.Background()); err == nil || !strings.Contains(err.Error(), "begin migration") {
		t.Errorf("Ready with no server: %v, want a failure to reach it", err)
	}
	canceled, stop := context.WithCancel(context.Background())
	stop()
	if _, err := postgres.New(canceled, pool, postgres.Config{}); err != context.Canceled {
		t.Errorf("New with a canceled context: %v, want context.Canceled", err)
	}
}
