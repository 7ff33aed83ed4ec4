package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ratesync/ratesync/middleware"
)

// Environment variables the node reads. Each fills in what the config file
// leaves empty.
const (
	EnvRedisURL    = "RATESYNC_REDIS_URL"    // url of namespaces with strategy redis
	EnvPostgresURL = "RATESYNC_POSTGRES_URL" // url of namespaces with strategy postgres
	EnvAdminToken  = "RATESYNC_ADMIN_TOKEN"  // node.admin_token
)

// Defaults.
const (
	DefaultListen          = "127.0.0.1:8080"
	DefaultGatewayListen   = "127.0.0.1:8000"
	DefaultShutdownTimeout = 15 * time.Second
	DefaultMaxBodyBytes    = 64 << 10
	DefaultMaxKeyBytes     = middleware.DefaultMaxKeyBytes
	DefaultSyncRate        = time.Second
	DefaultGatewayTimeout  = 30 * time.Second
	DefaultConnectTimeout  = 5 * time.Second
	MaxLimits              = 16   // limits per check or policy
	maxNumber              = 1e15 // largest limit or cost: exact in a float64, far above any real quota
)

// DefaultWindowSizes are the window sizes of a namespace that names none.
var DefaultWindowSizes = []Duration{Duration(time.Second), Duration(time.Minute), Duration(time.Hour)}

// Strategies a namespace may use.
const (
	StrategyLocal    = "local"    // no store: this node counts alone
	StrategyMemory   = "memory"   // an in-process store (tests, demos): syncs, but only within this process
	StrategyRedis    = "redis"    // strategy/redis
	StrategyPostgres = "postgres" // strategy/postgres
)

// Duration is a time.Duration that prints as "1m" in the effective
// configuration.
type Duration time.Duration

// MarshalText formats d like the config file does; a negative sync rate
// (a local namespace) is "never".
func (d Duration) MarshalText() ([]byte, error) {
	if d < 0 {
		return []byte("never"), nil
	}
	return middleware.AppendWindow(nil, time.Duration(d)), nil
}

// Config is the node's configuration: flags, config file and environment,
// read in one place (loadConfig). JSON tags name the fields as the file
// does; secrets are masked by Masked.
type Config struct {
	File       string            `json:"file,omitempty"`
	Node       NodeConfig        `json:"node"`
	Headers    HeadersConfig     `json:"headers"`
	Namespaces []NamespaceConfig `json:"namespaces"`
	Policies   []PolicyConfig    `json:"policies"`
	Gateway    *GatewayConfig    `json:"gateway,omitempty"`
}

// NodeConfig is the process's own settings.
type NodeConfig struct {
	ID              string   `json:"id"`               // batch identity in the stores; default: host name
	Listen          string   `json:"listen"`           // the API's address; default 127.0.0.1:8080 (loopback)
	AdminToken      string   `json:"admin_token"`      // bearer token of admin endpoints; default none (loopback only)
	LogFormat       string   `json:"log_format"`       // text (default) or json
	LogLevel        string   `json:"log_level"`        // debug, info (default), warn, error
	ShutdownTimeout Duration `json:"shutdown_timeout"` // drain requests, then final sync, each within it; default 15s
	MaxBodyBytes    int64    `json:"max_body_bytes"`   // request body bound of the API; default 64 KiB
	MaxKeyBytes     int      `json:"max_key_bytes"`    // key length bound; default 1 KiB
	adminTokenFrom  string   // "file", "env" or ""
}

// HeadersConfig shapes the rate-limit headers of /v1/check and the gateway.
type HeadersConfig struct {
	Hide     bool     `json:"hide"`     // no rate-limit headers at all; default false
	Families []string `json:"families"` // ratelimit, x-ratelimit; default both
}

