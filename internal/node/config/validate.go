package config

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratesync/ratesync/middleware"
	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
	"github.com/ratesync/ratesync/rls"
	"github.com/ratesync/ratesync/shm"
	"github.com/ratesync/ratesync/strategy"
)

// applyDefaults fills in what the file left out, secrets from the
// environment included: the effective configuration shows the values in
// force. set reports whether the file gives a field (by path) a value; a
// value the file gives is kept, and validated, even when it is zero.
func (c *Config) applyDefaults(getenv func(string) string, set func(path string) bool) {
	c.Node.applyDefaults(getenv, set)
	if c.Headers.Families == nil {
		c.Headers.Families = []string{"ratelimit", "x-ratelimit"}
	}
	if len(c.Namespaces) == 0 {
		c.Namespaces = []NamespaceConfig{{Name: "default"}}
	}
	capacity := map[string]int{} // of each dict: validate refuses two different ones
	for i := range c.Namespaces {
		ns := &c.Namespaces[i]
		ns.applyDefaults(getenv, func(field string) bool { return set(fmt.Sprintf("namespaces[%d].%s", i, field)) })
		if ns.DictCapacity > 0 { // a bad one is reported on its namespace alone
			capacity[ns.Dict] = ns.DictCapacity
		}
	}
	if r := c.RLS; r != nil {
		ns := r.applyDefaults(getenv, set)
		if ns.DictCapacity > 0 { // a bad one is reported on the rls section alone
			capacity[ns.Dict] = ns.DictCapacity
		}
		c.Namespaces = append(c.Namespaces, ns)
	}
	for i := range c.Namespaces {
		ns := &c.Namespaces[i]
		if ns.DictCapacity == 0 {
			ns.DictCapacity = cmp.Or(capacity[ns.Dict], shm.DefaultCapacity)
		}
	}
	if c.RLS != nil {
		c.RLS.DictCapacity = c.Namespaces[len(c.Namespaces)-1].DictCapacity
	}
	for i := range c.Policies {
		c.Policies[i].applyDefaults(func(field string) bool { return set(fmt.Sprintf("policies[%d].%s", i, field)) })
	}
	if g := c.Gateway; g != nil {
		g.Listen = cmp.Or(g.Listen, defaultGatewayListen)
		if !set("gateway.timeout") {
			g.Timeout = Duration(defaultGatewayTimeout)
		}
		if !set("gateway.connect_timeout") {
			g.ConnectTimeout = Duration(defaultConnectTimeout)
		}
	}
}

// applyDefaults fills in the rls section and returns the namespace it
// counts in.
func (r *RLSConfig) applyDefaults(getenv func(string) string, set func(path string) bool) NamespaceConfig {
	r.Listen = cmp.Or(r.Listen, defaultRLSListen)
	ns := NamespaceConfig{
		Name: RLSNamespace, Strategy: r.Strategy, URL: r.URL, SyncRate: r.SyncRate, Clock: r.Clock,
		Dict: r.Dict, DictCapacity: r.DictCapacity, Timeout: r.Timeout, Leases: r.Leases, StoreDown: r.StoreDown,
		Redis: r.Redis, Postgres: r.Postgres,
	}
	for _, d := range rls.Units() {
		ns.WindowSizes = append(ns.WindowSizes, Duration(d))
	}
	ns.applyDefaults(getenv, func(field string) bool { return set("rls." + field) })
	r.Strategy, r.URL, r.SyncRate, r.Clock, r.Dict, r.Redis, r.Postgres = ns.Strategy, ns.URL, ns.SyncRate, ns.Clock, ns.Dict, ns.Redis, ns.Postgres
	r.StoreDown = ns.StoreDown
	return ns
}

