package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/ratesync/ratesync/internal/node/config"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"
)

// reloadTimeout bounds applying one configuration: opening new stores and
// the final pushes of removed namespaces.
const reloadTimeout = 30 * time.Second

// reloader is the part of the Node that applies new configurations. One
// reload runs at a time, under mu; requests never wait for it.
type reloader struct {
	mu        sync.Mutex
	load      func() (config.Config, error) // reads flags, file and environment as at start; nil: the node does not reload
	logCtl    *logControl                   // the logger's level and secrets; nil: they stay as at start
	heapFloor func(int64)                   // sets node.gc_heap_floor (heapFloor); nil: it stays as at start
	stores    *stores                       // the stores in use; changed under mu
	hup       <-chan os.Signal              // SIGHUP; nil: no signal
	seen      string                        // fingerprint of the configuration files as last read
	closed    bool                          // the node closed: no more reloads
}

// reload reads the configuration again (flags, file, environment, the rls
// section's files) and applies it. A configuration that does not load
// (YAML, validation or rls errors) or a store that does not open keeps the
// running configuration entirely. why says what asked for the reload
// ("SIGHUP", "file changed"). Reloads are serialized.
func (n *Node) reload(ctx context.Context, why string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return errors.New("reload: the node is shutting down")
	}
	if n.load == nil {
		return errors.New("reload: the node has no configuration source")
	}
	// The fingerprint is taken before reading: a change made while the
	// files are read is seen by the next poll.
	n.seen = fingerprint(n.watched(n.state().cfg))
	cfg, err := n.load()
	if err == nil {
		err = n.apply(ctx, cfg, why)
	}
	if err != nil {
		n.metrics.reloaded(false)
		n.log.Error("configuration reload failed: the running configuration is kept", "trigger", why, "err", err)
		return err
	}
	n.metrics.reloaded(true)
	return nil
}

// apply makes cfg the node's configuration: settings that need a restart
// keep their running values (each logged at WARN), stores are opened for
// new store settings, namespaces created, updated (counts kept) and
// removed, policies, routes and the rls service's rules swapped, stores no
// longer used closed. Callers hold n.mu.
func (n *Node) apply(ctx context.Context, cfg config.Config, why string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reloadTimeout)
	defer cancel()
	old := n.state()
	restart, err := keepRunning(old.cfg, &cfg)
	if err != nil {
		return err
	}
	if g := cfg.Gateway; g != nil {
		for _, r := range g.Routes {
			if !slices.ContainsFunc(cfg.Policies, func(p config.PolicyConfig) bool { return p.Name == r.Policy }) {
				return fmt.Errorf("gateway route %q: no such policy %q (the gateway section is kept until a restart)", r.Path, r.Policy)
			}
		}
	}
	// A new store that does not answer yet is used all the same, as at
	// start: its namespace's syncer reports it.
	st, probed, err := openStores(ctx, cfg, n.log, n.stores, true)
	if err != nil {
		return redactErr(err, cfg)
	}
	for _, p := range probed {
		if p.err == nil {
			logStoreReady(n.log, p.ns)
		}
	}
	ch := diff(old.cfg, cfg)

	// Namespaces first, so that the policies built next find them as
	// configured. An Update keeps the namespace's counts.
	var errs []error
	oldNS := map[string]config.NamespaceConfig{}
	for _, ns := range old.cfg.Namespaces {
		oldNS[ns.Name] = ns
	}
	for _, ns := range cfg.Namespaces {
		prev, existed := oldNS[ns.Name]
		nc := ns.Namespace(st.byNamespace[ns.Name])
		switch {
		case !existed:
			err = n.in.New(nc)
		case sameNamespace(prev, ns):
			continue
		case prev.Dict != ns.Dict:
			n.log.Warn("namespace moved to another dict: its counts start over", "namespace", ns.Name, "from", prev.Dict, "to", ns.Dict)
			if err = n.in.Remove(ctx, ns.Name); err == nil {
				err = n.in.New(nc)
			}
		default:
			err = n.in.Update(nc)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("namespace %q: %w", ns.Name, err))
		}
	}
	l, err := n.build(cfg)
	if err != nil {
		errs = append(errs, err)
	}
	var routes, oldRoutes *gwRoutes
	if n.gateway != nil && err == nil {
		oldRoutes = n.gateway.routes.Load()
		if routes, err = newRoutes(*cfg.Gateway, l.policies, n.log, oldRoutes); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		// Validation passed, so this is a fault of the instance (closed)
		// or of a store; the namespaces changed so far stay changed, and
		// the stores they may use stay open.
		n.stores.adopt(st)
		return redactErr(errors.Join(errs...), cfg)
	}

	n.live.Store(l)
	if routes != nil {
		n.gateway.routes.Store(routes)
		if routes.proxy != oldRoutes.proxy {
			oldRoutes.closeIdle()
		}
	}
	if n.rls != nil {
		n.rls.SetOptions(n.rlsOptions(cfg))
		n.rls.SetConfig(cfg.RLS.Rules) // after the rls namespace's Update: it reads its sync mode again
	}
	for _, ns := range old.cfg.Namespaces {
		if !slices.ContainsFunc(cfg.Namespaces, func(c config.NamespaceConfig) bool { return c.Name == ns.Name }) {
			if err := n.in.Remove(ctx, ns.Name); err != nil {
				n.log.Warn("removed namespace: its final push failed", "namespace", ns.Name, "err", err)
			}
		}
	}
	n.stores.closeUnused(st)
	n.stores = st
	n.adminOpen.Store(cfg.Node.AdminToken == "" && n.loopback.Load())
	if n.logCtl != nil {
		n.logCtl.set(cfg)
	}
	if n.heapFloor != nil {
		n.heapFloor(cfg.Node.GCHeapFloor)
	}
	for _, f := range restart {
		n.log.Warn("configuration reload: this setting needs a restart; the running value is kept", "field", f)
	}
	n.log.Info("configuration reloaded", append([]any{"trigger", why}, ch.attrs()...)...)
	return nil
}

