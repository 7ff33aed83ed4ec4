package ratelimiting_test

// This file holds README.md's library quick start and nothing else: its
// imports are the program's (TestReadmeQuickStart compares the two).

import (
	"context"
	"fmt"
	"time"

	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
)

// Example_readme is README.md's library quick start, on the real clock: its
// output does not depend on the time.
func Example_readme() {
	ctx := context.Background()
	in := ratelimiting.NewInstance("my-service")
	defer in.Close(ctx) // final sync of every namespace

	err := in.New(namespace.Config{
		Name:        "api",
		SyncRate:    namespace.LocalOnly,
		WindowSizes: []time.Duration{time.Second, time.Minute},
	})
	if err != nil {
		panic(err)
	}

	// Kong's increment and sliding_window.
	w, _ := in.Increment(ctx, "api", "user:42", time.Minute, 1)
	fmt.Println(w.Rate()) // 1: current + previous * weight

	// A decision against several limits, all or nothing; counted only when allowed.
	d, _ := in.Allow(ctx, "api", "user:42", 1,
		ratelimiting.Limit{Limit: 10, Window: time.Second, Fixed: true},
		ratelimiting.Limit{Limit: 100, Window: time.Minute},
	)
	fmt.Println(d.Allowed, d.RetryAfter, d.Limits[0].Remaining) // true 0s 9

	// Output:
	// 1
	// true 0s 9
}