func (n *NodeConfig) applyDefaults(getenv func(string) string, set func(path string) bool) {
	if n.ID == "" {
		n.ID, _ = os.Hostname()
		n.ID = cmp.Or(n.ID, "node")
	}
	n.Listen = cmp.Or(n.Listen, DefaultListen)
	switch {
	case n.AdminToken != "":
		n.AdminTokenFrom = "file"
	case getenv(EnvAdminToken) != "":
		n.AdminToken, n.AdminTokenFrom = getenv(EnvAdminToken), EnvAdminToken
	}
	n.LogFormat = cmp.Or(n.LogFormat, "text")
	n.LogLevel = cmp.Or(n.LogLevel, "info")
	if !set("node.shutdown_timeout") {
		n.ShutdownTimeout = Duration(defaultShutdownTimeout)
	}
	if !set("node.max_body_bytes") {
		n.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if !set("node.max_key_bytes") {
		n.MaxKeyBytes = DefaultMaxKeyBytes
	}
	if !set("node.gc_heap_floor") {
		n.GCHeapFloor = defaultGCHeapFloor
	}
}

func (ns *NamespaceConfig) applyDefaults(getenv func(string) string, set func(field string) bool) {
	ns.Strategy = cmp.Or(ns.Strategy, StrategyLocal)
	switch {
	case ns.Strategy == StrategyLocal:
		ns.SyncRate = Duration(namespace.LocalOnly)
	case !set("sync_rate"):
		ns.SyncRate = Duration(defaultSyncRate)
	}
	if ns.Strategy != StrategyLocal && !set("timeout") {
		ns.Timeout = Duration(defaultCallTimeout)
	}
	if ns.StoreDown == "" && ns.storeDownApplies() {
		ns.StoreDown = storeDownShare
	}
	if ns.WindowSizes == nil {
		ns.WindowSizes = slices.Clone(defaultWindowSizes)
	}
	ns.Dict = cmp.Or(ns.Dict, namespace.DefaultDict)
	if ns.Clock == "" {
		ns.Clock = ClockStore
		if ns.Strategy == StrategyLocal {
			ns.Clock = ClockNode // no store to take the time of
		}
	}
	env := map[string]string{StrategyRedis: EnvRedisURL, StrategyPostgres: EnvPostgresURL}[ns.Strategy]
	switch {
	case ns.URL != "":
		ns.URLFrom = "file"
	case env != "" && getenv(env) != "":
		ns.URL, ns.URLFrom = getenv(env), env
	}
	storeDefaults(ns)
}

func (p *PolicyConfig) applyDefaults(set func(field string) bool) {
	p.Namespace = cmp.Or(p.Namespace, namespace.DefaultName)
	if !set("cost") {
		p.Cost = 1
	}
	if len(p.Key) == 0 {
		p.Key = stringList{"ip"}
	}
	p.MissingKey = cmp.Or(p.MissingKey, "ip")
	p.OnStoreDown = cmp.Or(p.OnStoreDown, "local")
	p.ErrorMessage = cmp.Or(p.ErrorMessage, middleware.DefaultDeniedMessage)
	for i := range p.Limits {
		if alg, ok := ParseLimitType(p.Limits[i].Type); ok {
			p.Limits[i].Type = LimitType(ratelimiting.Limit{Algorithm: alg})
		}
	}
}

// fillBursts sets the burst a bucket leaves out (or sets to 0) to its
// limit: the capacity in force, shown in the effective configuration.
// After validation, whose errors speak of the fields as the file gives them.
func (p *PolicyConfig) fillBursts() {
	for i := range p.Limits {
		if l := &p.Limits[i]; IsBucket(l.Type) && l.Burst == 0 {
			l.Burst = l.Limit
		}
	}
}

// validate checks the configuration, defaults applied, and reports every
// error with the file, line and field. The rules of a namespace are
// namespace.Config.Validate's, those of a store its Config's Validate,
// those of a policy middleware.Policy.Validate's; the node's own are about
// its file: required fields, references between sections, its listeners
// and the values its API accepts.
func (s *source) validate(c *Config) error {
	s.checkNode(&c.Node)
	nss := s.checkNamespaces(c)
	s.checkDictCapacities(c)
	if c.Gateway != nil {
		s.checkGateway(c.Gateway, c.Node.Listen)
	}
	policies := s.checkPolicies(c, nss)
	if c.RLS != nil {
		s.checkRLS(c.RLS, nss[RLSNamespace], c.Node.Listen, c.gatewayListen())
	}
	if c.Gateway != nil {
		s.checkRoutePolicies(c.Gateway, policies)
	}
	return s.err()
}

// checkNamespaces checks each namespace, the rls section's included, and
// returns their namespace.Config by name.
func (s *source) checkNamespaces(c *Config) map[string]namespace.Config {
	nss := map[string]namespace.Config{}
	for i := range c.Namespaces {
		ns := &c.Namespaces[i]
		path := c.namespacePath(i)
		s.checkNamespaceName(c, path, ns.Name, nss)
		nss[ns.Name] = s.checkNamespace(path, ns)
		if s.invalidWithin(path) {
			s.unsure[ns.Name] = true
		}
	}
	return nss
}

// checkNamespaceName refuses a name another namespace has, or the rls
// section's when there is one.
func (s *source) checkNamespaceName(c *Config, path, name string, nss map[string]namespace.Config) {
	if path == "rls" {
		return
	}
	switch _, dup := nss[name]; {
	case c.RLS != nil && name == RLSNamespace:
		s.reportValue(path+".name", name, "the rls section counts in a namespace of this name: choose another")
	case dup && name != "":
		s.reportValue(path+".name", name, "another namespace has this name")
	}
}

// checkPolicies checks each policy against its namespace, and returns
// the policies' names.
func (s *source) checkPolicies(c *Config, nss map[string]namespace.Config) map[string]bool {
	var consumer string
	if c.Gateway != nil {
		consumer = c.Gateway.ConsumerHeader
	}
	names := map[string]bool{}
	for i := range c.Policies {
		p := &c.Policies[i]
		path := fmt.Sprintf("policies[%d]", i)
		if names[p.Name] {
			s.reportValue(path+".name", p.Name, "another policy has this name")
		}
		names[p.Name] = true
		s.checkPolicy(path, p, nss, nsNames(c), consumer)
	}
	return names
}

// checkRoutePolicies refuses a route to a policy that does not exist
// (unless a policy was not read).
func (s *source) checkRoutePolicies(g *GatewayConfig, policies map[string]bool) {
	for i, r := range g.Routes {
		if r.Policy != "" && !policies[r.Policy] && !s.namesUnread("policies") {
			s.reportValue(fmt.Sprintf("gateway.routes[%d].policy", i), r.Policy, "no such policy")
		}
	}
}

// checkDictCapacities refuses two namespaces on one dict that set
// different capacities: a dict has one, and each namespace shows it.
func (s *source) checkDictCapacities(c *Config) {
	nss := c.Namespaces
	first := map[string]int{} // dict: index of the first namespace setting its capacity
	for i, ns := range nss {
		path := c.namespacePath(i) + ".dict_capacity"
		if !s.set(path) || ns.DictCapacity <= 0 {
			continue
		}
		j, ok := first[ns.Dict]
		if !ok {
			first[ns.Dict] = i
			continue
		}
		if other := nss[j]; other.DictCapacity != ns.DictCapacity {
			s.bad(path, "", fmt.Sprintf("namespace %q (line %d) sets dict %q to %d; namespaces on one dict must set the same capacity, or leave it out",
				other.Name, s.line(c.namespacePath(j)+".dict_capacity"), ns.Dict, other.DictCapacity))
		}
	}
}

// namespacePath is the path of namespace i in the file: "rls" for the
// rls section's, which applyDefaults appends.
func (c *Config) namespacePath(i int) string {
	if c.RLS != nil && i == len(c.Namespaces)-1 {
		return "rls"
	}
	return fmt.Sprintf("namespaces[%d]", i)
}

// checkRLS checks the rls section: its listener, and its configuration
// files, loaded with upstream's rules (errors name file:line) and their
// extension rules checked against the namespace they count in.
func (s *source) checkRLS(r *RLSConfig, ns namespace.Config, nodeListen, gwListen string) {
	switch err := checkHostPort(r.Listen); {
	case err != nil:
		s.reportValue("rls.listen", r.Listen, err.Error())
	case sameListen(r.Listen, nodeListen) || sameListen(r.Listen, gwListen):
		s.reportValue("rls.listen", r.Listen, "must differ from node.listen and gateway.listen")
	}
	if r.Config == "" {
		s.report("rls.config", "required: a file, or a directory of envoyproxy/ratelimit configuration files")
		return
	}
	r.Path = r.Config
	if !filepath.IsAbs(r.Path) && s.file != "" {
		r.Path = filepath.Join(filepath.Dir(s.file), r.Path)
	}
	var (
		rules *rls.Config
		err   error
	)
	if s.unsure[RLSNamespace] { // the files' own errors only: their rules' depend on the section's fields
		rules, err = rls.LoadPath(r.Path)
	} else {
		rules, err = loadRLS(r.Path, ns)
	}
	for _, err := range joined(err) {
		s.reportAs("rls.config", "rls.config", strconv.Quote(r.Config)+": "+err.Error())
	}
	if err == nil {
		r.Rules = rules
	}
}

// loadRLS loads the rls configuration at path and checks its extension
// rules against ns, the namespace they count in, with
// middleware.Policy.Validate: an error names the rule's file:line.
func loadRLS(path string, ns namespace.Config) (*rls.Config, error) {
	rules, err := rls.LoadPath(path)
	if err != nil {
		return nil, err
	}
	var errs []error
	list, limits := rules.Limits()
	for i, l := range limits {
		for _, err := range joined(middleware.Policy{Name: list[i].FullKey, Limits: []ratelimiting.Limit{l}}.Validate(ns)) {
			var pe *middleware.PolicyError
			if errors.As(err, &pe) {
				key := strings.TrimPrefix(pe.Key, "limits[0].")
				key = cmp.Or(map[string]string{"limit": "requests_per_unit", "window": "unit", "type": "algorithm"}[key], key)
				allowed := strings.NewReplacer("sliding_window", "sliding", "fixed_window", "fixed").Replace(pe.Allowed) // as the rls files spell them
				errs = append(errs, fmt.Errorf("%s: %s: %s %s: %s", list[i].Source, list[i].FullKey, key, pe.Value, allowed))
			}
		}
	}
	return rules, errors.Join(errs...)
}

func (s *source) checkNode(n *NodeConfig) {
	if s.set("node.listen") {
		if err := checkHostPort(n.Listen); err != nil {
			s.reportValue("node.listen", n.Listen, err.Error())
		}
	}
	if n.ShutdownTimeout <= 0 {
		s.bad("node.shutdown_timeout", "", "must be > 0")
	}
	if n.MaxBodyBytes < 256 {
		s.bad("node.max_body_bytes", "", "must be at least 256")
	}
	if n.MaxKeyBytes < 1 {
		s.bad("node.max_key_bytes", "", "must be at least 1")
	}
	if n.GCHeapFloor < 0 || n.GCHeapFloor > maxGCHeapFloor {
		s.bad("node.gc_heap_floor", "", fmt.Sprintf("must be 0 (no floor) or a number of bytes up to %d (1 GiB)", maxGCHeapFloor))
	}
}

// storeInConfig stands for a namespace's store while the configuration is
// checked, before any store is opened: namespace.Config.Validate needs a
// strategy, and every store the node opens decides checks in the store
// (package node asserts that each implements strategy.Checker).
type storeInConfig struct {
	strategy.Strategy
	strategy.Checker
}

// bucketStoreInConfig stands for a store that also keeps buckets
// (keepsBuckets), which policies with buckets need.
type bucketStoreInConfig struct {
	storeInConfig
	strategy.BucketStore
}

// checkNamespace checks the namespace at path and returns its
// namespace.Config (without a store).
func (s *source) checkNamespace(path string, ns *NamespaceConfig) namespace.Config {
	field := func(name string) string { return path + "." + name }
	if ns.Name == "" {
		s.report(field("name"), "required")
	}
	s.checkStrategy(path, ns)
	for i, d := range ns.WindowSizes {
		if slices.Index(ns.WindowSizes, d) < i {
			s.bad(fmt.Sprintf("%s.window_sizes[%d]", path, i), "", "listed twice")
		}
	}
	nc := ns.Namespace(nil)
	switch {
	case ns.Strategy == StrategyLocal:
	case keepsBuckets(ns.Strategy):
		nc.Strategy = bucketStoreInConfig{}
	default:
		nc.Strategy = storeInConfig{}
	}
	for _, err := range joined(nc.Validate()) {
		var fe *namespace.FieldError
		if errors.As(err, &fe) {
			s.libError(field(fe.Key), fe.Value, fe.Allowed)
		}
	}
	if ns.Strategy == StrategyRedis || ns.Strategy == StrategyPostgres {
		for _, err := range checkStoreOptions(ns) {
			s.libError(field(err.key), err.value, err.allowed)
		}
		s.checkStoreURL(field("url"), ns)
	}
	return nc
}

// joined returns the errors that err joins (errors.Join), or err alone.
func joined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err == nil {
		return nil
	}
	return []error{err}
}

