package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/ratesync/ratesync/internal/arith"

	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/memory"
	"github.com/ratesync/ratesync/strategy/postgres"
	"github.com/ratesync/ratesync/strategy/redis"
)

// Bounds on opening a store and probing it (with a read, after creating
// or migrating a PostgreSQL schema), at start and on a reload: a store that
// has not answered by then is used all the same (the node counts locally
// until it answers), unless require_stores asks for every store at start.
const (
	storeProbeTimeout   = 5 * time.Second
	storeRequireTimeout = 30 * time.Second // with require_stores
)

// stores are the strategies of the node's namespaces and the clients they
// run on. This file is the only one that knows the strategy packages. A
// reload opens the stores of a new configuration with the running ones at
// hand (openStores' prev): a store whose settings did not change is kept,
// with its client and its counts.
type stores struct {
	byNamespace map[string]strategy.Strategy
	byID        map[string]*openStore // by storeID
}

// openStore is one store and what closes its client.
type openStore struct {
	st    strategy.Strategy
	close func() // nil: nothing to close (the memory store)
}

// storeID identifies a namespace's store: namespaces with the same
// strategy, URL and options share one.
func storeID(ns *NamespaceConfig) string {
	return fmt.Sprintf("%s|%s|%+v|%+v", ns.Strategy, ns.URL, ns.Redis, ns.Postgres)
}

