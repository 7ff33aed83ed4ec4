package testenv

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// howPostgres says what makes a PostgreSQL server available.
const howPostgres = "set " + envPostgresURL + " (e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable), run a Docker engine, or install PostgreSQL so that initdb and postgres are on PATH or in /usr/lib/postgresql/<version>/bin"

// Postgres is a PostgreSQL database for one test. Databases from
// [PrivatePostgres] live on a server of their own, which takes faults:
// Stop and Start; on any other server those methods fail the test. The
// fault methods are safe for concurrent use but, like t.Fatal, must be
// called from the test's goroutine.
type Postgres struct {
	URL      string // URL of the test's own database
	Database string

	srv *server // nil: a server this test does not own
}

var sharedPostgres shared

// NewPostgres returns a fresh database for t, dropped when t ends, on the
// server named by RATESYNC_TEST_POSTGRES_URL, else on one shared by the
// tests of this binary (a container or a local server).
func NewPostgres(t testing.TB) *Postgres {
	t.Helper()
	base := os.Getenv(envPostgresURL)
	if base == "" {
		base = sharedPostgres.get(t, "PostgreSQL", startSharedPostgres)
	}
	return createDatabase(t, base, true)
}

// PrivatePostgres starts a PostgreSQL server from local binaries for t
// alone, stopped and removed when t ends, and returns a fresh database on
// it. It skips t (or fails it under RATESYNC_REQUIRE_SERVERS=1) when there
// are no binaries; environment URLs and Docker are not used, since faults
// need a process of the harness's. Starting one takes about a second
// (initdb).
func PrivatePostgres(t testing.TB) *Postgres {
	t.Helper()
	bins, user, how := findPostgres()
	if bins == nil {
		unavailable(t, "PostgreSQL", "this test starts its own server: "+how)
	}
	srv, err := newPostgresServer(bins, user)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	srv.closeAtCleanup(t)
	// The server goes away with its databases: no drop, which would wait
	// on a server the test left stopped.
	p := createDatabase(t, postgresURL(srv.addr), false)
	p.srv = srv
	return p
}

// Pool returns a pool on p's database, closed when the test ends.
func (p *Postgres) Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), p.URL)
	if err != nil {
		t.Fatalf("testenv: pool on %s: %v", redact(p.URL), err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// URLVia returns p's URL with the address of x, a proxy in front of p's
// server.
func (p *Postgres) URLVia(x *Proxy) string {
	return withHost(p.URL, x.addr)
}

// Stop stops the server gracefully (SIGINT, PostgreSQL's fast shutdown:
// clients are disconnected, committed data is kept). Stopping a stopped
// server does nothing. Start brings it back.
func (p *Postgres) Stop(t testing.TB) {
	t.Helper()
	fault(t, p.srv, "Stop", p.addr(), func(s *server) error { return s.stop() })
}

// Start starts a stopped server again on the same port and data directory
// and returns once it accepts connections. Starting a running server fails
// the test.
func (p *Postgres) Start(t testing.TB) {
	t.Helper()
	fault(t, p.srv, "Start", p.addr(), func(s *server) error { return s.start(context.Background()) })
}

// Addr returns the host:port of p's server, for a proxy in front of it.
func (p *Postgres) Addr() string { return p.addr() }

// Pause stops the server's processes (its process group: the postmaster
// and every backend) with SIGSTOP: connections stay open and nothing is
// answered until Resume. As Redis's Pause: a private server only.
func (p *Postgres) Pause(t testing.TB) {
	t.Helper()
	fault(t, p.srv, "Pause", p.addr(), func(s *server) error { return s.pause() })
}

// Resume continues a paused server (SIGCONT).
func (p *Postgres) Resume(t testing.TB) {
	t.Helper()
	fault(t, p.srv, "Resume", p.addr(), func(s *server) error { return s.resume() })
}

func (p *Postgres) addr() string {
	if u, err := url.Parse(p.URL); err == nil {
		return u.Host
	}
	return p.Database
}

// createDatabase creates a database with a fresh name on the server at base
// and returns it. With drop, the database is dropped when t ends.
func createDatabase(t testing.TB, base string, drop bool) *Postgres {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("testenv: connect %s: %v", redact(base), err)
	}
	defer admin.Close(ctx)
	db := Name("ratesync_")
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		t.Fatalf("testenv: create database %s on %s: %v", db, redact(base), err)
	}
	if drop {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if c, err := pgx.Connect(ctx, base); err == nil {
				_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
				_ = c.Close(ctx)
			}
		})
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("testenv: parse PostgreSQL URL %s: %v", redact(base), err)
	}
	u.Path = "/" + db
	return &Postgres{URL: u.String(), Database: db}
}

// startSharedPostgres starts the PostgreSQL server the tests of this
// binary share.
func startSharedPostgres(logf func(string, ...any)) (string, string, error) {
	if dockerAvailable(logf) {
		u, err := dockerPostgres()
		if err == nil {
			return u, "", nil
		}
		logf("testenv: Docker answers but the PostgreSQL container did not start (%v); trying local binaries", err)
	}
	bins, user, how := findPostgres()
	if bins == nil {
		return "", how, nil
	}
	start := time.Now()
	srv, err := newPostgresServer(bins, user)
	if err != nil {
		return "", "", err
	}
	logf("testenv: shared PostgreSQL %s (%s) on %s started in %v", bins.version, bins.dir, srv.addr, time.Since(start).Round(time.Millisecond))
	atExit(func() {
		if err := srv.close(); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: shared PostgreSQL: %v\n", err)
		}
	})
	return postgresURL(srv.addr), "", nil
}