// libError records an error a library package's Validate found about the
// field at path, unless the node already reported one about it (a missing
// limit is "required", not "0: must be > 0") or about a field within it.
func (s *source) libError(path, value, allowed string) {
	if !s.reported[path] && !s.invalidWithin(path) { // a list with an item not read is shorter

		s.bad(path, value, allowed)
	}
}

// checkStrategy checks the fields that depend on the namespace's
// strategy: sync_rate, url and the store options.
func (s *source) checkStrategy(path string, ns *NamespaceConfig) {
	field := func(name string) string { return path + "." + name }
	local := ns.Strategy == StrategyLocal
	switch {
	case local && s.set(field("sync_rate")):
		s.bad(field("sync_rate"), "", "only with strategy memory, redis or postgres (a local namespace never syncs)")
	case !local && ns.SyncRate < 0:
		s.bad(field("sync_rate"), "", "must be > 0 (periodic) or 0 (synchronous); use strategy local for no sync")
	}
	s.checkTimeout(field("timeout"), ns)
	s.checkStoreDown(field("store_down"), ns)
	if local && ns.Clock == ClockStore && s.set(field("clock")) {
		s.bad(field("clock"), ClockStore, "only with strategy memory, redis or postgres (a local namespace has no store to take the time of: it counts on the node's clock)")
	}
	s.checkStoreFields(path, ns)
}