// NamespaceConfig is one namespace of the node's ratelimiting.Instance.
type NamespaceConfig struct {
	Name         string           `json:"name"`
	Strategy     string           `json:"strategy"`           // local (default), memory, redis, postgres
	URL          string           `json:"url,omitempty"`      // store URL (redis, postgres); default from the environment
	SyncRate     Duration         `json:"sync_rate"`          // > 0 periodic, 0 synchronous; local: -1
	WindowSizes  []Duration       `json:"window_sizes"`       // default 1s, 1m, 1h
	Dict         string           `json:"dict,omitempty"`     // shm dict; default "default"
	DictCapacity int              `json:"dict_capacity"`      // counters the dict holds; 0: 1,000,000
	NearLimit    bool             `json:"near_limit"`         // periodic: decide in the store near a limit; default false
	Redis        *RedisOptions    `json:"redis,omitempty"`    // strategy redis only
	Postgres     *PostgresOptions `json:"postgres,omitempty"` // strategy postgres only
	urlFrom      string           // "file" or the environment variable
	line         int
}

// RedisOptions are strategy/redis's Config plus client options.
type RedisOptions struct {
	Cluster          bool     `json:"cluster"`            // url is a Cluster URL (redis://h1:6379?addr=h2:6379)
	Prefix           string   `json:"prefix"`             // key prefix; default "ratesync"
	Shards           int      `json:"shards"`             // hashes per window; default 16; same on every node
	TTLMargin        Duration `json:"ttl_margin"`         // default 5s
	LaneTTL          Duration `json:"lane_ttl"`           // default 24h
	Timeout          Duration `json:"timeout"`            // per call without deadline; default 5s
	ScanThreshold    int      `json:"scan_threshold"`     // default 1000
	FieldsPerCommand int      `json:"fields_per_command"` // default 1000
}

// PostgresOptions are strategy/postgres's Config plus pool options.
type PostgresOptions struct {
	Schema     string   `json:"schema"`      // default "public"
	Table      string   `json:"table"`       // default "ratesync_counters"
	LaneTable  string   `json:"lane_table"`  // default "ratesync_lanes"
	PurgeBatch int      `json:"purge_batch"` // default 1000
	LaneTTL    Duration `json:"lane_ttl"`    // default 24h
	MaxConns   int      `json:"max_conns"`   // pool size; default pgxpool's
}

// PolicyConfig is a named set of limits: /v1/check's policy form and the
// gateway's routes use it.
type PolicyConfig struct {
	Name         string        `json:"name"`
	Namespace    string        `json:"namespace"`     // default "default"
	Limits       []LimitConfig `json:"limits"`        // 1 to 16, all or nothing
	Key          []string      `json:"key"`           // selectors joined with ':'; default [ip] (gateway only)
	MissingKey   string        `json:"missing_key"`   // ip (default, Kong) or empty (Flex)
	Cost         float64       `json:"cost"`          // default 1
	Penalty      bool          `json:"penalty"`       // count denied requests; default false
	OnStoreDown  string        `json:"on_store_down"` // local (default) or deny
	ErrorMessage string        `json:"error_message"` // gateway 429 body message
	line         int
	nsLine       int
}

// LimitConfig is one limit of a policy.
type LimitConfig struct {
	Limit  float64  `json:"limit"`
	Window Duration `json:"window"`
	Type   string   `json:"type"` // sliding (default) or fixed
	line   int
}

// GatewayConfig turns the node into a rate-limiting reverse proxy.
type GatewayConfig struct {
	Listen         string        `json:"listen"`          // default 127.0.0.1:8000
	Upstream       string        `json:"upstream"`        // http(s)://host:port
	Timeout        Duration      `json:"timeout"`         // upstream response headers; default 30s
	ConnectTimeout Duration      `json:"connect_timeout"` // default 5s
	TrustedProxies []string      `json:"trusted_proxies"` // CIDRs whose X-Forwarded-For is believed
	ConsumerHeader string        `json:"consumer_header"` // header of the "consumer" key selector
	Routes         []RouteConfig `json:"routes"`
	trusted        []netip.Prefix
	upstream       *url.URL
}

// RouteConfig maps requests to a policy: the longest matching path prefix
// wins.
type RouteConfig struct {
	Path       string   `json:"path"`    // prefix, matched segment by segment
	Methods    []string `json:"methods"` // default: any
	Policy     string   `json:"policy"`
	line       int
	policyLine int
}

