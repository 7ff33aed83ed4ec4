package postgres_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ratesync/ratesync/internal/testenv"
	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
	"github.com/ratesync/ratesync/strategy/postgres"
)

// exampleURL is the server the tests used; an application passes its own
// URL, such as "postgres://app@db.internal:5432/app".
func exampleURL() string {
	exampleServer.Lock()
	defer exampleServer.Unlock()
	return exampleServer.url
}

func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, exampleURL())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()

	// A schema of its own (created by New) keeps the example apart.
	schema := testenv.Name("example_")
	defer pool.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
	store, err := postgres.New(ctx, pool, postgres.Config{Schema: schema})
	if err != nil {
		fmt.Println(err)
		return
	}

	// A synchronous namespace: every hit reaches the store at once.
	// The clock is fixed so that the three hits share a window, and the
	// namespace counts on it (NodeClock) rather than on the server's.
	now := time.Date(2030, 1, 1, 12, 30, 0, 0, time.UTC)
	in := ratelimiting.NewInstance("example", ratelimiting.WithClock(func() time.Time { return now }))
	defer in.Close(ctx)
	if err := in.New(namespace.Config{Name: "api", SyncRate: namespace.Synchronous, Strategy: store, WindowSizes: []time.Duration{time.Hour}, Clock: namespace.NodeClock}); err != nil {
		fmt.Println(err)
		return
	}
	var w ratelimiting.Window
	for range 3 {
		if w, err = in.Increment(ctx, "api", "client-42", time.Hour, 1); err != nil {
			fmt.Println(err)
			return
		}
	}
	stored, err := store.GetWindow(ctx, "api", "client-42", w.Start, time.Hour)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("node sees", w.Current, "- store holds", stored)
	// Output:
	// node sees 3 - store holds 3
}