// checkTimeout checks a namespace's call timeout, at path.
func (s *source) checkTimeout(path string, ns *NamespaceConfig) {
	switch {
	case !s.set(path):
	case ns.Strategy == StrategyLocal:
		s.bad(path, "", "only with strategy memory, redis or postgres (a local namespace never waits for a store)")
	case ns.Timeout < Duration(time.Millisecond) || ns.Timeout > Duration(time.Minute):
		s.bad(path, "", "must be from 1ms to 1m, like 500ms or 1s")
	}
}

// checkStoreDown refuses a namespace's store_down, at path, where it
// does not apply: a namespace that syncs periodically without leases
// decides on the node from its counts, and a local one has no store.
func (s *source) checkStoreDown(path string, ns *NamespaceConfig) {
	switch {
	case !s.set(path) || ns.storeDownApplies():
	case ns.Strategy == StrategyLocal:
		s.bad(path, "", "only with strategy memory, redis or postgres (a local namespace has no store)")
	case ns.SyncRate > 0:
		s.bad(path, "", "only with leases: true or sync_rate: 0 (a namespace that syncs periodically without leases decides on the node, whether its store answers or not)")
	}
}

// storeDownApplies reports whether ns asks its store to decide, and so
// has a store_down: a leased namespace, or a synchronous one.
func (ns *NamespaceConfig) storeDownApplies() bool {
	return ns.Strategy != StrategyLocal && (ns.Leases || ns.SyncRate == 0)
}

