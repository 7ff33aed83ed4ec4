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

	// The node's clock is fixed in the window above; the namespace counts
	// on it (NodeClock) rather than on the server's.
	in := ratelimiting.NewInstance("example", ratelimiting.WithClock(func() time.Time { return start.Add(time.Second) }))
	defer in.Close(ctx)
	err = in.New(namespace.Config{Name: "api", SyncRate: 100 * time.Millisecond, Strategy: store, WindowSizes: []time.Duration{time.Minute}, Clock: namespace.NodeClock})
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

// A token bucket of 3 requests per second decided in the store: three
// requests pass at once, the fourth does not. A node then pushes a request
// it admitted on its own, dated 500 ms later: applied once, retry or not.
func ExampleStore_GetBuckets() {
	addr, prefix, done := exampleServer()
	defer done()
	client := goredis.NewClient(&goredis.Options{Addr: addr})
	defer client.Close()
	store, err := redis.New(client, redis.Config{Prefix: prefix})
	if err != nil {
		panic(err)
	}

	ctx := context.Background()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	limit := strategy.CheckLimit{Kind: 1, WindowSize: time.Second, Limit: 3, Burst: 3}
	for seq := uint64(1); seq <= 4; seq++ {
		check := strategy.Check{Namespace: "api", Key: "user:42", Cost: 1, Now: now, Limits: []strategy.CheckLimit{limit}}
		res, _ := store.CheckAndCount(ctx, "node-a", seq, []strategy.Check{check})
		fmt.Println("allowed:", res[0].Allowed)
	}
	b := strategy.Batch{Node: "node-b", Seq: 1, Buckets: []strategy.BucketDiff{
		{Namespace: "api", Key: "user:42", Kind: 1, Window: time.Second, At: now.UnixMilli() + 500, Cost: 1, Rate: 3},
	}}
	store.PushDiffs(ctx, b)
	store.PushDiffs(ctx, b) // a retry after a lost reply: already applied
	buckets, _ := store.GetBuckets(ctx, "api", []strategy.BucketRef{{Key: "user:42", Kind: 1, Window: time.Second}})
	// Level is in requests times the window in ms: 3 requests, 1.5 drained
	// in 500 ms, 1 more.
	fmt.Printf("bucket: %v requests at +%dms\n", buckets[0].Level/1000, buckets[0].At-now.UnixMilli())
	// Output:
	// allowed: true
	// allowed: true
	// allowed: true
	// allowed: false
	// bucket: 2.5 requests at +500ms
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