// keepRunning gives cfg the running values (of old) of the settings that
// cannot change while the node serves, and returns the fields that
// differed: the listeners, node.id, the log format, require_stores, and
// whether there is a gateway or an rls section at all.
func keepRunning(old config.Config, cfg *config.Config) (restart []string, err error) {
	keep := func(field string, running, next *string) {
		if *running != *next {
			restart = append(restart, field)
			*next = *running
		}
	}
	keep("node.id", &old.Node.ID, &cfg.Node.ID)
	keep("node.listen", &old.Node.Listen, &cfg.Node.Listen)
	keep("node.log_format", &old.Node.LogFormat, &cfg.Node.LogFormat)
	if old.RequireStores != cfg.RequireStores { // read at start only
		restart, cfg.RequireStores = append(restart, "require_stores"), old.RequireStores
	}
	switch og, g := old.Gateway, cfg.Gateway; {
	case og == nil && g != nil:
		restart = append(restart, "gateway (section added)")
		cfg.Gateway = nil
	case og != nil && g == nil:
		restart = append(restart, "gateway (section removed)")
		kept := *og
		cfg.Gateway = &kept
	case og != nil:
		keep("gateway.listen", &og.Listen, &g.Listen)
		// The gateway server's read and write timeouts derive from these.
		if og.Timeout != g.Timeout {
			restart, g.Timeout = append(restart, "gateway.timeout"), og.Timeout
		}
		if og.ConnectTimeout != g.ConnectTimeout {
			restart, g.ConnectTimeout = append(restart, "gateway.connect_timeout"), og.ConnectTimeout
		}
	}
	switch or, r := old.RLS, cfg.RLS; {
	case or == nil && r != nil:
		restart = append(restart, "rls (section added)")
		cfg.RLS = nil
		cfg.Namespaces = cfg.Namespaces[:len(cfg.Namespaces)-1] // the rls section's, appended last
	case or != nil && r == nil:
		if slices.ContainsFunc(cfg.Namespaces, func(ns config.NamespaceConfig) bool { return ns.Name == config.RLSNamespace }) {
			return nil, fmt.Errorf("namespaces: %q is the running rls section's namespace: remove the rls section with a restart first", config.RLSNamespace)
		}
		restart = append(restart, "rls (section removed)")
		kept := *or
		cfg.RLS = &kept
		cfg.Namespaces = append(cfg.Namespaces, old.Namespaces[len(old.Namespaces)-1])
	case or != nil:
		keep("rls.listen", &or.Listen, &r.Listen)
	}
	return restart, nil
}

// sameNamespace reports whether a and b configure a namespace alike: its
// store and its namespace.Config.
func sameNamespace(a, b config.NamespaceConfig) bool {
	a.URLFrom, b.URLFrom = "", ""
	return reflect.DeepEqual(a, b)
}

// changes are what a reload changed, for its log line.
type changes struct {
	nsAdded, nsUpdated, nsRemoved []string
	polAdded, polUpdated, polRem  []string
	routes                        bool
	rlsDomains                    []string // the domains in force, when the rls rules changed
	settings                      []string // other fields that changed
}

