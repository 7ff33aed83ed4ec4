package testenv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	goredis "github.com/redis/go-redis/v9"
)

// howRedis says what makes a Redis server available.
const howRedis = "set " + envRedisURL + " (e.g. redis://127.0.0.1:6379/0), run a Docker engine, or put redis-server on PATH"

// Redis is a Redis server for one test and the key prefix the test owns on
// it. Servers from [PrivateRedis] take faults: Stop, Start, Pause, Resume;
// on any other server those methods fail the test. The fault methods are
// safe for concurrent use but, like t.Fatal, must be called from the
// test's goroutine.
type Redis struct {
	URL    string // redis://host:port/db
	Addr   string // host:port
	Prefix string // a key prefix unique to the test

	srv *server // nil: a server this test does not own
}

var sharedRedis shared

// NewRedis returns a Redis server for t: the one named by
// RATESYNC_TEST_REDIS_URL, else one shared by the tests of this binary
// (a container or a local redis-server). Keys the test writes should start
// with Prefix; nothing removes them.
func NewRedis(t testing.TB) *Redis {
	t.Helper()
	u := os.Getenv(envRedisURL)
	if u == "" {
		u = sharedRedis.get(t, "Redis", startSharedRedis)
	}
	opt, err := goredis.ParseURL(u)
	if err != nil {
		t.Fatalf("testenv: parse Redis URL %s: %v", redact(u), err)
	}
	return &Redis{URL: u, Addr: opt.Addr, Prefix: Name("t")}
}

// PrivateRedis starts a Redis server from the local redis-server binary for
// t alone, stopped when t ends. It skips t (or fails it under
// RATESYNC_REQUIRE_SERVERS=1) when there is no binary; environment URLs
// and Docker are not used, since faults need a process of the harness's.
func PrivateRedis(t testing.TB) *Redis {
	t.Helper()
	bin := redisBinary(t)
	srv, err := newRedisServer(bin, "redis", 0, redisArgs)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	srv.closeAtCleanup(t)
	return &Redis{URL: "redis://" + srv.addr + "/0", Addr: srv.addr, Prefix: Name("t"), srv: srv}
}

// Client returns a client of r, closed when the test ends.
func (r *Redis) Client(t testing.TB) *goredis.Client {
	t.Helper()
	opt, err := goredis.ParseURL(r.URL)
	if err != nil {
		t.Fatalf("testenv: parse Redis URL %s: %v", redact(r.URL), err)
	}
	c := goredis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// URLVia returns r's URL with the address of p, a proxy in front of r.
func (r *Redis) URLVia(p *Proxy) string {
	return withHost(r.URL, p.addr)
}

// Stop stops the server gracefully (SIGTERM). Stopping a stopped server
// does nothing. Start brings it back.
func (r *Redis) Stop(t testing.TB) {
	t.Helper()
	fault(t, r.srv, "Stop", r.Addr, func(s *server) error { return s.stop() })
}

// Start starts a stopped server again on the same port and returns once it
// answers. It comes back empty: the harness's Redis servers keep nothing on
// disk, unless the test turned saving on (CONFIG SET save), in which case
// Stop saves and Start loads the data again.
// Starting a running server fails the test.
func (r *Redis) Start(t testing.TB) {
	t.Helper()
	fault(t, r.srv, "Start", r.Addr, func(s *server) error { return s.start(context.Background()) })
}

// Pause stops the server process (its process group) with SIGSTOP, and
// returns once it is stopped where /proc tells: connections stay open and
// nothing is answered until Resume. Pausing a paused server does nothing;
// pausing a stopped one fails the test. A server still paused when the test
// ends is resumed and stopped.
func (r *Redis) Pause(t testing.TB) {
	t.Helper()
	fault(t, r.srv, "Pause", r.Addr, func(s *server) error { return s.pause() })
}

// Resume continues a paused server (SIGCONT). Resuming a running server
// does nothing; resuming a stopped one fails the test.
func (r *Redis) Resume(t testing.TB) {
	t.Helper()
	fault(t, r.srv, "Resume", r.Addr, func(s *server) error { return s.resume() })
}

// fault applies op to srv, failing t when srv is not the test's own server
// or op fails.
func fault(t testing.TB, srv *server, op, addr string, do func(*server) error) {
	t.Helper()
	if srv == nil {
		t.Fatalf("testenv: %s %s: the harness did not start this server for this test; faults need a server from PrivateRedis or PrivatePostgres", op, addr)
	}
	if err := do(srv); err != nil {
		t.Fatalf("testenv: %s: %v", op, err)
	}
}

// startSharedRedis starts the Redis server the tests of this binary share.
func startSharedRedis(logf func(string, ...any)) (string, string, error) {
	if dockerAvailable(logf) {
		u, err := dockerRedis()
		if err == nil {
			return u, "", nil
		}
		logf("testenv: Docker answers but the Redis container did not start (%v); trying local binaries", err)
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil || !procsSupported {
		return "", howRedis, nil
	}
	srv, err := newRedisServer(bin, "redis", 0, redisArgs)
	if err != nil {
		return "", "", err
	}
	atExit(func() {
		if err := srv.close(); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: shared Redis: %v\n", err)
		}
	})
	return "redis://" + srv.addr + "/0", "", nil
}

// redisBinary returns the path of redis-server, or skips t.
func redisBinary(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil || !procsSupported {
		unavailable(t, "Redis", "this test starts its own server: put redis-server on PATH (on a Unix system)")
	}
	return bin
}

// redisArgs are the arguments of a plain, throw-away Redis server.
func redisArgs(root string, port int) ([]string, error) {
	return []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", root,
		"--daemonize", "no",
	}, nil
}

// newRedisServer starts redis-server with the arguments args returns, on a
// free port (with port+portOffset free too), in a temporary directory of
// its own.
func newRedisServer(bin, kind string, portOffset int, args func(root string, port int) ([]string, error)) (*server, error) {
	root, err := tempRoot(kind, nil)
	if err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		port, err := freePort(portOffset)
		if err != nil {
			_ = os.RemoveAll(root)
			return nil, err
		}
		a, err := args(root, port)
		if err != nil {
			_ = os.RemoveAll(root)
			return nil, err
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		s := &server{
			kind:    "Redis",
			addr:    addr,
			spec:    procSpec{name: "redis-server", path: bin, args: a, dir: root, log: filepath.Join(root, "redis.log")},
			stopSig: syscall.SIGTERM,
			ready:   func(ctx context.Context) error { return redisPing(ctx, addr) },
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

// redisPing sends PING to addr and wants PONG.
func redisPing(ctx context.Context, addr string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING: %q", strings.TrimSpace(line))
	}
	return nil
}

// withHost returns rawURL with its host:port replaced by addr.
func withHost(rawURL, addr string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return rawURL
	}
	u.Host = addr
	return u.String()
}