// flags are the command line.
type flags struct {
	config    string
	listen    string
	gwListen  string
	logFormat string
	logLevel  string
}

// errHelp is returned by loadConfig for -h: run prints the usage and
// succeeds.
var errHelp = flag.ErrHelp

// loadConfig reads the flags, the config file they name and the
// environment: the one place configuration comes from. Flags override the
// file; environment variables fill in secrets the file leaves empty.
func loadConfig(args []string, getenv func(string) string, usage io.Writer) (Config, error) {
	fs := flag.NewFlagSet("ratesync-node", flag.ContinueOnError)
	fs.SetOutput(usage)
	var f flags
	fs.StringVar(&f.config, "config", "", "YAML config `file` (default: a local-only namespace \"default\" with windows 1s, 1m, 1h)")
	fs.StringVar(&f.listen, "listen", "", "API listen `address` (default "+DefaultListen+")")
	fs.StringVar(&f.gwListen, "gateway-listen", "", "gateway listen `address` (overrides gateway.listen)")
	fs.StringVar(&f.logFormat, "log-format", "", "log format: text or json (default text)")
	fs.StringVar(&f.logLevel, "log-level", "", "log level: debug, info, warn, error (default info)")
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected arguments: %q (flags: -config, -listen, -gateway-listen, -log-format, -log-level)", fs.Args())
	}
	var (
		cfg Config
		err error
	)
	if f.config != "" {
		data, rerr := os.ReadFile(f.config)
		if rerr != nil {
			return Config{}, fmt.Errorf("config: %w", rerr)
		}
		cfg, err = parseConfig(f.config, data, getenv)
	} else {
		cfg, err = parseConfig("", nil, getenv)
	}
	if err != nil {
		return Config{}, err
	}
	var errs []error
	if f.listen != "" {
		if err := checkHostPort(f.listen); err != nil {
			errs = append(errs, fmt.Errorf("-listen %q: %v", f.listen, err))
		}
		cfg.Node.Listen = f.listen
	}
	if f.gwListen != "" {
		switch {
		case cfg.Gateway == nil:
			errs = append(errs, fmt.Errorf("-gateway-listen %q: the config has no gateway section", f.gwListen))
		case checkHostPort(f.gwListen) != nil:
			errs = append(errs, fmt.Errorf("-gateway-listen %q: %v", f.gwListen, checkHostPort(f.gwListen)))
		default:
			cfg.Gateway.Listen = f.gwListen
		}
	}
	if f.logFormat != "" {
		if !slices.Contains([]string{"text", "json"}, f.logFormat) {
			errs = append(errs, fmt.Errorf("-log-format %q: must be text or json", f.logFormat))
		}
		cfg.Node.LogFormat = f.logFormat
	}
	if f.logLevel != "" {
		if !slices.Contains(logLevels, f.logLevel) {
			errs = append(errs, fmt.Errorf("-log-level %q: must be one of %s", f.logLevel, strings.Join(logLevels, ", ")))
		}
		cfg.Node.LogLevel = f.logLevel
	}
	return cfg, errors.Join(errs...)
}

var logLevels = []string{"debug", "info", "warn", "error"}

// parseConfig decodes and validates a config file (data nil: no file) and
// applies defaults and the environment. Errors name file:line: field.
func parseConfig(file string, data []byte, getenv func(string) string) (Config, error) {
	cfg := Config{File: file}
	w := &walker{file: file}
	if len(data) > 0 {
		var doc yaml.Node
		if err := yaml.Unmarshal(data, &doc); err != nil {
			return Config{}, fmt.Errorf("%s: %w", file, err)
		}
		if len(doc.Content) > 0 {
			w.config(doc.Content[0], &cfg)
		}
		if len(w.errs) > 0 {
			return Config{}, errors.Join(w.errs...)
		}
	}
	cfg.applyDefaults(getenv)
	w.validate(&cfg)
	return cfg, errors.Join(w.errs...)
}

