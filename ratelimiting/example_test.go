package ratelimiting_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
	"github.com/ratesync/ratesync/strategy/memory"
)

// The program of README.md's library quick start, with a fixed clock so
// that its output is the same on every run: a local-only namespace, Kong's
// increment, and a decision against two limits.
func ExampleNewInstance() {
	now := time.Date(2030, 1, 1, 12, 0, 30, 0, time.UTC) // 30 s into a minute
	in := ratelimiting.NewInstance("my-service", ratelimiting.WithClock(func() time.Time { return now }))
	ctx := context.Background()
	defer in.Close(ctx) // final sync of every namespace

	err := in.New(namespace.Config{
		Name:        "api",
		SyncRate:    namespace.LocalOnly,
		WindowSizes: []time.Duration{time.Second, time.Minute},
	})
	if err != nil {
		panic(err)
	}

	w, _ := in.Increment(ctx, "api", "user:42", time.Minute, 1)
	fmt.Println(w.Rate())

	d, _ := in.Allow(ctx, "api", "user:42", 1,
		ratelimiting.Limit{Limit: 10, Window: time.Second, Fixed: true},
		ratelimiting.Limit{Limit: 100, Window: time.Minute},
	)
	fmt.Println(d.Allowed, d.RetryAfter, d.Limits[0].Remaining, d.Limits[1].Remaining)
	// Output:
	// 1
	// true 0s 9 98
}

// Increment adds to the current window and returns it; a negative value
// refunds.
func ExampleInstance_Increment() {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	in := ratelimiting.NewInstance("example", ratelimiting.WithClock(func() time.Time { return now }))
	ctx := context.Background()
	defer in.Close(ctx)
	if err := in.New(namespace.Config{Name: "api", SyncRate: namespace.LocalOnly, WindowSizes: []time.Duration{time.Minute}}); err != nil {
		panic(err)
	}

	w, _ := in.Increment(ctx, "api", "user:42", time.Minute, 2.5)
	fmt.Println(w.Start.Format(time.TimeOnly), w.Size, w.Current)
	w, _ = in.Increment(ctx, "api", "user:42", time.Minute, -1) // refund
	fmt.Println(w.Current)
	// Output:
	// 12:00:00 1m0s 2.5
	// 1.5
}

// SlidingWindow reads a key without counting: the previous window's hits
// weigh less as the current window goes on.
func ExampleInstance_SlidingWindow() {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	in := ratelimiting.NewInstance("example", ratelimiting.WithClock(func() time.Time { return now }))
	ctx := context.Background()
	defer in.Close(ctx)
	if err := in.New(namespace.Config{Name: "api", SyncRate: namespace.LocalOnly, WindowSizes: []time.Duration{time.Minute}}); err != nil {
		panic(err)
	}
	in.Increment(ctx, "api", "user:42", time.Minute, 40)

	for _, at := range []time.Duration{time.Minute, 75 * time.Second, 90 * time.Second, 2 * time.Minute} {
		now = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC).Add(at)
		w, _ := in.SlidingWindow(ctx, "api", "user:42", time.Minute)
		fmt.Printf("%v: previous %v, weight %v, rate %v\n", now.Format(time.TimeOnly), w.Previous, w.Weight, w.Rate())
	}
	w, _ := in.SlidingWindow(ctx, "api", "user:7", time.Minute) // never counted
	fmt.Println("user:7:", w.Rate())
	// Output:
	// 12:01:00: previous 40, weight 1, rate 40
	// 12:01:15: previous 40, weight 0.75, rate 30
	// 12:01:30: previous 40, weight 0.5, rate 20
	// 12:02:00: previous 0, weight 1, rate 0
	// user:7: 0
}

