//go:build unix

package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { Main(m) }

// timeout bounds one step of a test.
func timeout(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// noRetry returns a client of url that does not retry failed commands and
// honours context deadlines, so that faults show.
func noRetry(t *testing.T, url string) *goredis.Client {
	t.Helper()
	opt, err := goredis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	opt.MaxRetries = -1
	opt.DialTimeout = time.Second
	opt.ContextTimeoutEnabled = true // go-redis ignores context deadlines otherwise
	c := goredis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestSharedRedis(t *testing.T) {
	t.Parallel()
	a, b := NewRedis(t), NewRedis(t)
	if a.Addr != b.Addr {
		t.Errorf("two NewRedis on %s and %s, want one shared server", a.Addr, b.Addr)
	}
	if a.Prefix == b.Prefix {
		t.Errorf("two NewRedis share prefix %q", a.Prefix)
	}
	if env := os.Getenv(envRedisURL); env != "" && a.URL != env {
		t.Errorf("NewRedis URL %s, want %s from %s", a.URL, env, envRedisURL)
	}
	if a.srv != nil {
		t.Errorf("a shared server takes faults; it must not")
	}
	ctx := timeout(t, 10*time.Second)
	c := a.Client(t)
	if err := c.Set(ctx, a.Prefix+"k", "v", time.Minute).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if got, err := b.Client(t).Get(ctx, a.Prefix+"k").Result(); err != nil || got != "v" {
		t.Fatalf("GET from the other handle = %q, %v; want v", got, err)
	}
}

func TestSharedPostgres(t *testing.T) {
	t.Parallel()
	var base, db string
	t.Run("db", func(t *testing.T) {
		p := NewPostgres(t)
		q := NewPostgres(t)
		if p.Database == q.Database {
			t.Fatalf("two NewPostgres share database %s", p.Database)
		}
		ctx := timeout(t, 20*time.Second)
		pool := p.Pool(t)
		if _, err := pool.Exec(ctx, "CREATE TABLE t (k text PRIMARY KEY, v bigint)"); err != nil {
			t.Fatalf("create table: %v", err)
		}
		if _, err := pool.Exec(ctx, "INSERT INTO t VALUES ($1, $2)", "a", 1); err != nil {
			t.Fatalf("insert: %v", err)
		}
		var v int64
		if err := pool.QueryRow(ctx, "SELECT v FROM t WHERE k = $1", "a").Scan(&v); err != nil || v != 1 {
			t.Fatalf("select = %d, %v; want 1", v, err)
		}
		base, db = withPath(p.URL, "/postgres"), p.Database
		if env := os.Getenv(envPostgresURL); env != "" && hostOf(t, p.URL) != hostOf(t, env) {
			t.Errorf("NewPostgres on %s, want the server of %s", hostOf(t, p.URL), envPostgresURL)
		}
	})
	if base == "" {
		return
	}
	ctx := timeout(t, 20*time.Second)
	c, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer c.Close(ctx)
	var n int
	if err := c.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1", db).Scan(&n); err != nil || n != 0 {
		t.Errorf("database %s after its test: count %d, %v; want dropped", db, n, err)
	}
}

func withPath(u, path string) string {
	i := strings.Index(u, "://")
	j := strings.IndexAny(u[i+3:], "/?")
	if j < 0 {
		return u + path
	}
	rest := u[i+3+j:]
	q := ""
	if k := strings.IndexByte(rest, '?'); k >= 0 {
		q = rest[k:]
	}
	return u[:i+3+j] + path + q
}

func TestPrivateRedisStopStart(t *testing.T) {
	t.Parallel()
	r := PrivateRedis(t)
	c := noRetry(t, r.URL)
	ctx := timeout(t, 30*time.Second)
	if err := c.Set(ctx, r.Prefix+"k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	addr := r.Addr
	r.Stop(t)
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING after Stop succeeded")
	}
	r.Stop(t) // stopping a stopped server does nothing
	r.Start(t)
	if r.Addr != addr {
		t.Fatalf("Start moved the server from %s to %s", addr, r.Addr)
	}
	if n, err := c.Exists(ctx, r.Prefix+"k").Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS after restart = %d, %v; want 0 (empty)", n, err)
	}
	// With saving turned on, a graceful Stop saves and Start loads.
	if err := c.ConfigSet(ctx, "save", "3600 1").Err(); err != nil {
		t.Fatalf("CONFIG SET save: %v", err)
	}
	if err := c.Set(ctx, r.Prefix+"kept", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	pid := r.srv.pid()
	r.Stop(t)
	if alive(pid) {
		t.Fatalf("redis-server (pid %d) alive after Stop", pid)
	}
	r.Start(t)
	if got, err := c.Get(ctx, r.Prefix+"kept").Result(); err != nil || got != "v" {
		t.Fatalf("GET after a saving Stop and Start = %q, %v; want v", got, err)
	}
}

func TestPrivateRedisPause(t *testing.T) {
	t.Parallel()
	var pid int
	var root string
	t.Run("paused", func(t *testing.T) {
		r := PrivateRedis(t)
		c := noRetry(t, r.URL)
		ctx := timeout(t, 30*time.Second)
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatalf("PING: %v", err)
		}
		pid, root = r.srv.pid(), r.srv.root
		r.Pause(t)
		if st, ok := procState(pid); ok && st != 'T' {
			t.Errorf("redis-server (pid %d) in state %c while paused; want T", pid, st)
		}
		r.Pause(t) // pausing a paused server does nothing
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err := c.Ping(short).Err()
		cancel()
		if err == nil {
			t.Fatal("PING while paused succeeded")
		}
		r.Resume(t)
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatalf("PING after Resume: %v", err)
		}
		r.Resume(t) // resuming a running server does nothing
		r.Pause(t)  // and end paused: the cleanup resumes and stops it
	})
	if alive(pid) {
		t.Errorf("redis-server (pid %d) alive after a test ended with it paused", pid)
	}
	if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s not removed: %v", root, err)
	}
}

