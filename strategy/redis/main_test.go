package redis_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesync/ratesync/internal/testenv"
	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/redis"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// go-redis logs every failed dial of the fault tests; the tests say what
// matters.
func init() { goredis.SetLogger(quiet{}) }

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// newStore returns a store on the test's Redis under the test's own prefix
// (cfg.Prefix is replaced), with its client; the keys are deleted when t
// ends.
func newStore(t testing.TB, cfg redis.Config) (*redis.Store, *goredis.Client) {
	t.Helper()
	r := testenv.NewRedis(t)
	c := r.Client(t)
	return storeOn(t, c, r.Prefix, cfg), c
}

// storeOn returns a store on c under prefix, whose keys are deleted when t
// ends.
func storeOn(t testing.TB, c goredis.UniversalClient, prefix string, cfg redis.Config) *redis.Store {
	t.Helper()
	cfg.Prefix = prefix
	s, err := redis.New(c, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { deleteKeys(t, c, prefix) })
	return s
}

// deleteKeys deletes the keys of the store under prefix.
func deleteKeys(t testing.TB, c goredis.UniversalClient, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	del := func(ctx context.Context, n *goredis.Client) error {
		it := n.Scan(ctx, 0, "{"+prefix+":*", 1000).Iterator()
		var keys []string
		for it.Next(ctx) {
			keys = append(keys, it.Val())
		}
		for _, k := range keys {
			if err := n.Del(ctx, k).Err(); err != nil {
				return err
			}
		}
		if err := it.Err(); err != nil {
			return err
		}
		return n.Del(ctx, prefix+":layout").Err()
	}
	var err error
	switch c := c.(type) {
	case *goredis.ClusterClient:
		err = c.ForEachMaster(ctx, func(ctx context.Context, n *goredis.Client) error {
			// A master owns the layout key or not: delete it through the
			// cluster client below instead.
			it := n.Scan(ctx, 0, "{"+prefix+":*", 1000).Iterator()
			for it.Next(ctx) {
				if err := n.Del(ctx, it.Val()).Err(); err != nil {
					return err
				}
			}
			return it.Err()
		})
		if err == nil {
			err = c.Del(ctx, prefix+":layout").Err()
		}
	case *goredis.Client:
		err = del(ctx, c)
	}
	if err != nil {
		t.Logf("delete keys of prefix %s: %v", prefix, err)
	}
}

// ops counts the commands and pipelines a client sends: one per round
// trip. The handshake of a new connection (HELLO, CLIENT SETINFO) is not
// counted.
type ops struct{ n atomic.Int64 }

func handshake(cmd goredis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "client", "auth", "select":
		return true
	}
	return false
}

func (o *ops) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (o *ops) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if !handshake(cmd) {
			o.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (o *ops) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		if len(cmds) > 0 && !handshake(cmds[0]) {
			o.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// countOps adds an ops hook to c and returns it.
func countOps(t testing.TB, c goredis.UniversalClient) *ops {
	t.Helper()
	if err := c.Ping(context.Background()).Err(); err != nil { // connect before counting
		t.Fatal(err)
	}
	o := &ops{}
	c.AddHook(o)
	return o
}

var base = time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC)

func diff(ns, key string, start time.Time, size time.Duration, v float64) strategy.Diff {
	return strategy.Diff{Namespace: ns, Key: key, WindowStart: start, WindowSize: size, Value: v}
}

func mustPush(t testing.TB, s strategy.Strategy, b strategy.Batch) {
	t.Helper()
	if err := s.PushDiffs(context.Background(), b); err != nil {
		t.Fatalf("PushDiffs(%q, %d): %v", b.Node, b.Seq, err)
	}
}

func count(t testing.TB, s strategy.Strategy, ns, key string, start time.Time, size time.Duration) float64 {
	t.Helper()
	v, err := s.GetWindow(context.Background(), ns, key, start, size)
	if err != nil {
		t.Fatalf("GetWindow(%q, %q): %v", ns, key, err)
	}
	return v
}

// eventually polls cond until it holds or within passes.
func eventually(t testing.TB, within time.Duration, what func() string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