// checkStoreFields refuses the url and the store options of a namespace
// whose strategy does not take them.
func (s *source) checkStoreFields(path string, ns *NamespaceConfig) {
	if ns.URLFrom == "file" && ns.Strategy != StrategyRedis && ns.Strategy != StrategyPostgres {
		s.report(path+".url", "only with strategy redis or postgres")
	}
	if s.set(path+".redis") && ns.Strategy != StrategyRedis {
		s.report(path+".redis", "only with strategy redis")
	}
	if s.set(path+".postgres") && ns.Strategy != StrategyPostgres {
		s.report(path+".postgres", "only with strategy postgres")
	}
}

// Namespace returns the namespace.Config of ns on store st.
func (ns *NamespaceConfig) Namespace(st strategy.Strategy) namespace.Config {
	nc := namespace.Config{
		Name:         ns.Name,
		Dict:         ns.Dict,
		SyncRate:     time.Duration(ns.SyncRate),
		Strategy:     st,
		DictCapacity: ns.DictCapacity,
		NearLimit:    ns.NearLimit,
		Leases:       ns.Leases,
		Timeout:      time.Duration(ns.Timeout),
	}
	if ns.Clock == ClockNode {
		nc.Clock = namespace.NodeClock
	}
	switch ns.StoreDown {
	case storeDownLocal:
		nc.StoreDown = namespace.StoreDownLocal
	case storeDownDeny:
		nc.StoreDown = namespace.StoreDownDeny
	}
	for _, d := range ns.WindowSizes {
		nc.WindowSizes = append(nc.WindowSizes, time.Duration(d))
	}
	return nc
}