// diff returns what differs from old to cfg.
func diff(old, cfg config.Config) changes {
	var c changes
	named := func(olds, news []string, same func(i, j int) bool) (added, updated, removed []string) {
		for j, name := range news {
			switch i := slices.Index(olds, name); {
			case i < 0:
				added = append(added, name)
			case !same(i, j):
				updated = append(updated, name)
			}
		}
		for _, name := range olds {
			if !slices.Contains(news, name) {
				removed = append(removed, name)
			}
		}
		return added, updated, removed
	}
	c.nsAdded, c.nsUpdated, c.nsRemoved = named(nsList(old), nsList(cfg), func(i, j int) bool {
		return sameNamespace(old.Namespaces[i], cfg.Namespaces[j])
	})
	c.polAdded, c.polUpdated, c.polRem = named(policyList(old), policyList(cfg), func(i, j int) bool {
		return reflect.DeepEqual(old.Policies[i], cfg.Policies[j])
	})
	if old.Gateway != nil && cfg.Gateway != nil && !reflect.DeepEqual(old.Gateway.Routes, cfg.Gateway.Routes) {
		c.routes = true
	}
	if old.RLS != nil && cfg.RLS != nil && !reflect.DeepEqual(old.RLS.Rules, cfg.RLS.Rules) {
		c.rlsDomains = cfg.RLS.Rules.Domains()
		if c.rlsDomains == nil {
			c.rlsDomains = []string{}
		}
	}
	field := func(name string, changed bool) {
		if changed {
			c.settings = append(c.settings, name)
		}
	}
	o, nn := old.Node, cfg.Node
	field("node.admin_token", o.AdminToken != nn.AdminToken)
	field("node.log_level", o.LogLevel != nn.LogLevel)
	field("node.shutdown_timeout", o.ShutdownTimeout != nn.ShutdownTimeout)
	field("node.max_body_bytes", o.MaxBodyBytes != nn.MaxBodyBytes)
	field("node.max_key_bytes", o.MaxKeyBytes != nn.MaxKeyBytes)
	field("node.gc_heap_floor", o.GCHeapFloor != nn.GCHeapFloor)
	field("headers", !reflect.DeepEqual(old.Headers, cfg.Headers))
	if og, g := old.Gateway, cfg.Gateway; og != nil && g != nil {
		field("gateway.upstream", og.Upstream != g.Upstream)
		field("gateway.trusted_proxies", !slices.Equal(og.TrustedProxies, g.TrustedProxies))
		field("gateway.consumer_header", og.ConsumerHeader != g.ConsumerHeader)
	}
	if or, r := old.RLS, cfg.RLS; or != nil && r != nil {
		field("rls.response_headers", or.ResponseHeaders != r.ResponseHeaders)
		field("rls.config", or.Config != r.Config)
	}
	return c
}

func nsList(c config.Config) []string {
	out := make([]string, len(c.Namespaces))
	for i, ns := range c.Namespaces {
		out[i] = ns.Name
	}
	return out
}

func policyList(c config.Config) []string {
	out := make([]string, len(c.Policies))
	for i, p := range c.Policies {
		out[i] = p.Name
	}
	return out
}

// attrs returns the log attributes of c: only what changed.
func (c changes) attrs() []any {
	var out []any
	list := func(key string, v []string) {
		if len(v) > 0 {
			out = append(out, key, strings.Join(v, ","))
		}
	}
	list("namespaces_added", c.nsAdded)
	list("namespaces_updated", c.nsUpdated)
	list("namespaces_removed", c.nsRemoved)
	list("policies_added", c.polAdded)
	list("policies_updated", c.polUpdated)
	list("policies_removed", c.polRem)
	if c.routes {
		out = append(out, "routes", "updated")
	}
	if c.rlsDomains != nil {
		out = append(out, "rls_domains", strings.Join(c.rlsDomains, ","))
	}
	list("settings", c.settings)
	if len(out) == 0 {
		out = append(out, "changes", "none")
	}
	return out
}

// watchEvery is how often the configuration files are read for changes.
const watchEvery = time.Second

// watch reloads on each signal from hup and whenever the configuration
// files change (polled every watchEvery: the node's file and the rls
// section's files), until ctx is done.
func (n *Node) watch(ctx context.Context, hup <-chan os.Signal, every time.Duration) {
	n.mu.Lock()
	if n.seen == "" {
		n.seen = fingerprint(n.watched(n.state().cfg))
	}
	n.mu.Unlock()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			_ = n.reload(ctx, "SIGHUP")
		case <-t.C:
			n.mu.Lock()
			files, seen := n.watched(n.state().cfg), n.seen
			n.mu.Unlock()
			if fingerprint(files) != seen {
				_ = n.reload(ctx, "file changed")
			}
		}
	}
}

// watched returns the files a reload reads: the node's configuration file
// and the rls section's file or directory.
func (n *Node) watched(cfg config.Config) []string {
	var out []string
	if cfg.File != "" {
		out = append(out, cfg.File)
	}
	if cfg.RLS != nil && cfg.RLS.Path != "" {
		out = append(out, cfg.RLS.Path)
	}
	return out
}

// fingerprint hashes the contents of paths; a directory stands for its
// .yaml and .yml files, as rls.LoadPath reads them. A file that cannot be
// read hashes as its error, so that its return is a change too.
func fingerprint(paths []string) string {
	h := sha256.New()
	add := func(name string) {
		data, err := os.ReadFile(name)
		if err != nil {
			data = []byte("error: " + err.Error())
		}
		fmt.Fprintf(h, "%s\x00%d\x00", name, len(data))
		h.Write(data)
	}
	for _, p := range paths {
		entries, err := os.ReadDir(p)
		if err != nil { // a file, or nothing
			add(p)
			continue
		}
		for _, e := range entries {
			if ext := filepath.Ext(e.Name()); !e.IsDir() && (ext == ".yaml" || ext == ".yml") {
				add(filepath.Join(p, e.Name()))
			}
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}
