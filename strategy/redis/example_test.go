package redis_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesync/ratesync/internal/testenv"
	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/redis"
)

// A store on a Redis server, used by a namespace that syncs every 100ms; a
// retried batch (same node and seq) is not counted twice.
func ExampleNew() {
	addr, prefix, done := exampleServer() // a Redis server, a key prefix of our own, the removal of its keys
	defer done()
	client := goredis.NewClient(&goredis.Options{Addr: addr})
	defer client.Close()

	store, err := redis.New(client, redis.Config{Prefix: prefix}) // zero fields: defaults
	if err != nil {
		panic(err)
	}

	ctx := context.Background()
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	b := strategy.Batch{Node: "node-a", Seq: 1, Diffs: []strategy.Diff{
		{Namespace: "api", Key: "user:42", WindowStart: start, WindowSize: time.Minute, Value: 2.5},
	}}
	store.PushDiffs(ctx, b)
	store.PushDiffs(ctx, b) // a retry after a lost reply: already counted
	n, _ := store.GetWindow(ctx, "api", "user:42", start, time.Minute)
	fmt.Println("store:", n)

	in := ratelimiting.NewInstance("example", ratelimiting.WithClock(func() time.Time { return start.Add(time.Second) }))
	defer in.Close(ctx)
	err = in.New(namespace.Config{Name: "api", SyncRate: 100 * time.Millisecond, Strategy: store, WindowSizes: []time.Duration{time.Minute}})
	if err != nil {
		panic(err)
	}
	in.Increment(ctx, "api", "user:42", time.Minute, 1)
	in.Sync(ctx, "api") // what the ticker does every SyncRate
	w, _ := in.SlidingWindow(ctx, "api", "user:42", time.Minute)
	fmt.Println("node:", w.Current)
	// Output:
	// store: 2.5
	// node: 3.5
}

// exampleServer returns the test binary's Redis server (testenv's, as the
// tests get it), a fresh key prefix and a function that deletes the keys
// under it. Examples have no testing.TB: a stand-in panics where testenv
// would fail or skip the test.
func exampleServer() (addr, prefix string, done func()) {
	r := testenv.NewRedis(exampleTB{})
	return r.Addr, r.Prefix, func() {
		c := goredis.NewClient(&goredis.Options{Addr: r.Addr})
		defer c.Close()
		deleteKeys(exampleTB{}, c, r.Prefix)
	}
}

type exampleTB struct{ testing.TB }

func (exampleTB) Helper()                   {}
func (exampleTB) Logf(string, ...any)       {}
func (exampleTB) Cleanup(func())            {}
func (exampleTB) Fatal(args ...any)         { panic(fmt.Sprint(args...)) }
func (exampleTB) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }
func (exampleTB) Skip(args ...any)          { panic(fmt.Sprint(args...)) }
func (exampleTB) Skipf(f string, a ...any)  { panic(fmt.Sprintf(f, a...)) }
