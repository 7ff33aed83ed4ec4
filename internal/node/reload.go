package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ratesync/ratesync/internal/node/config"
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
	old := n.state().cfg
	restart, err := keepRunning(old, &cfg)
	if err != nil {
		return err
	}
	if err := checkRoutes(cfg); err != nil {
		return err
	}
	st, err := n.reopenStores(ctx, cfg)
	if err != nil {
		return redactErr(err, cfg)
	}
	next, err := n.prepare(ctx, old, cfg, st)
	if err != nil {
		// Validation passed, so this is a fault of the instance (closed)
		// or of a store; the namespaces changed so far stay changed, and
		// the stores they may use stay open.
		n.stores.adopt(st)
		return redactErr(err, cfg)
	}
	n.publish(next, cfg)
	n.removeNamespaces(ctx, old, cfg)
	n.stores.closeUnused(st)
	n.stores = st
	n.applySettings(cfg)
	for _, f := range restart {
		n.log.Warn("configuration reload: this setting needs a restart; the running value is kept", "field", f)
	}
	n.log.Info("configuration reloaded", append([]any{"trigger", why}, diff(old, cfg).attrs()...)...)
	return nil
}

// checkRoutes refuses a gateway route to a policy cfg does not have.
func checkRoutes(cfg config.Config) error {
	if cfg.Gateway == nil {
		return nil
	}
	for _, r := range cfg.Gateway.Routes {
		if !slices.ContainsFunc(cfg.Policies, func(p config.PolicyConfig) bool { return p.Name == r.Policy }) {
			return fmt.Errorf("gateway route %q: no such policy %q (the gateway section is kept until a restart)", r.Path, r.Policy)
		}
	}
	return nil
}

// reopenStores opens the stores of cfg, taking over the running ones
// whose settings did not change. A new store that does not answer yet is
// used all the same, as at start: its namespace's syncer reports it.
func (n *Node) reopenStores(ctx context.Context, cfg config.Config) (*stores, error) {
	st, probed, err := openStores(ctx, cfg, n.log, n.stores, true)
	if err != nil {
		return nil, err
	}
	for _, p := range probed {
		if p.err == nil {
			logStoreReady(n.log, p.ns)
		}
	}
	return st, nil
}

// prepared is what a reload publishes: the live state, and the gateway's
// routes (nil without a gateway) with the ones they replace.
type prepared struct {
	live              *live
	routes, oldRoutes *gwRoutes
}

// prepare changes the namespaces (first, so that the policies built next
// find them as configured), then builds the live state and the gateway's
// routes of cfg, on the stores st.
func (n *Node) prepare(ctx context.Context, old, cfg config.Config, st *stores) (prepared, error) {
	errs := n.changeNamespaces(ctx, old, cfg, st)
	l, err := n.build(cfg)
	if err != nil {
		return prepared{}, errors.Join(append(errs, err)...)
	}
	p := prepared{live: l}
	if n.gateway != nil {
		p.oldRoutes = n.gateway.routes.Load()
		if p.routes, err = newRoutes(*cfg.Gateway, l.policies, n.log, p.oldRoutes); err != nil {
			errs = append(errs, err)
		}
	}
	return p, errors.Join(errs...)
}

// changeNamespaces creates the namespaces cfg adds and changes those it
// changes (an Update keeps the namespace's counts); removing is for after
// the new state is published (removeNamespaces).
func (n *Node) changeNamespaces(ctx context.Context, old, cfg config.Config, st *stores) []error {
	oldNS := map[string]config.NamespaceConfig{}
	for _, ns := range old.Namespaces {
		oldNS[ns.Name] = ns
	}
	var errs []error
	for _, ns := range cfg.Namespaces {
		prev, existed := oldNS[ns.Name]
		if existed && sameNamespace(prev, ns) {
			continue
		}
		if err := n.changeNamespace(ctx, prev, existed, ns, st); err != nil {
			errs = append(errs, fmt.Errorf("namespace %q: %w", ns.Name, err))
		}
	}
	return errs
}

// changeNamespace creates ns, or changes prev into ns: in place, or, on
// another dict, with its counts starting over.
func (n *Node) changeNamespace(ctx context.Context, prev config.NamespaceConfig, existed bool, ns config.NamespaceConfig, st *stores) error {
	nc := ns.Namespace(st.byNamespace[ns.Name])
	switch {
	case !existed:
		return n.in.New(nc)
	case prev.Dict != ns.Dict:
		n.log.Warn("namespace moved to another dict: its counts start over", "namespace", ns.Name, "from", prev.Dict, "to", ns.Dict)
		if err := n.in.Remove(ctx, ns.Name); err != nil {
			return err
		}
		return n.in.New(nc)
	}
	return n.in.Update(nc)
}