// Every store the node opens decides checks in the store: the
// configuration is validated with that in mind (storeInConfig).
var (
	_ strategy.Checker = (*memory.Store)(nil)
	_ strategy.Checker = (*redis.Store)(nil)
	_ strategy.Checker = (*postgres.Store)(nil)
)

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
		for _, err := range joined(redisConfig(ns.Redis).Validate()) {
			var fe *redis.FieldError
			if errors.As(err, &fe) {
				out = append(out, optionError{key: "redis." + fe.Key, value: fe.Value, allowed: fe.Allowed})
			}
		}
	}
	if ns.Postgres != nil {
		for _, err := range joined(postgresConfig(ns.Postgres).Validate()) {
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

func redisConfig(r *RedisOptions) redis.Config {
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

func postgresConfig(p *PostgresOptions) postgres.Config {
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
		_, err := parseRedis(ns)
		return err
	case StrategyPostgres:
		_, err := pgxpool.ParseConfig(ns.URL)
		if err != nil {
			return errors.New("not a PostgreSQL URL or DSN")
		}
	}
	return nil
}

// parseRedis parses a namespace's Redis URL: a standalone URL
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
func parseRedis(ns *NamespaceConfig) (func() goredis.UniversalClient, error) {
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

// openStores connects the stores the namespaces name. Namespaces with the
// same strategy, URL and options share one client and one store; all
// memory namespaces share one in-process store. A store prev holds (the
// running node's, on a reload) is taken over, not opened again; prev is
// left as it was, and closeUnused closes what the new set no longer uses.
//
// The stores it opens are opened concurrently, each within a bound
// (storeProbeTimeout, or storeRequireTimeout with require_stores). With
// probe, each is then probed within the same bound, and results lists them
// with the probe's error (nil: the store answered). The error is a store
// that cannot be opened at all (a URL its client refuses, a PostgreSQL
// server that refuses the schema).
func openStores(ctx context.Context, cfg Config, log *slog.Logger, prev *stores, probe bool) (s *stores, results []probed, err error) {
	s = &stores{byNamespace: map[string]strategy.Strategy{}, byID: map[string]*openStore{}}
	type opening struct {
		ns       *NamespaceConfig // the first namespace naming the store
		o        *openStore
		err      error
		probeErr error
	}
	var (
		fresh []*opening
		ids   = map[string]bool{}
	)
	for i := range cfg.Namespaces {
		ns := &cfg.Namespaces[i]
		if ns.Strategy == StrategyLocal {
			continue
		}
		id := storeID(ns)
		if o, ok := prev.lookup(id); ok {
			s.byID[id] = o
			continue
		}
		if !ids[id] {
			ids[id] = true
			fresh = append(fresh, &opening{ns: ns})
		}
	}
	timeout := storeProbeTimeout
	if cfg.RequireStores {
		timeout = storeRequireTimeout
	}
	var wg sync.WaitGroup
	for _, f := range fresh {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			if f.o, f.err = connectStore(ctx, f.ns, log); f.err == nil && probe {
				f.probeErr = probeStore(ctx, f.ns.Name, f.o.st)
			}
		})
	}
	wg.Wait()
	for _, f := range fresh {
		if f.o != nil {
			s.byID[storeID(f.ns)] = f.o
		}
	}
	for _, f := range fresh {
		if f.err != nil {
			s.closeUnused(prev)
			return nil, nil, fmt.Errorf("%s: %s", storeDesc(f.ns), maskSecrets(f.err.Error(), f.ns.URL))
		}
	}
	for i := range cfg.Namespaces {
		if ns := &cfg.Namespaces[i]; ns.Strategy != StrategyLocal {
			s.byNamespace[ns.Name] = s.byID[storeID(ns)].st
		}
	}
	if probe {
		for _, f := range fresh {
			results = append(results, probed{ns: f.ns, err: f.probeErr})
		}
	}
	return s, results, nil
}

// probed is a store openStores probed: the first namespace naming it, and
// the probe's error (nil: the store answered).
type probed struct {
	ns  *NamespaceConfig
	err error
}

// storeDesc names the store of a namespace in errors: its namespace,
// strategy and URL, the password masked.
func storeDesc(ns *NamespaceConfig) string {
	return fmt.Sprintf("namespace %q: strategy %s at %s", ns.Name, ns.Strategy, maskURL(ns.URL))
}

// logStoreReady logs that the store of ns answered.
func logStoreReady(log *slog.Logger, ns *NamespaceConfig) {
	log.Info("store ready", "namespace", ns.Name, "strategy", ns.Strategy, "url", maskURL(ns.URL))
}

// connectStore opens the store of ns, its client's lines logged on log.
func connectStore(ctx context.Context, ns *NamespaceConfig, log *slog.Logger) (*openStore, error) {
	switch ns.Strategy {
	case StrategyMemory:
		return &openStore{st: memory.New()}, nil
	case StrategyRedis:
		return openRedis(ns)
	case StrategyPostgres:
		return openPostgres(ctx, ns, log)
	}
	return nil, fmt.Errorf("unknown strategy %q", ns.Strategy)
}

// probeStore reads one counter of the store (a key no one writes) in
// namespace ns: nil when the store answers (a PostgreSQL store's schema
// is migrated first).
func probeStore(ctx context.Context, ns string, st strategy.Strategy) error {
	size := time.Minute
	_, err := st.GetWindow(ctx, ns, probeKey, arith.WindowStart(time.Now(), size), size)
	return err
}

// lookup returns the store of id, if s (which may be nil) holds one.
func (s *stores) lookup(id string) (*openStore, bool) {
	if s == nil {
		return nil, false
	}
	o, ok := s.byID[id]
	return o, ok
}

func openRedis(ns *NamespaceConfig) (*openStore, error) {
	newClient, err := parseRedis(ns)
	if err != nil {
		return nil, err
	}
	client := newClient()
	var rc redis.Config
	if ns.Redis != nil {
		rc = redisConfig(ns.Redis)
	}
	st, err := redis.New(client, rc)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	return &openStore{st: st, close: func() { _ = client.Close() }}, nil
}

// openPostgres opens a pool and a store on it. A server that cannot be
// reached within ctx leaves the schema to the store's first call that
// reaches it; a server that refuses the migration is an error.
func openPostgres(ctx context.Context, ns *NamespaceConfig, log *slog.Logger) (*openStore, error) {
	pc, err := pgxpool.ParseConfig(ns.URL)
	if err != nil {
		return nil, errors.New("not a PostgreSQL URL or DSN")
	}
	pc.ConnConfig.Tracer = pgxTracer(log)
	var cfg postgres.Config
	if p := ns.Postgres; p != nil {
		if p.MaxConns > 0 {
			pc.MaxConns = int32(min(p.MaxConns, 1<<30))
		}
		cfg = postgresConfig(p)
	}
	cfg.Logger = log
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, err
	}
	st, err := postgres.New(ctx, pool, cfg)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &openStore{st: st, close: pool.Close}, nil
}

// adopt adds the stores of o that s does not hold.
func (s *stores) adopt(o *stores) {
	for id, st := range o.byID {
		if _, ok := s.byID[id]; !ok {
			s.byID[id] = st
		}
	}
}

// close closes the clients; call it after the instance's final sync.
func (s *stores) close() { s.closeUnused(nil) }

// closeUnused closes the clients of s that keep (which may be nil) does
// not hold: after a reload, once no namespace uses them.
func (s *stores) closeUnused(keep *stores) {
	for id, o := range s.byID {
		if _, kept := keep.lookup(id); !kept && o.close != nil {
			o.close()
		}
		if keep == nil {
			delete(s.byID, id)
		}
	}
}