func TestPrivatePostgresStopStart(t *testing.T) {
	t.Parallel()
	start := time.Now()
	p := PrivatePostgres(t)
	t.Logf("PrivatePostgres took %v", time.Since(start))
	ctx := timeout(t, 60*time.Second)
	pool := p.Pool(t)
	if _, err := pool.Exec(ctx, "CREATE TABLE t (v int); INSERT INTO t VALUES (42)"); err != nil {
		t.Fatalf("create: %v", err)
	}
	p.Stop(t)
	if err := ping(ctx, p.URL); err == nil {
		t.Fatal("connect after Stop succeeded")
	}
	p.Start(t)
	var v int
	if err := queryRow(ctx, p.URL, "SELECT v FROM t", &v); err != nil || v != 42 {
		t.Fatalf("after Stop and Start: v = %d, %v; want 42", v, err)
	}
	// A graceful Stop keeps the latest commit, asynchronous as it is.
	if err := queryRow(ctx, p.URL, "UPDATE t SET v = 43", nil); err != nil {
		t.Fatalf("update: %v", err)
	}
	pid := p.srv.pid()
	p.Stop(t)
	if alive(pid) {
		t.Fatalf("postmaster (pid %d) alive after Stop", pid)
	}
	p.Start(t)
	if err := queryRow(ctx, p.URL, "SELECT v FROM t", &v); err != nil || v != 43 {
		t.Fatalf("after the second Stop and Start: v = %d, %v; want 43", v, err)
	}
}

// queryRow runs q on a new connection to url and scans its one column
// into dst (nil: no row expected).
func queryRow(ctx context.Context, url, q string, dst any) error {
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	if dst == nil {
		_, err = c.Exec(ctx, q)
		return err
	}
	return c.QueryRow(ctx, q).Scan(dst)
}

func ping(ctx context.Context, url string) error {
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	return c.Close(ctx)
}

// pid returns the pid of s's process, or 0.
func (s *server) pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil {
		return 0
	}
	return s.p.pid
}

// alive reports whether pid runs: it exists and is no zombie (whoever
// adopted an orphan may not reap it). Without /proc it asks kill(2).
func alive(pid int) bool {
	if st, ok := procState(pid); ok {
		return st != 'Z' && st != 'X'
	}
	if _, err := os.Stat("/proc/self/stat"); err == nil {
		return false // /proc works, and has no entry for pid
	}
	return pidExists(pid)
}

func TestProxyLatency(t *testing.T) {
	t.Parallel()
	r := NewRedis(t)
	p := NewProxy(t, r.Addr)
	c := noRetry(t, r.URLVia(p))
	ctx := timeout(t, 20*time.Second)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING through proxy: %v", err)
	}
	const d = 100 * time.Millisecond
	p.SetLatency(d)
	start := time.Now()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING with latency: %v", err)
	}
	if rtt := time.Since(start); rtt < 2*d {
		t.Errorf("round trip with latency %v took %v; want >= %v", d, rtt, 2*d)
	}
	// A pipeline of many commands pays the latency once, not per chunk.
	start = time.Now()
	pipe := c.Pipeline()
	for i := range 1000 {
		pipe.Set(ctx, fmt.Sprintf("%s%d", r.Prefix, i), i, time.Minute)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatalf("pipeline: %v", err)
	}
	if rtt := time.Since(start); rtt > 10*d {
		t.Errorf("pipeline with latency %v took %v; want about %v", d, rtt, 2*d)
	}
	p.SetLatency(0)
	start = time.Now()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING without latency: %v", err)
	}
	if rtt := time.Since(start); rtt >= d {
		t.Errorf("round trip without latency took %v", rtt)
	}
}

