package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesync/ratesync/strategy/postgres"
	"github.com/ratesync/ratesync/strategy/redis"
)

// openServerStore opens a Redis or PostgreSQL store from the options' URL.
func openServerStore(ctx context.Context, o *options) (*store, error) {
	switch o.store {
	case "redis":
		if o.redisURL == "" {
			return nil, fmt.Errorf("-store redis needs -redis-url (or RATESYNC_REDIS_URL)")
		}
		opt, err := goredis.ParseURL(o.redisURL)
		if err != nil {
			return nil, fmt.Errorf("-redis-url: %w", err)
		}
		c := goredis.NewClient(opt)
		s, err := redis.New(c, redis.Config{Prefix: "ratesync-accuracy"})
		if err != nil {
			c.Close()
			return nil, err
		}
		return &store{s: s, close: func() { c.Close() }}, nil
	case "postgres":
		if o.postgresURL == "" {
			return nil, fmt.Errorf("-store postgres needs -postgres-url (or RATESYNC_POSTGRES_URL)")
		}
		pool, err := pgxpool.New(ctx, o.postgresURL)
		if err != nil {
			return nil, fmt.Errorf("-postgres-url: %w", err)
		}
		s, err := postgres.New(ctx, pool, postgres.Config{Table: "ratesync_accuracy", LaneTable: "ratesync_accuracy_lanes"})
		if err != nil {
			pool.Close()
			return nil, err
		}
		return &store{s: s, close: pool.Close}, nil
	}
	return nil, fmt.Errorf("-store %q: must be memory, redis or postgres", o.store)
}
