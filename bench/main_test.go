package bench

import (
	"context"
	"fmt"
	"iter"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesync/ratesync/internal/testenv"
	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/memory"
	"github.com/ratesync/ratesync/strategy/postgres"
	"github.com/ratesync/ratesync/strategy/redis"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// go-redis logs failed dials; the benchmarks say what matters.
func init() { goredis.SetLogger(quietRedis{}) }

type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// quiet silences the instances' logs.
var quiet = ratelimiting.WithLogger(slog.New(slog.DiscardHandler))

// store is what the Redis and PostgreSQL stores implement.
type store interface {
	strategy.Strategy
	strategy.PushCounter
	strategy.Checker
}

// backend is a store on a real server, with a count of the round trips its
// client made.
type backend struct {
	name  string
	store store
	pool  int          // connections the client may open
	trips func() int64 // round trips so far (Redis: commands and pipelines; PostgreSQL: statements, prepares, batches)
	// serverCPU returns the CPU seconds the server has used, when it tells
	// (Redis: INFO cpu, asked on a client of its own, not counted in trips).
	serverCPU func() (float64, bool)
	redis     *testenv.Redis
	pg        *pgxpool.Pool
}

// opener makes a backend for tb with a client pool of at most pool
// connections (0: the client's default).
type opener struct {
	name string
	open func(tb testing.TB, pool int) *backend
}

var backends = []opener{{"redis", openRedis}, {"postgres", openPostgres}}

// openRedis returns a Redis store under a prefix of tb's own, whose keys
// are deleted when tb ends. pool 0 keeps go-redis's default PoolSize (10
// per GOMAXPROCS).
func openRedis(tb testing.TB, pool int) *backend {
	tb.Helper()
	return openRedisShards(tb, pool, 0)
}

// openRedisShards is openRedis with redis.Config.Shards set to shards (0:
// the default).
func openRedisShards(tb testing.TB, pool, shards int) *backend {
	tb.Helper()
	r := testenv.NewRedis(tb)
	opt, err := goredis.ParseURL(r.URL)
	if err != nil {
		tb.Fatal(err)
	}
	if pool > 0 {
		opt.PoolSize = pool
	}
	c := goredis.NewClient(opt)
	tb.Cleanup(func() { _ = c.Close() })
	if err := c.Ping(context.Background()).Err(); err != nil { // connect before counting
		tb.Fatal(err)
	}
	h := &redisTrips{}
	c.AddHook(h)
	s, err := redis.New(c, redis.Config{Prefix: r.Prefix, Shards: shards})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { deleteRedisPrefix(tb, c, r.Prefix) })
	info := goredis.NewClient(opt)
	tb.Cleanup(func() { _ = info.Close() })
	return &backend{name: "redis", store: s, pool: c.Options().PoolSize, trips: h.n.Load, redis: r,
		serverCPU: func() (float64, bool) { return redisCPU(info) }}
}

// redisCPU returns used_cpu_user + used_cpu_sys of INFO cpu: the CPU
// seconds of the whole server process.
func redisCPU(c *goredis.Client) (float64, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, false
	}
	total, n := 0.0, 0
	for _, line := range strings.Split(s, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (name == "used_cpu_user" || name == "used_cpu_sys") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, false
			}
			total += f
			n++
		}
	}
	return total, n == 2
}

// deleteRedisPrefix unlinks the keys of the store under prefix.
func deleteRedisPrefix(tb testing.TB, c *goredis.Client, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	it := c.Scan(ctx, 0, "{"+prefix+":*", 1000).Iterator()
	var keys []string
	for it.Next(ctx) {
		keys = append(keys, it.Val())
	}
	keys = append(keys, prefix+":layout")
	for lo := 0; lo < len(keys); lo += 500 {
		if err := c.Unlink(ctx, keys[lo:min(lo+500, len(keys))]...).Err(); err != nil {
			tb.Logf("unlink keys of prefix %s: %v", prefix, err)
			return
		}
	}
	if err := it.Err(); err != nil {
		tb.Logf("scan keys of prefix %s: %v", prefix, err)
	}
}

// redisTrips counts the commands and pipelines a client sends: one per
// round trip. The handshake of a new connection is not counted.
type redisTrips struct{ n atomic.Int64 }

func handshake(cmd goredis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "client", "auth", "select":
		return true
	}
	return false
}