// config decodes the document's top level.
func (w *walker) config(n *yaml.Node, c *Config) {
	if isNull(n) {
		return
	}
	w.mapping(n, "",
		field{"node", func(v *yaml.Node, p string) { w.node(v, p, &c.Node) }},
		field{"headers", func(v *yaml.Node, p string) {
			w.mapping(v, p,
				field{"hide", func(v *yaml.Node, p string) { c.Headers.Hide = w.boolean(v, p) }},
				field{"families", func(v *yaml.Node, p string) {
					c.Headers.Families = []string{}
					w.sequence(v, p, func(_ int, item *yaml.Node, p string) {
						if f := w.oneOf(item, p, "ratelimit", "x-ratelimit"); f != "" {
							c.Headers.Families = append(c.Headers.Families, f)
						}
					})
				}},
			)
		}},
		field{"namespaces", func(v *yaml.Node, p string) {
			w.sequence(v, p, func(_ int, item *yaml.Node, p string) {
				c.Namespaces = append(c.Namespaces, w.namespace(item, p))
			})
		}},
		field{"policies", func(v *yaml.Node, p string) {
			w.sequence(v, p, func(_ int, item *yaml.Node, p string) {
				c.Policies = append(c.Policies, w.policy(item, p))
			})
		}},
		field{"gateway", func(v *yaml.Node, p string) {
			if !isNull(v) {
				c.Gateway = w.gateway(v, p)
			}
		}},
	)
}

func (w *walker) node(n *yaml.Node, path string, c *NodeConfig) {
	w.mapping(n, path,
		field{"id", func(v *yaml.Node, p string) { c.ID = w.str(v, p) }},
		field{"listen", func(v *yaml.Node, p string) {
			if c.Listen = w.str(v, p); c.Listen != "" {
				if err := checkHostPort(c.Listen); err != nil {
					w.failValue(v, p, err.Error())
				}
			}
		}},
		field{"admin_token", func(v *yaml.Node, p string) {
			if c.AdminToken = w.str(v, p); c.AdminToken != "" {
				c.adminTokenFrom = "file"
			}
		}},
		field{"log_format", func(v *yaml.Node, p string) { c.LogFormat = w.oneOf(v, p, "text", "json") }},
		field{"log_level", func(v *yaml.Node, p string) { c.LogLevel = w.oneOf(v, p, logLevels...) }},
		field{"shutdown_timeout", func(v *yaml.Node, p string) {
			if d, ok := w.duration(v, p); ok && d <= 0 {
				w.failValue(v, p, "must be > 0")
			} else {
				c.ShutdownTimeout = d
			}
		}},
		field{"max_body_bytes", func(v *yaml.Node, p string) { c.MaxBodyBytes = w.integer(v, p, 256) }},
		field{"max_key_bytes", func(v *yaml.Node, p string) { c.MaxKeyBytes = int(w.integer(v, p, 1)) }},
	)
}