// publish makes p the state requests read, and gives the rls service its
// options and rules (after the rls namespace's Update: it reads its sync
// mode again).
func (n *Node) publish(p prepared, cfg config.Config) {
	n.live.Store(p.live)
	if p.routes != nil {
		n.gateway.routes.Store(p.routes)
		if p.routes.proxy != p.oldRoutes.proxy {
			p.oldRoutes.closeIdle()
		}
	}
	if n.rls != nil {
		n.rls.SetOptions(n.rlsOptions(cfg))
		n.rls.SetConfig(cfg.RLS.Rules)
	}
}

// removeNamespaces removes the namespaces of old that cfg does not have,
// each with its final push.
func (n *Node) removeNamespaces(ctx context.Context, old, cfg config.Config) {
	for _, ns := range old.Namespaces {
		if slices.ContainsFunc(cfg.Namespaces, func(c config.NamespaceConfig) bool { return c.Name == ns.Name }) {
			continue
		}
		if err := n.in.Remove(ctx, ns.Name); err != nil {
			n.log.Warn("removed namespace: its final push failed", "namespace", ns.Name, "err", err)
		}
	}
}

// applySettings applies the process's settings: admin access, the log's
// level and secrets, the heap floor.
func (n *Node) applySettings(cfg config.Config) {
	n.adminOpen.Store(cfg.Node.AdminToken == "" && n.loopback.Load())
	if n.logCtl != nil {
		n.logCtl.set(cfg)
	}
	if n.heapFloor != nil {
		n.heapFloor(cfg.Node.GCHeapFloor)
	}
}

// keepRunning gives cfg the running values (of old) of the settings that
// cannot change while the node serves, and returns the fields that
// differed: the listeners, node.id, the log format, require_stores, and
// whether there is a gateway or an rls section at all.
func keepRunning(old config.Config, cfg *config.Config) (restart []string, err error) {
	k := &keeper{}
	k.str("node.id", old.Node.ID, &cfg.Node.ID)
	k.str("node.listen", old.Node.Listen, &cfg.Node.Listen)
	k.str("node.log_format", old.Node.LogFormat, &cfg.Node.LogFormat)
	keep(k, "require_stores", old.RequireStores, &cfg.RequireStores) // read at start only
	k.gateway(old.Gateway, cfg)
	if err := k.rls(old, cfg); err != nil {
		return nil, err
	}
	return k.restart, nil
}

// keeper collects the settings a reload keeps at their running values.
type keeper struct{ restart []string }

// keep sets *next to running, noting field if they differ.
func keep[T comparable](k *keeper, field string, running T, next *T) {
	if *next != running {
		k.restart = append(k.restart, field)
		*next = running
	}
}

func (k *keeper) str(field, running string, next *string) { keep(k, field, running, next) }

// gateway keeps the presence of the gateway section, its listener and
// its timeouts (the gateway server's read and write timeouts derive from
// them).
func (k *keeper) gateway(og *config.GatewayConfig, cfg *config.Config) {
	switch g := cfg.Gateway; {
	case og == nil && g != nil:
		k.restart = append(k.restart, "gateway (section added)")
		cfg.Gateway = nil
	case og != nil && g == nil:
		k.restart = append(k.restart, "gateway (section removed)")
		kept := *og
		cfg.Gateway = &kept
	case og != nil:
		k.str("gateway.listen", og.Listen, &g.Listen)
		keep(k, "gateway.timeout", og.Timeout, &g.Timeout)
		keep(k, "gateway.connect_timeout", og.ConnectTimeout, &g.ConnectTimeout)
	}
}

// rls keeps the presence of the rls section, with its namespace, and its
// listener.
func (k *keeper) rls(old config.Config, cfg *config.Config) error {
	switch or, r := old.RLS, cfg.RLS; {
	case or == nil && r != nil:
		k.restart = append(k.restart, "rls (section added)")
		cfg.RLS = nil
		cfg.Namespaces = cfg.Namespaces[:len(cfg.Namespaces)-1] // the rls section's, appended last
	case or != nil && r == nil:
		if slices.ContainsFunc(cfg.Namespaces, func(ns config.NamespaceConfig) bool { return ns.Name == config.RLSNamespace }) {
			return fmt.Errorf("namespaces: %q is the running rls section's namespace: remove the rls section with a restart first", config.RLSNamespace)
		}
		k.restart = append(k.restart, "rls (section removed)")
		kept := *or
		cfg.RLS = &kept
		cfg.Namespaces = append(cfg.Namespaces, old.Namespaces[len(old.Namespaces)-1])
	case or != nil:
		k.str("rls.listen", or.Listen, &r.Listen)
	}
	return nil
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
	c.settings = changedSettings(old, cfg)
	return c
}

// named compares two lists of names: the names added, those whose item
// changed (same(i, j) false for olds[i] and news[j]), and those removed.
func named(olds, news []string, same func(i, j int) bool) (added, updated, removed []string) {
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

// changedSettings returns the fields, other than namespaces, policies,
// routes and rules, that differ from old to cfg.
func changedSettings(old, cfg config.Config) []string {
	var out []string
	field := func(name string, changed bool) {
		if changed {
			out = append(out, name)
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
	return out
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