func (h *redisTrips) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h *redisTrips) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if !handshake(cmd) {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *redisTrips) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		if len(cmds) > 0 && !handshake(cmds[0]) {
			h.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// openPostgres returns a PostgreSQL store in a fresh database, dropped when
// tb ends, on a pool of at most pool connections (0: pgxpool's default,
// max(4, GOMAXPROCS)) that counts its statements.
func openPostgres(tb testing.TB, pool int) *backend {
	tb.Helper()
	p := testenv.NewPostgres(tb)
	cfg, err := pgxpool.ParseConfig(p.URL)
	if err != nil {
		tb.Fatal(err)
	}
	if pool > 0 {
		cfg.MaxConns = int32(pool)
	}
	tr := &pgTrips{}
	cfg.ConnConfig.Tracer = tr
	pl, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pl.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := postgres.New(ctx, pl, postgres.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	return &backend{name: "postgres", store: s, pool: int(cfg.MaxConns), trips: tr.roundTrips, pg: pl,
		serverCPU: func() (float64, bool) { return 0, false }}
}

// openMemory returns a memory store (strategy/memory) in this process: no
// connections (pool is ignored) and no round trips.
func openMemory(testing.TB, int) *backend {
	return &backend{name: "memory", store: memory.New(), trips: func() int64 { return 0 },
		serverCPU: func() (float64, bool) { return 0, false }}
}

// pgTrips is a pgx tracer counting what goes to the server: each Query,
// QueryRow and Exec is one round trip, each Prepare (a statement's first
// use on a connection) one more, each SendBatch one.
type pgTrips struct{ queries, prepares, batches atomic.Int64 }

func (c *pgTrips) roundTrips() int64 {
	return c.queries.Load() + c.prepares.Load() + c.batches.Load()
}

func (c *pgTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.queries.Add(1)
	return ctx
}
func (c *pgTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *pgTrips) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	c.prepares.Add(1)
	return ctx
}
func (c *pgTrips) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}
func (c *pgTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.batches.Add(1)
	return ctx
}
func (c *pgTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *pgTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// counting wraps a strategy and counts what the syncer asks of it: the
// diffs pushed and the counters GetCounters yields, with the time each
// took. It is a plain strategy.Strategy (not a PushCounter or Checker), for
// periodic namespaces.
type counting struct {
	strategy.Strategy

	pushes, pushed, pushNanos atomic.Int64
	gets, yields, getNanos    atomic.Int64
	wholeNamespace            atomic.Int64 // GetCounters with Keys nil
	queryKeys                 atomic.Int64 // len(Keys) of the last GetCounters

	mu      sync.Mutex
	record  bool
	yielded []string // keys yielded, when record is set
}

func (c *counting) PushDiffs(ctx context.Context, b strategy.Batch) error {
	t := time.Now()
	err := c.Strategy.PushDiffs(ctx, b)
	c.pushNanos.Add(int64(time.Since(t)))
	c.pushes.Add(1)
	c.pushed.Add(int64(len(b.Diffs)))
	return err
}

func (c *counting) GetCounters(ctx context.Context, q strategy.Query) iter.Seq2[strategy.Counter, error] {
	return func(yield func(strategy.Counter, error) bool) {
		t := time.Now()
		defer func() { c.getNanos.Add(int64(time.Since(t))) }()
		c.gets.Add(1)
		if q.Keys == nil {
			c.wholeNamespace.Add(1)
		}
		c.queryKeys.Store(int64(len(q.Keys)))
		for ctr, err := range c.Strategy.GetCounters(ctx, q) {
			if err == nil {
				c.yields.Add(1)
				c.mu.Lock()
				if c.record {
					c.yielded = append(c.yielded, ctr.Key)
				}
				c.mu.Unlock()
			}
			if !yield(ctr, err) {
				return
			}
		}
	}
}

// frozen is a clock stopped at t: windows never turn during a benchmark, so
// counts are exact. Stores that set TTLs from their own clock (Redis) see
// the real time, which stays within the frozen window's lifetime for the
// length of a benchmark when windows are an hour long. A namespace whose
// store tells time counts on this clock with Clock: namespace.NodeClock
// (the counting wrapper hides the store's clock).
func frozen(t time.Time) ratelimiting.Option {
	t = t.Truncate(time.Millisecond)
	return ratelimiting.WithClock(func() time.Time { return t })
}

// newInstance returns an instance closed when tb ends.
func newInstance(tb testing.TB, name string, opts ...ratelimiting.Option) *ratelimiting.Instance {
	tb.Helper()
	in := ratelimiting.NewInstance(name, append([]ratelimiting.Option{quiet}, opts...)...)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = in.Close(ctx)
	})
	return in
}

func mustNew(tb testing.TB, in *ratelimiting.Instance, cfg namespace.Config) {
	tb.Helper()
	if err := in.New(cfg); err != nil {
		tb.Fatalf("New(%s): %v", cfg.Name, err)
	}
}

// keysN returns n distinct keys.
func keysN(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s%07d", prefix, i)
	}
	return keys
}

// syncStats returns the syncer stats of namespace ns.
func syncStats(tb testing.TB, in *ratelimiting.Instance, ns string) ratelimiting.SyncStats {
	tb.Helper()
	for _, st := range in.Stats() {
		if st.Config.Name == ns {
			return st.Sync
		}
	}
	tb.Fatalf("no namespace %q", ns)
	return ratelimiting.SyncStats{}
}

// drive makes n calls of op, spread over workers goroutines (op gets the
// worker's number and its own call count), and returns the time they took
// and the first error.
func drive(n, workers int, op func(worker, i int) error) (time.Duration, error) {
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			for i := 0; next.Add(1) <= int64(n); i++ {
				if err := op(w, i); err != nil {
					once.Do(func() { first = err })
					next.Store(int64(n)) // stop the others
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start), first
}

// procs is GOMAXPROCS, for the README's context lines.
func procs() int { return runtime.GOMAXPROCS(0) }
