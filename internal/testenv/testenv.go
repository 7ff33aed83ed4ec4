// Package testenv provides real Redis and PostgreSQL servers to tests, a TCP
// proxy that injects network faults, and the process faults the project's
// tests use (stop and start, pause and resume) on servers it started
// itself. Test-only: nothing outside _test.go files imports it. It owns
// server discovery and the lifetime of every process it starts; it does
// not own schemas or keys, which belong to the code under test.
//
// # Where servers come from
//
// [NewRedis] and [NewPostgres] look, in order, for:
//
//  1. RATESYNC_TEST_REDIS_URL / RATESYNC_TEST_POSTGRES_URL (the server is
//     used as is and never stopped; the PostgreSQL user must be allowed to
//     CREATE DATABASE);
//  2. a Docker engine that answers within a second: one container per test
//     binary, started with testcontainers-go's redis and postgres modules
//     (RATESYNC_TEST_DOCKER=0 skips this step);
//  3. local server binaries: redis-server; initdb and postgres from PATH or
//     from /usr/lib/postgresql/*/bin (newest first). One server per test
//     binary, on a free 127.0.0.1 port, in its own temporary directory,
//     started on first use. As root, PostgreSQL runs as the "postgres" OS
//     user, which PostgreSQL requires.
//
// The servers the harness starts keep nothing they need not: Redis runs
// with --save "" --appendonly no; PostgreSQL with fsync=off,
// full_page_writes=off and synchronous_commit=off, listening on 127.0.0.1
// and a Unix socket in its temporary directory. Readiness is polled (PING,
// a pgx connection) with a deadline; a server's output goes to a log file
// whose last lines end any error about it.
//
// When none is found the test is skipped with a message naming the
// variables and binaries that enable it; with RATESYNC_REQUIRE_SERVERS=1
// it fails instead.
//
// Each test gets its own Redis key prefix ([Redis.Prefix]) or its own
// PostgreSQL database, dropped when the test ends.
//
// # Private servers and faults
//
// [PrivateRedis], [PrivatePostgres], [RedisCluster] and [RedisSentinel]
// always start servers from local binaries for the calling test alone.
// Those of PrivateRedis take Stop, Start, Pause and Resume, those of
// PrivatePostgres Stop and Start, without disturbing other tests.
// [NewProxy] puts a TCP proxy in front of any server, for latency, cut and
// reset connections and lost replies.
//
// # Process lifetime
//
// Every server is started in a process group of its own and, on Linux,
// with a parent-death signal: the kernel sends it SIGKILL when the test
// binary dies, however it dies, even while the server is paused (SIGKILL
// ends a stopped process). The signal is tied to the OS thread that started
// the child, so all children are started from one goroutine locked to its
// thread for the life of the binary. PostgreSQL's backends, in sessions of
// their own, exit when they see their postmaster gone. Other Unix systems
// have no such signal: there a server outlives a test binary that dies
// without running its cleanups. Without Unix, no local server is started.
//
// # TestMain
//
// Shared servers live as long as the test binary. A package that uses this
// package must stop them from its TestMain:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
// Without it the servers still die with the test binary (on Linux) but
// skip a clean shutdown, and their temporary directories are removed only
// by the next test binary that starts a server.
package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// Environment variables.
const (
	// envRedisURL names a Redis server to use instead of starting one,
	// e.g. redis://127.0.0.1:6379/0.
	envRedisURL = "RATESYNC_TEST_REDIS_URL"
	// envPostgresURL names a PostgreSQL server to use instead of starting
	// one; its user must be allowed to CREATE DATABASE, e.g.
	// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable.
	envPostgresURL = "RATESYNC_TEST_POSTGRES_URL"
	// envRequireServers set to 1 turns every skip for want of a server into
	// a failure (for CI, where a silently skipped suite is a bug).
	envRequireServers = "RATESYNC_REQUIRE_SERVERS"
	// envDocker set to 0 stops the harness from trying a Docker engine, so
	// that local binaries are used even where Docker runs.
	envDocker = "RATESYNC_TEST_DOCKER"
)

// Main runs the tests of a package and then stops the servers the harness
// shared between its tests. Call it from TestMain:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
// It does not return: it exits with the tests' exit code.
func Main(m *testing.M) {
	mainCalled.Store(true)
	code := m.Run()
	stopShared()
	os.Exit(code)
}

var (
	mainCalled atomic.Bool // Main is running the tests

	sharedMu    sync.Mutex
	sharedStops []func() // stops of shared servers, run in reverse by Main
)

// atExit registers stop to run when Main ends.
func atExit(stop func()) {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	sharedStops = append(sharedStops, stop)
}

// stopShared stops every shared server, last started first.
func stopShared() {
	sharedMu.Lock()
	stops := sharedStops
	sharedStops = nil
	sharedMu.Unlock()
	for i := len(stops) - 1; i >= 0; i-- {
		stops[i]()
	}
}

// warnNoMain tells t, once per binary, that shared servers will not be
// stopped cleanly because TestMain does not call Main.
var warnNoMainOnce sync.Once

func warnNoMain(t testing.TB) {
	t.Helper()
	if mainCalled.Load() {
		return
	}
	warnNoMainOnce.Do(func() {
		t.Logf("testenv: TestMain does not call testenv.Main: the shared server dies with the test binary instead of being stopped cleanly")
	})
}

// unavailable skips t because no server of kind what ("Redis",
// "PostgreSQL") can be had, or fails it under RATESYNC_REQUIRE_SERVERS=1.
// how says what would enable one.
func unavailable(t testing.TB, what, how string) {
	t.Helper()
	msg := fmt.Sprintf("testenv: no %s server for this test: %s", what, how)
	if os.Getenv(envRequireServers) == "1" {
		t.Fatal(msg + " (" + envRequireServers + "=1 forbids skipping)")
	}
	t.Skip(msg)
}

// Name returns a short random name, unique per call, safe in identifiers.
func Name(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// shared is a server started at most once per test binary. The zero value
// is ready to use; get is safe for concurrent use.
type shared struct {
	once sync.Once
	url  string // the server's URL; empty when none could be had
	how  string // when url is empty and err nil: what would enable a server
	err  error  // the server could not be started
}

// get returns the shared server's URL, starting it with start on first use.
// It skips or fails t as the outcome demands.
func (s *shared) get(t testing.TB, what string, start func(logf func(string, ...any)) (url, how string, err error)) string {
	t.Helper()
	s.once.Do(func() { s.url, s.how, s.err = start(t.Logf) })
	switch {
	case s.err != nil:
		t.Fatalf("testenv: start shared %s server: %v", what, s.err)
	case s.url == "":
		unavailable(t, what, s.how)
	}
	warnNoMain(t)
	return s.url
}

// redact hides the password of a URL for messages.
func redact(u string) string {
	if p, err := url.Parse(u); err == nil && p.User != nil {
		if _, ok := p.User.Password(); ok {
			p.User = url.UserPassword(p.User.Username(), "xxxxx")
			return p.String()
		}
	}
	return strings.TrimSpace(u)
}