func (w *walker) namespace(n *yaml.Node, path string) NamespaceConfig {
	c := NamespaceConfig{line: n.Line, SyncRate: -1}
	syncSet := false
	var syncNode, nearNode *yaml.Node
	w.mapping(n, path,
		field{"name", func(v *yaml.Node, p string) {
			c.Name = w.str(v, p)
			if strings.Contains(c.Name, "|") {
				w.failValue(v, p, "must not contain '|'")
			}
		}},
		field{"strategy", func(v *yaml.Node, p string) {
			c.Strategy = w.oneOf(v, p, StrategyLocal, StrategyMemory, StrategyRedis, StrategyPostgres)
		}},
		field{"url", func(v *yaml.Node, p string) {
			if c.URL = w.str(v, p); c.URL != "" {
				c.urlFrom = "file"
			}
		}},
		field{"sync_rate", func(v *yaml.Node, p string) {
			if d, ok := w.duration(v, p); ok {
				c.SyncRate, syncSet, syncNode = d, true, v
			}
		}},
		field{"window_sizes", func(v *yaml.Node, p string) {
			c.WindowSizes = []Duration{}
			w.sequence(v, p, func(_ int, item *yaml.Node, p string) {
				d, ok := w.duration(item, p)
				switch {
				case !ok:
				case d <= 0 || time.Duration(d)%time.Millisecond != 0:
					w.failValue(item, p, "must be > 0 and a whole number of milliseconds")
				case slices.Contains(c.WindowSizes, d):
					w.failValue(item, p, "listed twice")
				default:
					c.WindowSizes = append(c.WindowSizes, d)
				}
			})
			if len(c.WindowSizes) == 0 {
				w.fail(v, p, "at least one window size is required")
			}
		}},
		field{"dict", func(v *yaml.Node, p string) {
			if c.Dict = w.str(v, p); strings.Contains(c.Dict, "|") {
				w.failValue(v, p, "must not contain '|'")
			}
		}},
		field{"dict_capacity", func(v *yaml.Node, p string) { c.DictCapacity = int(w.integer(v, p, 0)) }},
		field{"near_limit", func(v *yaml.Node, p string) { c.NearLimit, nearNode = w.boolean(v, p), v }},
		field{"redis", func(v *yaml.Node, p string) { c.Redis = w.redisOptions(v, p) }},
		field{"postgres", func(v *yaml.Node, p string) { c.Postgres = w.postgresOptions(v, p) }},
	)
	if c.Name == "" {
		w.fail(n, path+".name", "required")
	}
	if c.Strategy == "" {
		c.Strategy = StrategyLocal
	}
	switch {
	case c.Strategy == StrategyLocal && syncSet:
		w.failValue(syncNode, path+".sync_rate", "only with strategy memory, redis or postgres (a local namespace never syncs)")
	case c.Strategy != StrategyLocal && !syncSet:
		c.SyncRate = Duration(DefaultSyncRate)
	case c.Strategy != StrategyLocal && c.SyncRate < 0:
		w.failValue(syncNode, path+".sync_rate", "must be > 0 (periodic) or 0 (synchronous); use strategy local for no sync")
	case c.Strategy != StrategyLocal && c.SyncRate > 0 && c.SyncRate < Duration(time.Millisecond):
		w.failValue(syncNode, path+".sync_rate", "must be at least 1ms when periodic")
	}
	if c.NearLimit && (c.Strategy == StrategyLocal || c.SyncRate <= 0) {
		w.failValue(nearNode, path+".near_limit", "needs a store and a periodic sync_rate (> 0): synchronous namespaces always decide in the store, local ones never")
	}
	if c.URL != "" && c.Strategy != StrategyRedis && c.Strategy != StrategyPostgres {
		w.fail(n, path+".url", "only with strategy redis or postgres")
	}
	if c.Redis != nil && c.Strategy != StrategyRedis {
		w.fail(n, path+".redis", "only with strategy redis")
	}
	if c.Postgres != nil && c.Strategy != StrategyPostgres {
		w.fail(n, path+".postgres", "only with strategy postgres")
	}
	return c
}

func (w *walker) redisOptions(n *yaml.Node, path string) *RedisOptions {
	o := &RedisOptions{}
	w.mapping(n, path,
		field{"cluster", func(v *yaml.Node, p string) { o.Cluster = w.boolean(v, p) }},
		field{"prefix", func(v *yaml.Node, p string) {
			if o.Prefix = w.str(v, p); strings.ContainsAny(o.Prefix, "{}") {
				w.failValue(v, p, "must not contain '{' or '}'")
			}
		}},
		field{"shards", func(v *yaml.Node, p string) { o.Shards = int(w.integer(v, p, 1)) }},
		field{"ttl_margin", func(v *yaml.Node, p string) { o.TTLMargin = w.positive(v, p) }},
		field{"lane_ttl", func(v *yaml.Node, p string) { o.LaneTTL = w.positive(v, p) }},
		field{"timeout", func(v *yaml.Node, p string) { o.Timeout = w.positive(v, p) }},
		field{"scan_threshold", func(v *yaml.Node, p string) { o.ScanThreshold = int(w.integer(v, p, 1)) }},
		field{"fields_per_command", func(v *yaml.Node, p string) { o.FieldsPerCommand = int(w.integer(v, p, 1)) }},
	)
	return o
}