// postgresURL is the URL of the postgres database on a harness's server.
func postgresURL(addr string) string {
	return "postgres://postgres@" + addr + "/postgres?sslmode=disable"
}

// pgBins is one PostgreSQL installation.
type pgBins struct {
	dir     string
	version string // major version, when the directory tells it
}

func (b *pgBins) path(name string) string { return filepath.Join(b.dir, name) }

// findPostgres finds initdb and postgres in one directory: that of
// postgres or initdb on PATH (symbolic links followed), else the newest of
// Debian's /usr/lib/postgresql/*/bin and Red Hat's /usr/pgsql-*/bin. It
// also returns the OS user to run them as. When there is nothing to run,
// bins is nil and how says why.
func findPostgres() (bins *pgBins, user *osUser, how string) {
	var dirs []string
	for _, name := range []string{"postgres", "initdb"} {
		if p, err := exec.LookPath(name); err == nil {
			if r, err := filepath.EvalSymlinks(p); err == nil {
				dirs = append(dirs, filepath.Dir(r))
			}
			dirs = append(dirs, filepath.Dir(p))
		}
	}
	var versioned []string
	for _, pattern := range []string{"/usr/lib/postgresql/*/bin", "/usr/pgsql-*/bin"} {
		m, _ := filepath.Glob(pattern)
		versioned = append(versioned, m...)
	}
	slices.SortFunc(versioned, func(a, b string) int { return -cmp.Compare(majorVersion(a), majorVersion(b)) })
	dirs = append(dirs, versioned...)
	for _, d := range dirs {
		if isExecutable(filepath.Join(d, "initdb")) && isExecutable(filepath.Join(d, "postgres")) {
			bins = &pgBins{dir: d}
			if v := majorVersion(d); v > 0 {
				bins.version = strconv.Itoa(v)
			}
			break
		}
	}
	if bins == nil {
		return nil, nil, howPostgres
	}
	user, err := serverUser()
	if err != nil {
		return nil, nil, err.Error()
	}
	return bins, user, ""
}

// majorVersion returns the version number in a path such as
// /usr/lib/postgresql/15/bin or /usr/pgsql-16/bin, or 0.
func majorVersion(dir string) int {
	base := filepath.Base(filepath.Dir(dir))
	base = strings.TrimPrefix(base, "pgsql-")
	v, err := strconv.Atoi(base)
	if err != nil {
		return 0
	}
	return v
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// newPostgresServer makes a cluster with initdb in a temporary directory
// and starts postgres on it, on a free loopback port, as user (nil: the
// current user), tuned for tests: no fsync, no full-page writes and
// asynchronous commits, which only matter if the server or the machine
// crashes (a graceful Stop keeps every commit). postgres runs directly, not
// through pg_ctl, so that the harness owns the process: pg_ctl would
// detach it.
func newPostgresServer(bins *pgBins, user *osUser) (*server, error) {
	root, err := tempRoot("postgres", user)
	if err != nil {
		return nil, err
	}
	data := filepath.Join(root, "data")
	log := filepath.Join(root, "postgres.log")
	err = run(procSpec{
		name: "initdb",
		path: bins.path("initdb"),
		args: []string{"-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-locale", "-N"},
		dir:  root,
		log:  filepath.Join(root, "initdb.log"),
		user: user,
	}, 2*time.Minute)
	if err != nil {
		_ = os.RemoveAll(root)
		return nil, fmt.Errorf("initdb in %s: %w", root, err)
	}
	// A Unix socket in root, unless its path would be too long for one.
	socketDir := root
	if len(root) > 80 {
		socketDir = ""
	}
	for attempt := 1; ; attempt++ {
		port, err := freePort(0)
		if err != nil {
			_ = os.RemoveAll(root)
			return nil, err
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		s := &server{
			kind: "PostgreSQL",
			addr: addr,
			spec: procSpec{
				name: "postgres",
				path: bins.path("postgres"),
				args: []string{
					"-D", data,
					"-p", strconv.Itoa(port),
					"-c", "listen_addresses=127.0.0.1",
					"-c", "unix_socket_directories=" + socketDir,
					"-c", "fsync=off",
					"-c", "synchronous_commit=off",
					"-c", "full_page_writes=off",
					"-c", "max_connections=300",
					// A backstop: a backend left running a query after its test
					// binary died (Pdeathsig reaches the postmaster only) gives up.
					"-c", "statement_timeout=300s",
					"-c", "shared_buffers=32MB",
				},
				dir:  root,
				log:  log,
				user: user,
			},
			stopSig: syscall.SIGINT,
			ready:   func(ctx context.Context) error { return postgresPing(ctx, postgresURL(addr)) },
			root:    root,
		}
		err = s.start(context.Background())
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, errBusyPort) || attempt == 3 {
			_ = os.RemoveAll(root)
			return nil, err
		}
	}
}

// postgresPing connects to the server at u.
func postgresPing(ctx context.Context, u string) error {
	c, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	return c.Close(ctx)
}
