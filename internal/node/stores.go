package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ratesync/ratesync/internal/arith"
	"github.com/ratesync/ratesync/internal/node/config"
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
func storeID(ns *config.NamespaceConfig) string {
	return fmt.Sprintf("%s|%s|%+v|%+v", ns.Strategy, ns.URL, ns.Redis, ns.Postgres)
}

// Every store the node opens decides checks in the store: the
// configuration is validated with that in mind (the config package's storeInConfig).
var (
	_ strategy.Checker = (*memory.Store)(nil)
	_ strategy.Checker = (*redis.Store)(nil)
	_ strategy.Checker = (*postgres.Store)(nil)
)

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
func openStores(ctx context.Context, cfg config.Config, log *slog.Logger, prev *stores, probe bool) (s *stores, results []probed, err error) {
	s = &stores{byNamespace: map[string]strategy.Strategy{}, byID: map[string]*openStore{}}
	fresh := s.takeOver(cfg, prev)
	timeout := storeProbeTimeout
	if cfg.RequireStores {
		timeout = storeRequireTimeout
	}
	openAll(ctx, fresh, timeout, log, probe)
	for _, f := range fresh {
		if f.o != nil {
			s.byID[storeID(f.ns)] = f.o
		}
	}
	for _, f := range fresh {
		if f.err != nil {
			s.closeUnused(prev)
			return nil, nil, fmt.Errorf("%s: %s", storeDesc(f.ns), config.MaskSecrets(f.err.Error(), f.ns.URL))
		}
	}
	for i := range cfg.Namespaces {
		if ns := &cfg.Namespaces[i]; ns.Strategy != config.StrategyLocal {
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

// opening is a store being opened.
type opening struct {
	ns       *config.NamespaceConfig // the first namespace naming the store
	o        *openStore
	err      error
	probeErr error
}

// takeOver puts in s the stores of cfg that prev holds, and returns those
// to open, one per store.
func (s *stores) takeOver(cfg config.Config, prev *stores) []*opening {
	var fresh []*opening
	ids := map[string]bool{}
	for i := range cfg.Namespaces {
		ns := &cfg.Namespaces[i]
		if ns.Strategy == config.StrategyLocal {
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
	return fresh
}

// openAll opens the stores concurrently, each within timeout, and with
// probe probes each.
func openAll(ctx context.Context, fresh []*opening, timeout time.Duration, log *slog.Logger, probe bool) {
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
}

// probed is a store openStores probed: the first namespace naming it, and
// the probe's error (nil: the store answered).
type probed struct {
	ns  *config.NamespaceConfig
	err error
}

// storeDesc names the store of a namespace in errors: its namespace,
// strategy and URL, the password masked.
func storeDesc(ns *config.NamespaceConfig) string {
	return fmt.Sprintf("namespace %q: strategy %s at %s", ns.Name, ns.Strategy, config.MaskURL(ns.URL))
}

// logStoreReady logs that the store of ns answered.
func logStoreReady(log *slog.Logger, ns *config.NamespaceConfig) {
	log.Info("store ready", "namespace", ns.Name, "strategy", ns.Strategy, "url", config.MaskURL(ns.URL))
}

// connectStore opens the store of ns, its client's lines logged on log.
func connectStore(ctx context.Context, ns *config.NamespaceConfig, log *slog.Logger) (*openStore, error) {
	switch ns.Strategy {
	case config.StrategyMemory:
		return &openStore{st: memory.New()}, nil
	case config.StrategyRedis:
		return openRedis(ns)
	case config.StrategyPostgres:
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

func openRedis(ns *config.NamespaceConfig) (*openStore, error) {
	newClient, err := ns.RedisClient()
	if err != nil {
		return nil, err
	}
	client := newClient()
	var rc redis.Config
	if ns.Redis != nil {
		rc = ns.Redis.StoreConfig()
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
func openPostgres(ctx context.Context, ns *config.NamespaceConfig, log *slog.Logger) (*openStore, error) {
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
		cfg = p.StoreConfig()
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
