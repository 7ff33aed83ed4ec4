package integration

import (
	"context"
	"slices"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesync/ratesync/internal/testenv"
	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/postgres"
	"github.com/ratesync/ratesync/strategy/redis"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// stores are the central stores the tests run against, by name.
var stores = []struct {
	name string
	open func(t *testing.T) strategy.Strategy
}{
	{"redis", redisStore},
	{"postgres", postgresStore},
}

func redisStore(t *testing.T) strategy.Strategy {
	r := testenv.NewRedis(t)
	s, err := redis.New(r.Client(t), redis.Config{Prefix: r.Prefix})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func testenvRedis(t *testing.T) *testenv.Redis { return testenv.NewRedis(t) }

func newProxy(t *testing.T, addr string) *testenv.Proxy { return testenv.NewProxy(t, addr) }

// redisStoreVia is a Redis store whose client goes through p.
func redisStoreVia(t *testing.T, r *testenv.Redis, p *testenv.Proxy) strategy.Strategy {
	opt, err := goredis.ParseURL(r.URLVia(p))
	if err != nil {
		t.Fatal(err)
	}
	opt.MaxRetries = -1 // as the node's client: the syncer resends a failed call itself
	client := goredis.NewClient(opt)
	t.Cleanup(func() { _ = client.Close() })
	s, err := redis.New(client, redis.Config{Prefix: r.Prefix})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func postgresStore(t *testing.T) strategy.Strategy {
	p := testenv.NewPostgres(t)
	s, err := postgres.New(context.Background(), p.Pool(t), postgres.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// rtt returns the median time of a store read.
func rtt(t *testing.T, s strategy.Strategy) time.Duration {
	t.Helper()
	var d []time.Duration
	for range 15 {
		t0 := time.Now()
		if _, err := s.GetWindow(context.Background(), "rtt", "k", time.UnixMilli(0), time.Second); err != nil {
			t.Fatal(err)
		}
		d = append(d, time.Since(t0))
	}
	slices.Sort(d)
	return d[len(d)/2]
}

func newCluster(t *testing.T, cfg ClusterConfig) *Cluster {
	t.Helper()
	c, err := NewCluster(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// nextBoundary returns the next instant that starts a window of size.
func nextBoundary(size time.Duration) time.Time {
	ms := size.Milliseconds()
	return time.UnixMilli((time.Now().UnixMilli()/ms + 1) * ms)
}

// eventually polls cond until it holds, and returns how long that took, or
// fails the test after within.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

func noErrors(t *testing.T, res *Result) {
	t.Helper()
	if n, first := res.Errors(); n > 0 {
		t.Fatalf("%d decisions failed; first: %v", n, first)
	}
}