func TestProxyCutRestore(t *testing.T) {
	t.Parallel()
	r := NewRedis(t)
	p := NewProxy(t, r.Addr)
	c := noRetry(t, r.URLVia(p))
	ctx := timeout(t, 20*time.Second)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING through proxy: %v", err)
	}
	p.Cut()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING on a cut connection succeeded")
	}
	if err := c.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("PING while cut: %v; want connection refused", err)
	}
	p.Restore()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Restore: %v", err)
	}
}

func TestProxyReset(t *testing.T) {
	t.Parallel()
	r := NewRedis(t)
	p := NewProxy(t, r.Addr)
	// A raw connection: go-redis would quietly replace a dead pooled one.
	conn := rawRedis(t, p.addr)
	if err := rawPing(conn); err != nil {
		t.Fatalf("PING through proxy: %v", err)
	}
	p.Reset()
	if err := rawPing(conn); err == nil {
		t.Fatal("PING on a reset connection succeeded")
	} else if !strings.Contains(err.Error(), "reset") {
		t.Errorf("PING on a reset connection: %v; want connection reset", err)
	}
	if err := rawPing(rawRedis(t, p.addr)); err != nil {
		t.Fatalf("PING on a new connection after Reset: %v", err)
	}
}

func rawRedis(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func rawPing(c net.Conn) error {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	if got := string(buf[:n]); got != "+PONG\r\n" {
		return fmt.Errorf("PING: %q", got)
	}
	return nil
}

func TestProxyDropReplies(t *testing.T) {
	t.Parallel()
	r := NewRedis(t)
	p := NewProxy(t, r.Addr)
	c := noRetry(t, r.URLVia(p))
	direct := r.Client(t)
	ctx := timeout(t, 20*time.Second)
	key := r.Prefix + "n"
	if err := c.Ping(ctx).Err(); err != nil { // connect, handshake included
		t.Fatalf("PING through proxy: %v", err)
	}
	p.DropReplies(1)
	if n, err := c.Incr(ctx, key).Result(); err == nil {
		t.Fatalf("INCR with its reply dropped = %d, nil error; want an error", n)
	}
	if n, err := direct.Get(ctx, key).Int(); err != nil || n != 1 {
		t.Fatalf("value after the lost reply = %d, %v; want 1 (applied)", n, err)
	}
	if n, err := c.Incr(ctx, key).Result(); err != nil || n != 2 {
		t.Fatalf("next INCR = %d, %v; want 2", n, err)
	}
}

func TestProxyPostgres(t *testing.T) {
	t.Parallel()
	db := NewPostgres(t)
	p := NewProxy(t, hostOf(t, db.URL))
	ctx := timeout(t, 30*time.Second)
	c, err := pgx.Connect(ctx, db.URLVia(p))
	if err != nil {
		t.Fatalf("connect through proxy: %v", err)
	}
	defer c.Close(context.Background())
	var one int
	if err := c.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatalf("query through proxy: %v", err)
	}
	p.Reset()
	if err := c.QueryRow(ctx, "SELECT 1").Scan(&one); err == nil {
		t.Fatal("query on a reset connection succeeded")
	}
	if err := ping(ctx, db.URLVia(p)); err != nil {
		t.Fatalf("new connection after Reset: %v", err)
	}
}

func hostOf(t testing.TB, url string) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)
}

func TestRedisCluster(t *testing.T) {
	t.Parallel()
	cl := RedisCluster(t)
	if len(cl.Addrs) != 3 {
		t.Fatalf("%d nodes, want 3", len(cl.Addrs))
	}
	ctx := timeout(t, 30*time.Second)
	c := cl.Client(t)
	prefix := Name("t")
	nodes, err := c.ClusterNodes(ctx).Result()
	if err != nil {
		t.Fatalf("CLUSTER NODES: %v", err)
	}
	if n := strings.Count(nodes, "master"); n != 3 {
		t.Errorf("CLUSTER NODES shows %d masters, want 3:\n%s", n, nodes)
	}
	// Keys in slots of every node.
	owners := map[string]bool{}
	for i := 0; len(owners) < 3 && i < 100; i++ {
		key := fmt.Sprintf("%sk%d", prefix, i)
		if err := c.Set(ctx, key, i, time.Minute).Err(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
		if got, err := c.Get(ctx, key).Int(); err != nil || got != i {
			t.Fatalf("GET %s = %d, %v; want %d", key, got, err, i)
		}
		slot, err := c.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT: %v", err)
		}
		owners[fmt.Sprint(slot*3/16384)] = true
	}
	if len(owners) != 3 {
		t.Errorf("keys landed on %d nodes, want 3", len(owners))
	}
}

