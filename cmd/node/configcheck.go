package main

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratesync/ratesync/middleware"
)

// applyDefaults fills in what the file left out, secrets from the
// environment included.
func (c *Config) applyDefaults(getenv func(string) string) {
	n := &c.Node
	if n.ID == "" {
		n.ID, _ = os.Hostname()
		if n.ID == "" {
			n.ID = "node"
		}
	}
	if n.Listen == "" {
		n.Listen = DefaultListen
	}
	if n.AdminToken == "" {
		if n.AdminToken = getenv(EnvAdminToken); n.AdminToken != "" {
			n.adminTokenFrom = EnvAdminToken
		}
	}
	if n.LogFormat == "" {
		n.LogFormat = "text"
	}
	if n.LogLevel == "" {
		n.LogLevel = "info"
	}
	if n.ShutdownTimeout == 0 {
		n.ShutdownTimeout = Duration(DefaultShutdownTimeout)
	}
	if n.MaxBodyBytes == 0 {
		n.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if n.MaxKeyBytes == 0 {
		n.MaxKeyBytes = DefaultMaxKeyBytes
	}
	if c.Headers.Families == nil {
		c.Headers.Families = []string{"ratelimit", "x-ratelimit"}
	}
	if len(c.Namespaces) == 0 {
		c.Namespaces = []NamespaceConfig{{Name: "default", Strategy: StrategyLocal, SyncRate: -1}}
	}
	for i := range c.Namespaces {
		ns := &c.Namespaces[i]
		if ns.WindowSizes == nil {
			ns.WindowSizes = slices.Clone(DefaultWindowSizes)
		}
		slices.Sort(ns.WindowSizes)
		env := map[string]string{StrategyRedis: EnvRedisURL, StrategyPostgres: EnvPostgresURL}[ns.Strategy]
		if ns.URL == "" && env != "" {
			if ns.URL = getenv(env); ns.URL != "" {
				ns.urlFrom = env
			}
		}
	}
	for i := range c.Policies {
		p := &c.Policies[i]
		if p.Namespace == "" {
			p.Namespace = "default"
		}
		if p.Cost == 0 {
			p.Cost = 1
		}
		if len(p.Key) == 0 {
			p.Key = []string{"ip"}
		}
		if p.MissingKey == "" {
			p.MissingKey = "ip"
		}
		if p.OnStoreDown == "" {
			p.OnStoreDown = "local"
		}
	}
	if g := c.Gateway; g != nil {
		if g.Listen == "" {
			g.Listen = DefaultGatewayListen
		}
		if g.Timeout == 0 {
			g.Timeout = Duration(DefaultGatewayTimeout)
		}
		if g.ConnectTimeout == 0 {
			g.ConnectTimeout = Duration(DefaultConnectTimeout)
		}
	}
}

func (w *walker) failAt(line int, path, msg string) {
	if w.file == "" {
		w.errs = append(w.errs, fmt.Errorf("%s: %s", path, msg))
		return
	}
	w.errs = append(w.errs, fmt.Errorf("%s:%d: %s: %s", w.file, line, path, msg))
}

// validate checks what spans sections: names unique, references resolve,
// limits fit their namespace, store URLs parse.
func (w *walker) validate(c *Config) {
	nsByName := map[string]*NamespaceConfig{}
	for i := range c.Namespaces {
		ns := &c.Namespaces[i]
		path := fmt.Sprintf("namespaces[%d]", i)
		if nsByName[ns.Name] != nil {
			w.failAt(ns.line, path+".name", strconv.Quote(ns.Name)+": another namespace has this name")
		}
		nsByName[ns.Name] = ns
		if ns.Strategy != StrategyRedis && ns.Strategy != StrategyPostgres {
			continue
		}
		env := map[string]string{StrategyRedis: EnvRedisURL, StrategyPostgres: EnvPostgresURL}[ns.Strategy]
		switch {
		case ns.URL == "":
			w.failAt(ns.line, path+".url", fmt.Sprintf("required with strategy %s (or set %s)", ns.Strategy, env))
		default:
			if err := checkStoreURL(ns); err != nil {
				where := path + ".url"
				if ns.urlFrom != "file" {
					where += " (from " + ns.urlFrom + ")"
				}
				w.failAt(ns.line, where, maskURL(ns.URL)+": "+maskSecrets(err.Error(), ns.URL))
			}
		}
	}
	var consumer string
	if c.Gateway != nil {
		consumer = c.Gateway.ConsumerHeader
	}
	policies := map[string]bool{}
	for i := range c.Policies {
		p := &c.Policies[i]
		path := fmt.Sprintf("policies[%d]", i)
		if policies[p.Name] {
			w.failAt(p.line, path+".name", strconv.Quote(p.Name)+": another policy has this name")
		}
		policies[p.Name] = true
		ns := nsByName[p.Namespace]
		if ns == nil {
			w.failAt(p.nsLine, path+".namespace", fmt.Sprintf("%q: no such namespace (namespaces: %s)", p.Namespace, nsNames(c)))
			continue
		}
		for j, l := range p.Limits {
			if l.Window > 0 && !slices.Contains(ns.WindowSizes, l.Window) {
				w.failAt(l.line, fmt.Sprintf("%s.limits[%d].window", path, j), fmt.Sprintf("%q: must be one of the window sizes of namespace %q: %s", middleware.FormatWindow(time.Duration(l.Window)), ns.Name, formatSizes(ns.WindowSizes)))
			}
		}
		if p.OnStoreDown == "deny" && ns.Strategy == StrategyLocal {
			w.failAt(p.line, path+".on_store_down", fmt.Sprintf("deny: namespace %q has no store (strategy local)", ns.Name))
		}
		if slices.Contains(p.Key, "consumer") && consumer == "" {
			w.failAt(p.line, path+".key", "consumer: needs gateway.consumer_header, the header naming the consumer")
		}
	}
	if g := c.Gateway; g != nil {
		if g.Listen == c.Node.Listen {
			w.failAt(0, "gateway.listen", strconv.Quote(g.Listen)+": must differ from node.listen")
		}
		for i, r := range g.Routes {
			if r.Policy != "" && !policies[r.Policy] {
				w.failAt(r.policyLine, fmt.Sprintf("gateway.routes[%d].policy", i), strconv.Quote(r.Policy)+": no such policy")
			}
		}
	}
}

func nsNames(c *Config) string {
	names := make([]string, len(c.Namespaces))
	for i, ns := range c.Namespaces {
		names[i] = ns.Name
	}
	return strings.Join(names, ", ")
}

func formatSizes(sizes []Duration) string {
	s := make([]string, len(sizes))
	for i, d := range sizes {
		s[i] = middleware.FormatWindow(time.Duration(d))
	}
	return strings.Join(s, ", ")
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

// Masked returns c with its secrets masked: what the node logs at start and
// GET /v1/namespaces shows.
func (c Config) Masked() Config {
	if c.Node.AdminToken != "" {
		c.Node.AdminToken = "xxxxx"
	}
	if c.Policies == nil {
		c.Policies = []PolicyConfig{}
	}
	c.Namespaces = slices.Clone(c.Namespaces)
	for i := range c.Namespaces {
		c.Namespaces[i].URL = maskURL(c.Namespaces[i].URL)
	}
	if c.Gateway != nil {
		g := *c.Gateway
		g.Upstream = maskURL(g.Upstream)
		c.Gateway = &g
	}
	return c
}

var dsnPassword = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)

// maskURL hides the password of a store URL: the user info's, a
// password= query parameter's, or a key=value DSN's.
func maskURL(s string) string {
	if s == "" {
		return ""
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" {
		return dsnPassword.ReplaceAllString(s, "${1}xxxxx")
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
	}
	if q := u.Query(); len(q) > 0 {
		changed := false
		for k := range q {
			if lk := strings.ToLower(k); strings.Contains(lk, "pass") || strings.Contains(lk, "secret") || strings.Contains(lk, "token") {
				q.Set(k, "xxxxx")
				changed = true
			}
		}
		if changed {
			u.RawQuery = q.Encode()
		}
	}
	return u.String()
}

// secretsOf returns the secret strings of c: admin token, store passwords.
func secretsOf(c Config) []string {
	var out []string
	add := func(s string) {
		if s != "" && s != "xxxxx" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	add(c.Node.AdminToken)
	for _, ns := range c.Namespaces {
		for _, s := range urlSecrets(ns.URL) {
			add(s)
		}
	}
	if c.Gateway != nil {
		for _, s := range urlSecrets(c.Gateway.Upstream) {
			add(s)
		}
	}
	return out
}

// urlSecrets returns the passwords a store URL carries.
func urlSecrets(s string) []string {
	var out []string
	if u, err := url.Parse(s); err == nil && u.Scheme != "" {
		if u.User != nil {
			if p, ok := u.User.Password(); ok {
				out = append(out, p)
				if e := url.QueryEscape(p); e != p {
					out = append(out, e)
				}
			}
		}
		for k, vs := range u.Query() {
			if lk := strings.ToLower(k); strings.Contains(lk, "pass") || strings.Contains(lk, "secret") || strings.Contains(lk, "token") {
				out = append(out, vs...)
			}
		}
		return out
	}
	for _, m := range dsnPassword.FindAllStringSubmatch(s, -1) {
		out = append(out, strings.Trim(m[2], "'"))
	}
	return out
}

// maskSecrets replaces every secret of the url in s.
func maskSecrets(s, storeURL string) string {
	for _, p := range urlSecrets(storeURL) {
		if p != "" {
			s = strings.ReplaceAll(s, p, "xxxxx")
		}
	}
	return s
}