func (w *walker) postgresOptions(n *yaml.Node, path string) *PostgresOptions {
	o := &PostgresOptions{}
	ident := func(v *yaml.Node, p string) string {
		s := w.str(v, p)
		if s != "" && !isSQLIdent(s) {
			w.failValue(v, p, "must be a lowercase SQL identifier: [a-z_][a-z0-9_]*")
		}
		return s
	}
	w.mapping(n, path,
		field{"schema", func(v *yaml.Node, p string) { o.Schema = ident(v, p) }},
		field{"table", func(v *yaml.Node, p string) { o.Table = ident(v, p) }},
		field{"lane_table", func(v *yaml.Node, p string) { o.LaneTable = ident(v, p) }},
		field{"purge_batch", func(v *yaml.Node, p string) { o.PurgeBatch = int(w.integer(v, p, 1)) }},
		field{"lane_ttl", func(v *yaml.Node, p string) { o.LaneTTL = w.positive(v, p) }},
		field{"max_conns", func(v *yaml.Node, p string) { o.MaxConns = int(w.integer(v, p, 1)) }},
	)
	return o
}

func isSQLIdent(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return s != "" && len(s) <= 63
}

// positive returns a duration > 0.
func (w *walker) positive(n *yaml.Node, path string) Duration {
	d, ok := w.duration(n, path)
	if ok && d <= 0 {
		w.failValue(n, path, "must be > 0")
		return 0
	}
	return d
}

func (w *walker) policy(n *yaml.Node, path string) PolicyConfig {
	c := PolicyConfig{line: n.Line, nsLine: n.Line}
	costSet := false
	w.mapping(n, path,
		field{"name", func(v *yaml.Node, p string) { c.Name = w.str(v, p) }},
		field{"namespace", func(v *yaml.Node, p string) { c.Namespace, c.nsLine = w.str(v, p), v.Line }},
		field{"limits", func(v *yaml.Node, p string) {
			w.sequence(v, p, func(_ int, item *yaml.Node, p string) {
				c.Limits = append(c.Limits, w.limit(item, p))
			})
			switch {
			case len(c.Limits) == 0:
				w.fail(v, p, "at least one limit is required")
			case len(c.Limits) > MaxLimits:
				w.fail(v, p, fmt.Sprintf("%d limits: at most %d", len(c.Limits), MaxLimits))
			}
		}},
		field{"key", func(v *yaml.Node, p string) {
			c.Key = w.strs(v, p)
			for _, s := range c.Key {
				// Selector syntax only; consumer needs the gateway's
				// consumer_header, checked in validate.
				if _, err := middleware.ParseKey([]string{s}, middleware.KeyOptions{ConsumerHeader: "X"}); err != nil {
					w.fail(v, p, strings.TrimPrefix(err.Error(), "middleware: "))
				}
			}
		}},
		field{"missing_key", func(v *yaml.Node, p string) { c.MissingKey = w.oneOf(v, p, "ip", "empty") }},
		field{"cost", func(v *yaml.Node, p string) { c.Cost, costSet = w.number(v, p), true }},
		field{"penalty", func(v *yaml.Node, p string) { c.Penalty = w.boolean(v, p) }},
		field{"on_store_down", func(v *yaml.Node, p string) { c.OnStoreDown = w.oneOf(v, p, "local", "deny") }},
		field{"error_message", func(v *yaml.Node, p string) { c.ErrorMessage = w.str(v, p) }},
	)
	if c.Name == "" {
		w.fail(n, path+".name", "required")
	}
	if c.Limits == nil {
		w.fail(n, path+".limits", "required: at least one {limit, window}")
	}
	if costSet {
		for i, l := range c.Limits {
			if l.Limit > 0 && c.Cost > l.Limit {
				w.fail(n, path+".cost", fmt.Sprintf("%v: must be at most limits[%d].limit (%v): a larger cost can never pass", c.Cost, i, l.Limit))
				break
			}
		}
	}
	return c
}