// checkStoreURL checks the URL of a namespace with a store; an error
// names the url field, or the environment variable it came from.
func (s *source) checkStoreURL(path string, ns *NamespaceConfig) {
	if ns.URL == "" {
		env := map[string]string{StrategyRedis: EnvRedisURL, StrategyPostgres: EnvPostgresURL}[ns.Strategy]
		s.report(path, fmt.Sprintf("required with strategy %s (or set %s)", ns.Strategy, env))
		return
	}
	if err := checkStoreURL(ns); err != nil {
		label := path
		if ns.URLFrom != "file" {
			label += " (from " + ns.URLFrom + ")"
		}
		s.reportAs(path, label, strconv.Quote(MaskURL(ns.URL))+": "+MaskSecrets(err.Error(), ns.URL))
	}
}

// checkPolicy checks the policy at path: its own fields, each limit, its
// key, and then, against its namespace, the rules of
// middleware.Policy.Validate.
func (s *source) checkPolicy(path string, p *PolicyConfig, nss map[string]namespace.Config, known, consumer string) {
	if p.Name == "" {
		s.report(path+".name", "required")
	}
	if len(p.Limits) > MaxLimits {
		s.report(path+".limits", fmt.Sprintf("%d limits: at most %d", len(p.Limits), MaxLimits))
	}
	s.checkCost(path+".cost", p.Cost)
	for j, l := range p.Limits {
		s.checkLimit(fmt.Sprintf("%s.limits[%d]", path, j), l)
	}
	if _, err := middleware.ParseKey(p.Key, middleware.KeyOptions{ConsumerHeader: consumer}); err != nil {
		s.report(path+".key", strings.TrimPrefix(err.Error(), "middleware: "))
	}
	s.checkPolicyInNamespace(path, p, nss, known)
}

// checkCost checks a policy's cost, at path: > 0 when given, at most
// MaxNumber.
func (s *source) checkCost(path string, cost float64) {
	switch {
	case s.set(path) && cost == 0:
		s.bad(path, "0", "must be > 0 (leave it out for 1)")
	case cost > MaxNumber:
		s.bad(path, formatNumber(cost), fmt.Sprintf("must be at most %g", float64(MaxNumber)))
	}
}

// checkLimit checks the fields of the limit at path that do not depend on
// its namespace: limit and window given, numbers in range, burst and
// precision only for the types they apply to.
func (s *source) checkLimit(path string, l LimitConfig) {
	switch {
	case !s.set(path + ".limit"):
		s.report(path+".limit", "required: hits allowed per window, > 0")
	case l.Limit > MaxNumber:
		s.bad(path+".limit", formatNumber(l.Limit), fmt.Sprintf("must be at most %g", float64(MaxNumber)))
	}
	if !s.set(path + ".window") {
		s.report(path+".window", "required: a duration like 1s, 1m, 1h")
	}
	s.checkBurst(path, l)
	s.checkPrecision(path, l)
}

// checkPolicyInNamespace checks the policy at path against its namespace
// with middleware.Policy.Validate, unless the namespace has invalid
// fields (the policy's errors would follow from them).
func (s *source) checkPolicyInNamespace(path string, p *PolicyConfig, nss map[string]namespace.Config, known string) {
	ns, found := nss[p.Namespace]
	switch {
	case !found && s.namesUnread("namespaces"): // it may be the one not read
		return
	case !found:
		s.reportValue(path+".namespace", p.Namespace, "no such namespace (namespaces: "+known+")")
		return
	case s.unsure[p.Namespace]:
		return
	}
	for _, err := range joined(p.Policy(nil).Validate(ns)) {
		var pe *middleware.PolicyError
		if errors.As(err, &pe) {
			s.libError(path+"."+pe.Key, pe.Value, pe.Allowed)
		}
	}
}

// checkBurst checks the burst of the limit at path: only for buckets (even
// 0, which means nothing on a window), at most MaxNumber.
func (s *source) checkBurst(path string, l LimitConfig) {
	path += ".burst"
	switch {
	case !s.set(path):
	case !IsBucket(l.Type):
		s.bad(path, "", fmt.Sprintf("only applies to type %s and %s, not %s", TypeTokenBucket, TypeLeakyBucket, l.Type))
	case l.Burst > MaxNumber:
		s.bad(path, formatNumber(l.Burst), fmt.Sprintf("must be at most %g", float64(MaxNumber)))
	}
}

