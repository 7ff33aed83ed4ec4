package config

import (
	"cmp"
	"errors"
	"net/url"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/memory"
	"github.com/ratesync/ratesync/strategy/postgres"
	"github.com/ratesync/ratesync/strategy/redis"
)

// This file holds what the configuration knows of the stores: their
// defaults, their options' validation (the stores' own Config.Validate)
// and their URLs. Opening them is the node's.

// keepsBuckets reports whether the store of strategy name keeps token and
// leaky buckets (strategy.BucketStore): a policy with a bucket needs one.
func keepsBuckets(name string) bool {
	var st any
	switch name {
	case StrategyMemory:
		st = (*memory.Store)(nil)
	case StrategyRedis:
		st = (*redis.Store)(nil)
	case StrategyPostgres:
		st = (*postgres.Store)(nil)
	}
	_, ok := st.(strategy.BucketStore)
	return ok
}

// storeDefaults fills in the store options of a namespace with a store:
// what the file leaves out, or sets to 0, is the store's default.
func storeDefaults(ns *NamespaceConfig) {
	switch ns.Strategy {
	case StrategyRedis:
		if ns.Redis == nil {
			ns.Redis = &RedisOptions{}
		}
		r := ns.Redis
		r.Prefix = cmp.Or(r.Prefix, redis.DefaultPrefix)
		r.Shards = cmp.Or(r.Shards, redis.DefaultShards)
		r.TTLMargin = cmp.Or(r.TTLMargin, Duration(redis.DefaultTTLMargin))
		r.LaneTTL = cmp.Or(r.LaneTTL, Duration(redis.DefaultLaneTTL))
		r.Timeout = cmp.Or(r.Timeout, Duration(redis.DefaultTimeout))
		r.ScanThreshold = cmp.Or(r.ScanThreshold, redis.DefaultScanThreshold)
		r.FieldsPerCommand = cmp.Or(r.FieldsPerCommand, redis.DefaultFieldsPerCommand)
	case StrategyPostgres:
		if ns.Postgres == nil {
			ns.Postgres = &PostgresOptions{}
		}
		p := ns.Postgres
		p.Schema = cmp.Or(p.Schema, postgres.DefaultSchema)
		p.Table = cmp.Or(p.Table, postgres.DefaultTable)
		p.LaneTable = cmp.Or(p.LaneTable, postgres.DefaultLaneTable)
		p.PurgeBatch = cmp.Or(p.PurgeBatch, postgres.DefaultPurgeBatch)
		p.LaneTTL = cmp.Or(p.LaneTTL, Duration(postgres.DefaultLaneTTL))
		if pc, err := pgxpool.ParseConfig(ns.URL); p.MaxConns == 0 && ns.URL != "" && err == nil {
			p.MaxConns = int(pc.MaxConns) // the URL's pool_max_conns, or pgxpool's default
		}
	}
}

// optionError is an invalid store option: key is its path in the
// namespace ("redis.shards").
type optionError struct{ key, value, allowed string }

// checkStoreOptions validates the store options of a namespace with the
// store's own Config.Validate.
func checkStoreOptions(ns *NamespaceConfig) []optionError {
	var out []optionError
	if ns.Redis != nil {
		for _, err := range joined(ns.Redis.StoreConfig().Validate()) {
			var fe *redis.FieldError
			if errors.As(err, &fe) {
				out = append(out, optionError{key: "redis." + fe.Key, value: fe.Value, allowed: fe.Allowed})
			}
		}
	}
	if ns.Postgres != nil {
		for _, err := range joined(ns.Postgres.StoreConfig().Validate()) {
			var fe *postgres.FieldError
			if errors.As(err, &fe) {
				out = append(out, optionError{key: "postgres." + fe.Key, value: fe.Value, allowed: fe.Allowed})
			}
		}
		if ns.Postgres.MaxConns < 0 {
			out = append(out, optionError{key: "postgres.max_conns", value: strconv.Itoa(ns.Postgres.MaxConns), allowed: "must be 0 (the URL's pool_max_conns, or pgxpool's default) or more"})
		}
	}
	return out
}

// StoreConfig returns strategy/redis's Config of the options.
func (r *RedisOptions) StoreConfig() redis.Config {
	return redis.Config{
		Prefix:           r.Prefix,
		Shards:           r.Shards,
		TTLMargin:        time.Duration(r.TTLMargin),
		LaneTTL:          time.Duration(r.LaneTTL),
		Timeout:          time.Duration(r.Timeout),
		ScanThreshold:    r.ScanThreshold,
		FieldsPerCommand: r.FieldsPerCommand,
	}
}

// StoreConfig returns strategy/postgres's Config of the options.
func (p *PostgresOptions) StoreConfig() postgres.Config {
	return postgres.Config{
		Schema:     p.Schema,
		Table:      p.Table,
		LaneTable:  p.LaneTable,
		PurgeBatch: p.PurgeBatch,
		LaneTTL:    time.Duration(p.LaneTTL),
	}
}

// checkStoreURL reports whether a namespace's store URL parses, so that
// config validation can name the line.
func checkStoreURL(ns *NamespaceConfig) error {
	switch ns.Strategy {
	case StrategyRedis:
		_, err := ns.RedisClient()
		return err
	case StrategyPostgres:
		_, err := pgxpool.ParseConfig(ns.URL)
		if err != nil {
			return errors.New("not a PostgreSQL URL or DSN")
		}
	}
	return nil
}

// RedisClient parses a namespace's Redis URL: a standalone URL
// (redis://user:pass@host:6379/0, rediss:// for TLS, unix://), or a Cluster
// URL when the options say cluster (redis://host1:6379?addr=host2:6379).
// It returns a function making the client.
//
// Unless the URL sets max_retries, the client does not resend a failed
// command itself: the syncer resends a failed call with the same (node,
// seq), which the store applies once, within the namespace's call timeout
// and with short pauses, where go-redis's own retries would spend that
// timeout in their back-off.
//
// The client bounds each command by its context's deadline
// (ContextTimeoutEnabled), so the store runs a call on its caller's
// goroutine: a synchronous decision's store call makes no goroutine hop. A
// URL that turns socket deadlines off (read_timeout or write_timeout -2)
// leaves the store running calls on helper goroutines (see Timeouts in
// strategy/redis).
func (ns *NamespaceConfig) RedisClient() (func() goredis.UniversalClient, error) {
	u, _ := url.Parse(ns.URL) // a URL that does not parse is refused below
	retries := u != nil && u.Query().Has("max_retries")
	if ns.Redis != nil && ns.Redis.Cluster {
		o, err := goredis.ParseClusterURL(ns.URL)
		if err != nil {
			return nil, errors.New("not a Redis Cluster URL like redis://host1:6379?addr=host2:6379")
		}
		if !retries {
			o.MaxRetries = -1
		}
		o.ContextTimeoutEnabled = true
		return func() goredis.UniversalClient { return goredis.NewClusterClient(o) }, nil
	}
	o, err := goredis.ParseURL(ns.URL)
	if err != nil {
		return nil, errors.New("not a Redis URL like redis://user:password@host:6379/0")
	}
	if !retries {
		o.MaxRetries = -1
	}
	o.ContextTimeoutEnabled = true
	return func() goredis.UniversalClient { return goredis.NewClient(o) }, nil
}