// A local-only namespace: Kong's increment and sliding_window on one node.
func Example_localOnly() {
	clock := time.Date(2030, 1, 1, 0, 0, 30, 0, time.UTC) // 30 s into a minute
	in := ratelimiting.NewInstance("example", ratelimiting.WithClock(func() time.Time { return clock }))
	defer in.Close(context.Background())

	err := in.New(namespace.Config{
		Name:        "api",
		SyncRate:    namespace.LocalOnly,
		WindowSizes: []time.Duration{time.Minute},
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	in.Increment(ctx, "api", "1.2.3.4", time.Minute, 40) // previous minute...
	clock = clock.Add(time.Minute)
	w, _ := in.Increment(ctx, "api", "1.2.3.4", time.Minute, 10) // ...and this one
	fmt.Printf("current %v, previous %v, weight %v, rate %v\n", w.Current, w.Previous, w.Weight, w.Rate())
	// Output: current 10, previous 40, weight 0.5, rate 30
}

// Allow checks several limits at once and counts the request only when all
// of them let it pass.
func ExampleInstance_Allow() {
	clock := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	in := ratelimiting.NewInstance("example", ratelimiting.WithClock(func() time.Time { return clock }))
	defer in.Close(context.Background())
	if err := in.New(namespace.Config{Name: "api", SyncRate: -1, WindowSizes: []time.Duration{time.Second, time.Minute}}); err != nil {
		panic(err)
	}
	limits := []ratelimiting.Limit{
		{Limit: 2, Window: time.Second, Fixed: true},
		{Limit: 100, Window: time.Minute},
	}
	for i := range 3 {
		d, _ := in.Allow(context.Background(), "api", "user:42", 1, limits...)
		fmt.Printf("request %d: allowed %v, remaining %v/s, retry after %v\n", i+1, d.Allowed, d.Limits[0].Remaining, d.RetryAfter)
	}
	// Output:
	// request 1: allowed true, remaining 1/s, retry after 0s
	// request 2: allowed true, remaining 0/s, retry after 0s
	// request 3: allowed false, remaining 0/s, retry after 1s
}

// Several nodes share counts through a store; here two instances and the
// in-process memory store stand in for two nodes and Redis or PostgreSQL.
func ExampleInstance_Sync() {
	store := memory.New()
	ctx := context.Background()
	clock := func() time.Time { return time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC) }
	cfg := namespace.Config{Name: "api", SyncRate: time.Second, Strategy: store, WindowSizes: []time.Duration{time.Minute}}
	var nodes []*ratelimiting.Instance
	for _, id := range []string{"node-a", "node-b"} {
		in := ratelimiting.NewInstance(id, ratelimiting.WithClock(clock), ratelimiting.WithNodeID(id))
		defer in.Close(ctx)
		if err := in.New(cfg); err != nil {
			panic(err)
		}
		nodes = append(nodes, in)
	}
	nodes[0].Increment(ctx, "api", "user:42", time.Minute, 3)
	nodes[1].Increment(ctx, "api", "user:42", time.Minute, 4)
	for _, in := range nodes { // what the ticker does every SyncRate
		in.Sync(ctx, "api")
	}
	nodes[0].Fetch(ctx, "api")
	for _, in := range nodes {
		w, _ := in.SlidingWindow(ctx, "api", "user:42", time.Minute)
		fmt.Println(in.Name(), w.Current)
	}
	// Output:
	// node-a 7
	// node-b 7
}

// A token bucket: 10 per minute, bursts of up to 3. Three requests pass at
// once; the fourth waits for one token, 6 s.
func ExampleInstance_AllowOne() {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	in := ratelimiting.NewInstance("buckets", ratelimiting.WithClock(func() time.Time { return now }))
	ctx := context.Background()
	defer in.Close(ctx)
	if err := in.New(namespace.Config{Name: "api", SyncRate: namespace.LocalOnly, WindowSizes: []time.Duration{time.Minute}}); err != nil {
		panic(err)
	}
	tb := ratelimiting.Limit{Limit: 10, Window: time.Minute, Algorithm: ratelimiting.TokenBucket, Burst: 3}
	for range 4 {
		st, _ := in.AllowOne(ctx, "api", "user:42", 1, tb)
		fmt.Println(st.Allowed, st.Remaining, st.RetryAfter, st.Reset)
	}
	now = now.Add(6 * time.Second)
	st, _ := in.AllowOne(ctx, "api", "user:42", 1, tb)
	fmt.Println(st.Allowed, st.Remaining)
	// Output:
	// true 2 0s 6s
	// true 1 0s 12s
	// true 0 0s 18s
	// false 0 6s 18s
	// true 0
}

// A sliding log weighs each admitted hit for exactly its window; an
// anchored window opens at a key's first hit; a precision counts a sliding
// window in sub-windows of one of the namespace's window sizes.
func ExampleAlgorithm() {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	in := ratelimiting.NewInstance("example", ratelimiting.WithClock(func() time.Time { return now }))
	ctx := context.Background()
	defer in.Close(ctx)
	if err := in.New(namespace.Config{Name: "login", SyncRate: namespace.LocalOnly, WindowSizes: []time.Duration{10 * time.Minute}}); err != nil {
		panic(err)
	}
	log := ratelimiting.Limit{Limit: 2, Window: 15 * time.Minute, Algorithm: ratelimiting.SlidingLog}
	in.Allow(ctx, "login", "alice", 1, log)
	now = now.Add(5 * time.Minute)
	in.Allow(ctx, "login", "alice", 1, log)
	d, _ := in.Allow(ctx, "login", "alice", 1, log)
	fmt.Println(d.Allowed, d.RetryAfter) // until the first attempt stops weighing

	day := ratelimiting.Limit{Limit: 1, Window: 24 * time.Hour, Algorithm: ratelimiting.AnchoredWindow}
	in.Allow(ctx, "login", "bob", 1, day)
	now = now.Add(time.Hour)
	d, _ = in.Allow(ctx, "login", "bob", 1, day)
	fmt.Println(d.Allowed, d.RetryAfter) // a day after bob's first hit

	hour := ratelimiting.Limit{Limit: 60, Window: time.Hour, Precision: 10 * time.Minute}
	d, _ = in.Allow(ctx, "login", "carol", 10, hour)
	fmt.Println(d.Allowed, d.Limits[0].Remaining, d.Limits[0].Reset)
	// Output:
	// false 10m0s
	// false 23h0m0s
	// true 50 1h5m0s
}