// checkPrecision checks the precision of the limit at path: only for type
// sliding (even 0, which means nothing on another type). What it may be
// (a divisor of the window, one of the namespace's sizes...) is
// middleware.Policy.Validate's.
func (s *source) checkPrecision(path string, l LimitConfig) {
	path += ".precision"
	if s.set(path) && l.Type != TypeSliding {
		s.bad(path, "", fmt.Sprintf("only applies to type %s, not %s", TypeSliding, l.Type))
	}
}

// Policy returns the middleware.Policy of p, selecting keys with key.
func (p *PolicyConfig) Policy(key middleware.KeyFunc) middleware.Policy {
	mp := middleware.Policy{
		Name:      p.Name,
		Namespace: p.Namespace,
		Key:       key,
		Cost:      p.Cost,
		Penalty:   p.Penalty,
	}
	if p.OnStoreDown == "deny" {
		mp.StoreDown = middleware.StoreDownDeny
	}
	for _, l := range p.Limits {
		alg, _ := ParseLimitType(l.Type)
		mp.Limits = append(mp.Limits, ratelimiting.Limit{Limit: l.Limit, Window: time.Duration(l.Window), Algorithm: alg, Burst: l.Burst, Precision: time.Duration(l.Precision)})
	}
	return mp
}

func (s *source) checkGateway(g *GatewayConfig, nodeListen string) {
	if !s.set("gateway.upstream") {
		s.report("gateway.upstream", "required: the URL requests are proxied to")
	} else if u, err := url.Parse(g.Upstream); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		s.reportValue("gateway.upstream", MaskURL(g.Upstream), "must be an http:// or https:// URL with a host")
	} else {
		g.UpstreamURL = u
	}
	if err := checkHostPort(g.Listen); err != nil {
		s.reportValue("gateway.listen", g.Listen, err.Error())
	} else if sameListen(g.Listen, nodeListen) {
		s.reportValue("gateway.listen", g.Listen, "must differ from node.listen")
	}
	for _, f := range []struct {
		name string
		d    Duration
	}{{"gateway.timeout", g.Timeout}, {"gateway.connect_timeout", g.ConnectTimeout}} {
		if f.d <= 0 {
			s.bad(f.name, "", "must be > 0")
		}
	}
	for i, p := range g.TrustedProxies {
		pfx, err := parsePrefix(p)
		if err != nil {
			s.reportValue(fmt.Sprintf("gateway.trusted_proxies[%d]", i), p, "must be an IP address or a CIDR like 10.0.0.0/8")
			continue
		}
		g.Trusted = append(g.Trusted, pfx)
	}
	for i, r := range g.Routes {
		s.checkRoute(fmt.Sprintf("gateway.routes[%d]", i), r)
	}
}

func (s *source) checkRoute(path string, r RouteConfig) {
	switch {
	case r.Path == "":
		s.report(path+".path", "required: a path prefix like /api/")
	case !strings.HasPrefix(r.Path, "/"):
		s.reportValue(path+".path", r.Path, "must start with /")
	}
	for i, m := range r.Methods {
		if m == "" || strings.ToUpper(m) != m || !validToken(m) {
			s.reportValue(fmt.Sprintf("%s.methods[%d]", path, i), m, "must be an upper-case HTTP method like GET")
		}
	}
	if r.Policy == "" {
		s.report(path+".policy", "required: the name of a policy")
	}
}

func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return p, err
		}
		return netip.PrefixFrom(p.Addr().Unmap(), min(p.Bits(), p.Addr().Unmap().BitLen())).Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

func nsNames(c *Config) string {
	names := make([]string, len(c.Namespaces))
	for i, ns := range c.Namespaces {
		names[i] = ns.Name
	}
	return strings.Join(names, ", ")
}

func checkHostPort(s string) error {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("must be host:port, like 127.0.0.1:8080")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q: must be 0 to 65535", port)
	}
	return nil
}

// validToken reports whether s is an HTTP token (RFC 9110 5.6.2).
func validToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("\"(),/:;<=>?@[\\]{}", c) >= 0 {
			return false
		}
	}
	return s != ""
}