func (w *walker) limit(n *yaml.Node, path string) LimitConfig {
	c := LimitConfig{line: n.Line}
	limitSet, windowSet := false, false
	w.mapping(n, path,
		field{"limit", func(v *yaml.Node, p string) { c.Limit, limitSet = w.number(v, p), true }},
		field{"window", func(v *yaml.Node, p string) {
			d, ok := w.duration(v, p)
			windowSet, c.line = true, v.Line
			if ok && (d <= 0 || time.Duration(d)%time.Millisecond != 0) {
				w.failValue(v, p, "must be > 0 and a whole number of milliseconds")
				return
			}
			c.Window = d
		}},
		field{"type", func(v *yaml.Node, p string) { c.Type = w.oneOf(v, p, "sliding", "fixed") }},
	)
	if n.Kind == yaml.MappingNode {
		if !limitSet {
			w.fail(n, path+".limit", "required: hits allowed per window, > 0")
		}
		if !windowSet {
			w.fail(n, path+".window", "required: a duration like 1s, 1m, 1h")
		}
	}
	if c.Type == "" {
		c.Type = "sliding"
	}
	return c
}

func (w *walker) gateway(n *yaml.Node, path string) *GatewayConfig {
	c := &GatewayConfig{}
	var upstreamNode *yaml.Node
	w.mapping(n, path,
		field{"listen", func(v *yaml.Node, p string) {
			if c.Listen = w.str(v, p); c.Listen != "" {
				if err := checkHostPort(c.Listen); err != nil {
					w.failValue(v, p, err.Error())
				}
			}
		}},
		field{"upstream", func(v *yaml.Node, p string) {
			c.Upstream, upstreamNode = w.str(v, p), v
			u, err := url.Parse(c.Upstream)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				w.failValue(v, p, "must be an http:// or https:// URL with a host")
				return
			}
			c.upstream = u
		}},
		field{"timeout", func(v *yaml.Node, p string) { c.Timeout = w.positive(v, p) }},
		field{"connect_timeout", func(v *yaml.Node, p string) { c.ConnectTimeout = w.positive(v, p) }},
		field{"trusted_proxies", func(v *yaml.Node, p string) {
			w.sequence(v, p, func(_ int, item *yaml.Node, p string) {
				s := w.str(item, p)
				pfx, err := parsePrefix(s)
				if err != nil {
					w.failValue(item, p, "must be an IP address or a CIDR like 10.0.0.0/8")
					return
				}
				c.TrustedProxies = append(c.TrustedProxies, s)
				c.trusted = append(c.trusted, pfx)
			})
		}},
		field{"consumer_header", func(v *yaml.Node, p string) { c.ConsumerHeader = w.str(v, p) }},
		field{"routes", func(v *yaml.Node, p string) {
			w.sequence(v, p, func(_ int, item *yaml.Node, p string) {
				c.Routes = append(c.Routes, w.route(item, p))
			})
		}},
	)
	if upstreamNode == nil {
		w.fail(n, path+".upstream", "required: the URL requests are proxied to")
	}
	return c
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

func (w *walker) route(n *yaml.Node, path string) RouteConfig {
	c := RouteConfig{line: n.Line, policyLine: n.Line}
	w.mapping(n, path,
		field{"path", func(v *yaml.Node, p string) {
			c.Path = w.str(v, p)
			if !strings.HasPrefix(c.Path, "/") {
				w.failValue(v, p, "must start with /")
			}
		}},
		field{"methods", func(v *yaml.Node, p string) {
			c.Methods = w.strs(v, p)
			for i, m := range c.Methods {
				if m == "" || strings.ToUpper(m) != m || !validToken(m) {
					w.fail(v, fmt.Sprintf("%s[%d]", p, i), strconv.Quote(m)+": must be an upper-case HTTP method like GET")
				}
			}
		}},
		field{"policy", func(v *yaml.Node, p string) { c.Policy, c.policyLine = w.str(v, p), v.Line }},
	)
	if c.Path == "" {
		w.fail(n, path+".path", "required: a path prefix like /api/")
	}
	if c.Policy == "" {
		w.fail(n, path+".policy", "required: the name of a policy")
	}
	return c
}