func TestRedisSentinel(t *testing.T) {
	t.Parallel()
	s := RedisSentinel(t)
	ctx := timeout(t, 20*time.Second)
	key := Name("t") + "k"
	if err := s.Client(t).Set(ctx, key, "v", time.Minute).Err(); err != nil {
		t.Fatalf("SET through sentinel: %v", err)
	}
	sc := goredis.NewSentinelClient(&goredis.Options{Addr: s.addrs[0]})
	defer sc.Close()
	addr, err := sc.GetMasterAddrByName(ctx, s.masterName).Result()
	if err != nil || len(addr) != 2 {
		t.Fatalf("sentinel names master %v, %v", addr, err)
	}
	if got, err := noRetry(t, "redis://"+net.JoinHostPort(addr[0], addr[1])+"/0").Get(ctx, key).Result(); err != nil || got != "v" {
		t.Fatalf("GET on master = %q, %v; want v", got, err)
	}
}

// recorder is a testing.TB that records Fatal and Skip instead of ending
// the test; run calls f on it in a goroutine of its own.
type recorder struct {
	testing.TB
	mu      sync.Mutex
	fatal   string
	skipped string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatal(args ...any) {
	r.mu.Lock()
	r.fatal = fmt.Sprint(args...)
	r.mu.Unlock()
	runtime.Goexit()
}
func (r *recorder) Fatalf(format string, args ...any) { r.Fatal(fmt.Sprintf(format, args...)) }
func (r *recorder) Skip(args ...any) {
	r.mu.Lock()
	r.skipped = fmt.Sprint(args...)
	r.mu.Unlock()
	runtime.Goexit()
}

func (r *recorder) run(f func(testing.TB)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
}

func TestFaultsNeedOwnServer(t *testing.T) {
	t.Parallel()
	r := NewRedis(t)
	rec := &recorder{TB: t}
	rec.run(func(tb testing.TB) { r.Pause(tb) })
	if !strings.Contains(rec.fatal, "did not start this server") {
		t.Errorf("Pause on a shared server: fatal %q", rec.fatal)
	}
	rec = &recorder{TB: t}
	rec.run(func(tb testing.TB) { (&Postgres{URL: "postgres://x@127.0.0.1:1/db"}).Stop(tb) })
	if !strings.Contains(rec.fatal, "did not start this server") {
		t.Errorf("Stop on a foreign server: fatal %q", rec.fatal)
	}
}

func TestMissingBinaries(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	for _, tc := range []struct {
		name    string
		require string
		f       func(testing.TB)
	}{
		{"redis skip", "", func(tb testing.TB) { PrivateRedis(tb) }},
		{"cluster require", "1", func(tb testing.TB) { RedisCluster(tb) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(envRequireServers, tc.require)
			rec := &recorder{TB: t}
			rec.run(tc.f)
			got := rec.skipped
			if tc.require == "1" {
				got = rec.fatal
			}
			if !strings.Contains(got, "redis-server") {
				t.Errorf("skipped %q, fatal %q; want the message naming redis-server in the %s", rec.skipped, rec.fatal, map[string]string{"": "skip", "1": "failure"}[tc.require])
			}
		})
	}
}

func TestDockerProbeIsQuick(t *testing.T) {
	t.Parallel()
	start := time.Now()
	up := dockerListening()
	if d := time.Since(start); !up && d > 3*time.Second {
		t.Errorf("finding no Docker engine took %v", d)
	}
	t.Logf("Docker engine listening: %v (probe took %v)", up, time.Since(start))
}

func TestProxyDropRepliesSparesNewConnections(t *testing.T) {
	t.Parallel()
	r := NewRedis(t)
	p := NewProxy(t, r.Addr)
	ctx := timeout(t, 20*time.Second)
	old := noRetry(t, r.URLVia(p))
	if err := old.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING through proxy: %v", err)
	}
	p.DropReplies(1)
	key := r.Prefix + "n"
	// A connection opened after DropReplies keeps its handshake and replies.
	if n, err := noRetry(t, r.URLVia(p)).Incr(ctx, key).Result(); err != nil || n != 1 {
		t.Fatalf("INCR on a new connection = %d, %v; want 1", n, err)
	}
	if err := old.Incr(ctx, key).Err(); err == nil {
		t.Fatal("INCR on the connection open at DropReplies: no error")
	}
	if n, err := r.Client(t).Get(ctx, key).Int(); err != nil || n != 2 {
		t.Fatalf("value = %d, %v; want 2", n, err)
	}
}
