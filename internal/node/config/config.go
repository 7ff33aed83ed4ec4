package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ratesync/ratesync/middleware"
	"github.com/ratesync/ratesync/ratelimiting"
	"github.com/ratesync/ratesync/rls"
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
	defaultGatewayListen   = "127.0.0.1:8000"
	defaultShutdownTimeout = 15 * time.Second
	DefaultMaxBodyBytes    = 64 << 10
	DefaultMaxKeyBytes     = middleware.DefaultMaxKeyBytes
	defaultGCHeapFloor     = 64 << 20
	maxGCHeapFloor         = 1 << 30
	defaultSyncRate        = time.Second
	defaultCallTimeout     = time.Second // a namespace's timeout, as the library's default
	defaultGatewayTimeout  = 30 * time.Second
	defaultConnectTimeout  = 5 * time.Second
	MaxLimits              = 16   // limits per check or policy
	MaxNumber              = 1e15 // largest limit or cost: exact in a float64, far above any real quota
)

// defaultWindowSizes are the window sizes of a namespace that names none.
var defaultWindowSizes = []Duration{Duration(time.Second), Duration(time.Minute), Duration(time.Hour)}

// Clocks a namespace may count its windows in (clock).
const (
	ClockStore = "store" // the node's clock plus its measured offset from the store's: every node counts in the same windows
	ClockNode  = "node"  // the node's own clock
)

// What a leased or synchronous namespace decides with while its store does
// not answer (store_down), as namespace.StoreDown spells them.
const (
	storeDownShare = "share" // each limit divided by the nodes seen using the store
	storeDownLocal = "local" // the whole limit on each node
	storeDownDeny  = "deny"  // refuse what needs the store
)

// Strategies a namespace may use.
const (
	StrategyLocal    = "local"    // no store: this node counts alone
	StrategyMemory   = "memory"   // an in-process store (tests, demos): syncs, but only within this process
	StrategyRedis    = "redis"    // strategy/redis
	StrategyPostgres = "postgres" // strategy/postgres
)

// Duration is a time.Duration written as a Go duration in the config file
// ("500ms", "1s", "1m", "1h") and in the effective configuration.
type Duration time.Duration

// MarshalText formats d like the config file does; a negative sync rate
// (a local namespace) is "never".
func (d Duration) MarshalText() ([]byte, error) {
	if d < 0 {
		return []byte("never"), nil
	}
	return middleware.AppendWindow(nil, time.Duration(d)), nil
}

// UnmarshalYAML parses a Go duration. Its error is a *yaml.TypeError, so
// that the decoder goes on with the other fields.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{errDuration.Error()}}
	}
	v, err := parseDuration(n.Value)
	if err != nil {
		return &yaml.TypeError{Errors: []string{err.Error()}}
	}
	*d = Duration(v)
	return nil
}

var (
	errDuration = errors.New("must be a duration like 1s, 1m, 1h")
	// durationSyntax is the form of a Go duration, whatever its size.
	durationSyntax = regexp.MustCompile(`^[-+]?((\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h))+$`)
)

// parseDuration parses a Go duration; a duration too large for one names
// the largest.
func parseDuration(s string) (time.Duration, error) {
	v, err := time.ParseDuration(s)
	switch {
	case err == nil:
		return v, nil
	case !durationSyntax.MatchString(s):
		return 0, errDuration
	case strings.HasPrefix(s, "-"):
		return 0, fmt.Errorf("must be at least %s", time.Duration(math.MinInt64))
	}
	return 0, fmt.Errorf("must be at most %s (about 292 years)", time.Duration(math.MaxInt64))
}

// stringList is a list of strings that the file may also give as a single
// string: key: ip is key: [ip].
type stringList []string

// UnmarshalYAML accepts a string or a list of strings.
func (l *stringList) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*l = stringList{n.Value}
		return nil
	}
	return n.Decode((*[]string)(l))
}

// Config is the node's configuration: flags, config file and environment,
// read in one place (Load). The yaml tags are the file's fields, the
// json tags the effective configuration's (the same names); oneof lists
// the values a field allows. Secrets are masked by Masked.
type Config struct {
	File          string            `json:"file,omitempty" yaml:"-"`
	RequireStores bool              `json:"require_stores" yaml:"require_stores"` // exit at start unless every namespace's store answers; default false
	Node          NodeConfig        `json:"node" yaml:"node"`
	Headers       HeadersConfig     `json:"headers" yaml:"headers"`
	Namespaces    []NamespaceConfig `json:"namespaces" yaml:"namespaces"`
	Policies      []PolicyConfig    `json:"policies" yaml:"policies"`
	Gateway       *GatewayConfig    `json:"gateway,omitempty" yaml:"gateway"`
	RLS           *RLSConfig        `json:"rls,omitempty" yaml:"rls"`
	args          []string          // the flags Load read, for Reload
	loaded        bool              // read by Load
	getenv        func(string) string
}

// NodeConfig is the process's own settings.
type NodeConfig struct {
	ID              string   `json:"id" yaml:"id"`                                             // batch identity in the stores; default: host name
	Listen          string   `json:"listen" yaml:"listen"`                                     // the API's address; default 127.0.0.1:8080 (loopback)
	AdminToken      string   `json:"admin_token" yaml:"admin_token"`                           // bearer token of admin endpoints; default none (loopback only)
	LogFormat       string   `json:"log_format" yaml:"log_format" oneof:"text json"`           // text (default) or json
	LogLevel        string   `json:"log_level" yaml:"log_level" oneof:"debug info warn error"` // debug, info (default), warn, error
	ShutdownTimeout Duration `json:"shutdown_timeout" yaml:"shutdown_timeout"`                 // drain requests, then final sync, each within it; default 15s
	MaxBodyBytes    int64    `json:"max_body_bytes" yaml:"max_body_bytes"`                     // request body bound of the API; default 64 KiB
	MaxKeyBytes     int      `json:"max_key_bytes" yaml:"max_key_bytes"`                       // key length bound; default 1 KiB
	GCHeapFloor     int64    `json:"gc_heap_floor" yaml:"gc_heap_floor"`                       // the garbage collector's smallest heap goal, bytes (internal/gcfloor); 0: GOGC alone; default 64 MiB
	AdminTokenFrom  string   `json:"-" yaml:"-"`                                               // set by Load: where the admin token came from ("file", the environment variable, or "")
	PprofListen     string   `json:"-" yaml:"-"`                                               // set by Load from -pprof-listen: Go's profiler's address; default none
}

// HeadersConfig shapes the rate-limit headers of /v1/check and the gateway.
type HeadersConfig struct {
	Hide     bool     `json:"hide" yaml:"hide"`                                       // no rate-limit headers at all; default false
	Families []string `json:"families" yaml:"families" oneof:"ratelimit x-ratelimit"` // default both
}

// NamespaceConfig is one namespace of the node's ratelimiting.Instance.
type NamespaceConfig struct {
	Name         string           `json:"name" yaml:"name"`
	Strategy     string           `json:"strategy" yaml:"strategy" oneof:"local memory redis postgres"`    // local (default), memory, redis, postgres
	URL          string           `json:"url,omitempty" yaml:"url"`                                        // store URL (redis, postgres); default from the environment
	SyncRate     Duration         `json:"sync_rate" yaml:"sync_rate"`                                      // > 0 periodic, 0 synchronous; local: -1
	WindowSizes  []Duration       `json:"window_sizes" yaml:"window_sizes"`                                // default 1s, 1m, 1h
	Dict         string           `json:"dict" yaml:"dict"`                                                // shm dict; default "default"
	DictCapacity int              `json:"dict_capacity" yaml:"dict_capacity"`                              // counters the dict holds; default 1,000,000
	NearLimit    bool             `json:"near_limit" yaml:"near_limit"`                                    // periodic: decide in the store near a limit; default false
	Leases       bool             `json:"leases" yaml:"leases"`                                            // periodic: decide on the node from quota the store granted, exact across nodes; default false
	StoreDown    string           `json:"store_down,omitempty" yaml:"store_down" oneof:"share local deny"` // leased or synchronous, while the store does not answer: share (default), local, deny
	Timeout      Duration         `json:"timeout,omitempty" yaml:"timeout"`                                // call timeout: a request's longest wait for the store; default 1s with a store
	Clock        string           `json:"clock" yaml:"clock" oneof:"store node"`                           // windows in the store's time (store, default with a store) or the node's (node; local namespaces)
	Redis        *RedisOptions    `json:"redis,omitempty" yaml:"redis"`                                    // strategy redis only
	Postgres     *PostgresOptions `json:"postgres,omitempty" yaml:"postgres"`                              // strategy postgres only
	URLFrom      string           `json:"-" yaml:"-"`                                                      // set by Load: where the URL came from ("file" or the environment variable)
}

// RedisOptions are strategy/redis's Config plus client options.
type RedisOptions struct {
	Cluster          bool     `json:"cluster" yaml:"cluster"`                       // url is a Cluster URL (redis://h1:6379?addr=h2:6379)
	Prefix           string   `json:"prefix" yaml:"prefix"`                         // key prefix; default "ratesync"
	Shards           int      `json:"shards" yaml:"shards"`                         // hashes per window; default 16; same on every node
	TTLMargin        Duration `json:"ttl_margin" yaml:"ttl_margin"`                 // default 5s
	LaneTTL          Duration `json:"lane_ttl" yaml:"lane_ttl"`                     // default 24h
	Timeout          Duration `json:"timeout" yaml:"timeout"`                       // per call without deadline; default 5s
	ScanThreshold    int      `json:"scan_threshold" yaml:"scan_threshold"`         // default 1000
	FieldsPerCommand int      `json:"fields_per_command" yaml:"fields_per_command"` // default 1000
}

// PostgresOptions are strategy/postgres's Config plus pool options.
type PostgresOptions struct {
	Schema     string   `json:"schema" yaml:"schema"`           // default "public"
	Table      string   `json:"table" yaml:"table"`             // default "ratesync_counters"
	LaneTable  string   `json:"lane_table" yaml:"lane_table"`   // default "ratesync_lanes"
	PurgeBatch int      `json:"purge_batch" yaml:"purge_batch"` // default 1000
	LaneTTL    Duration `json:"lane_ttl" yaml:"lane_ttl"`       // default 24h
	MaxConns   int      `json:"max_conns" yaml:"max_conns"`     // pool size; default pgxpool's (or the URL's pool_max_conns)
}

// PolicyConfig is a named set of limits: /v1/check's policy form and the
// gateway's routes use it.
type PolicyConfig struct {
	Name         string        `json:"name" yaml:"name"`
	Namespace    string        `json:"namespace" yaml:"namespace"`                            // default "default"
	Limits       []LimitConfig `json:"limits" yaml:"limits"`                                  // 1 to 16, all or nothing
	Key          stringList    `json:"key" yaml:"key"`                                        // selectors joined with ':'; default [ip] (gateway only)
	MissingKey   string        `json:"missing_key" yaml:"missing_key" oneof:"ip empty"`       // ip (default, Kong) or empty (Flex)
	Cost         float64       `json:"cost" yaml:"cost"`                                      // default 1
	Penalty      bool          `json:"penalty" yaml:"penalty"`                                // count denied requests; default false
	OnStoreDown  string        `json:"on_store_down" yaml:"on_store_down" oneof:"local deny"` // local (default) or deny
	ErrorMessage string        `json:"error_message" yaml:"error_message"`                    // gateway 429 body message
}

// LimitConfig is one limit of a policy.
type LimitConfig struct {
	Limit     float64  `json:"limit" yaml:"limit"`                                                                                                // hits per window; for a bucket, its rate
	Window    Duration `json:"window" yaml:"window"`                                                                                              // sliding, fixed: one of the namespace's sizes; others, or with precision: any
	Type      string   `json:"type" yaml:"type" oneof:"sliding fixed anchored sliding_log token_bucket leaky_bucket sliding_window fixed_window"` // sliding (default), fixed, anchored, sliding_log, token_bucket, leaky_bucket
	Burst     float64  `json:"burst,omitempty" yaml:"burst"`                                                                                      // a bucket's capacity; default the limit; buckets only
	Precision Duration `json:"precision,omitempty" yaml:"precision"`                                                                              // sliding only: the sub-window size, one of the namespace's sizes; default the window
}

// Limit types, as the config file and /v1/check spell them; sliding_window
// and fixed_window are read as sliding and fixed.
const (
	TypeSliding     = "sliding"
	typeFixed       = "fixed"
	typeAnchored    = "anchored"
	typeSlidingLog  = "sliding_log"
	TypeTokenBucket = "token_bucket"
	TypeLeakyBucket = "leaky_bucket"
	LimitTypesText  = "sliding, fixed, anchored, sliding_log, token_bucket, leaky_bucket, sliding_window, fixed_window"
)

// ParseLimitType returns the algorithm of a limit's type; "" is sliding.
func ParseLimitType(s string) (ratelimiting.Algorithm, bool) {
	switch s {
	case "", TypeSliding, "sliding_window":
		return ratelimiting.SlidingWindow, true
	case typeFixed, "fixed_window":
		return ratelimiting.FixedWindow, true
	case typeAnchored:
		return ratelimiting.AnchoredWindow, true
	case typeSlidingLog:
		return ratelimiting.SlidingLog, true
	case TypeTokenBucket:
		return ratelimiting.TokenBucket, true
	case TypeLeakyBucket:
		return ratelimiting.LeakyBucket, true
	}
	return 0, false
}

// LimitType returns the type of l as the node spells it.
func LimitType(l ratelimiting.Limit) string {
	switch {
	case l.Algorithm == ratelimiting.TokenBucket:
		return TypeTokenBucket
	case l.Algorithm == ratelimiting.LeakyBucket:
		return TypeLeakyBucket
	case l.Algorithm == ratelimiting.AnchoredWindow:
		return typeAnchored
	case l.Algorithm == ratelimiting.SlidingLog:
		return typeSlidingLog
	case l.Fixed || l.Algorithm == ratelimiting.FixedWindow:
		return typeFixed
	}
	return TypeSliding
}

// IsBucket reports whether a limit's type is a bucket.
func IsBucket(typ string) bool { return typ == TypeTokenBucket || typ == TypeLeakyBucket }

// GatewayConfig turns the node into a rate-limiting reverse proxy.
type GatewayConfig struct {
	Listen         string         `json:"listen" yaml:"listen"`                   // default 127.0.0.1:8000
	Upstream       string         `json:"upstream" yaml:"upstream"`               // http(s)://host:port
	Timeout        Duration       `json:"timeout" yaml:"timeout"`                 // upstream response headers; default 30s
	ConnectTimeout Duration       `json:"connect_timeout" yaml:"connect_timeout"` // default 5s
	TrustedProxies []string       `json:"trusted_proxies" yaml:"trusted_proxies"` // CIDRs whose X-Forwarded-For is believed
	ConsumerHeader string         `json:"consumer_header" yaml:"consumer_header"` // header of the "consumer" key selector
	Routes         []RouteConfig  `json:"routes" yaml:"routes"`
	Trusted        []netip.Prefix `json:"-" yaml:"-"` // set by Load: TrustedProxies, parsed
	UpstreamURL    *url.URL       `json:"-" yaml:"-"` // set by Load: Upstream, parsed
}

// RLSConfig serves Envoy's rate limit service (gRPC ShouldRateLimit, and
// POST /json on the API) from envoyproxy/ratelimit's configuration files.
// Its counts live in a namespace of their own, named RLSNamespace, with a
// window size per unit; strategy, url, sync_rate, leases, store_down and
// the store options are a namespace's.
type RLSConfig struct {
	Listen          string           `json:"listen" yaml:"listen"`                                            // gRPC address; default 127.0.0.1:8081
	Config          string           `json:"config" yaml:"config"`                                            // a file or a directory of YAML files; relative to the node's config file
	ResponseHeaders bool             `json:"response_headers" yaml:"response_headers"`                        // draft-11 RateLimit headers in each response; default false
	Strategy        string           `json:"strategy" yaml:"strategy" oneof:"local memory redis postgres"`    // local (default), memory, redis, postgres
	URL             string           `json:"url,omitempty" yaml:"url"`                                        // store URL; default from the environment
	SyncRate        Duration         `json:"sync_rate" yaml:"sync_rate"`                                      // > 0 periodic, 0 synchronous (upstream's answers); default 1s
	Clock           string           `json:"clock" yaml:"clock" oneof:"store node"`                           // as a namespace's: store (default with a store) or node
	Dict            string           `json:"dict" yaml:"dict"`                                                // shm dict; default "default"
	DictCapacity    int              `json:"dict_capacity" yaml:"dict_capacity"`                              // default 1,000,000
	Timeout         Duration         `json:"timeout,omitempty" yaml:"timeout"`                                // call timeout: a request's longest wait for the store; default 1s with a store
	Leases          bool             `json:"leases" yaml:"leases"`                                            // as a namespace's: rules with an algorithm decided from quota the store granted; default false
	StoreDown       string           `json:"store_down,omitempty" yaml:"store_down" oneof:"share local deny"` // as a namespace's: share (default when it applies), local, deny
	Redis           *RedisOptions    `json:"redis,omitempty" yaml:"redis"`
	Postgres        *PostgresOptions `json:"postgres,omitempty" yaml:"postgres"`
	Rules           *rls.Config      `json:"-" yaml:"-"` // set by Load: the files' rules
	Path            string           `json:"-" yaml:"-"` // set by Load: Config, resolved against the node's config file
}

// RLSNamespace is the namespace the rls section counts in.
const RLSNamespace = "rls"

// defaultRLSListen is the gRPC address of the rls section, upstream's port.
const defaultRLSListen = "127.0.0.1:8081"

// RouteConfig maps requests to a policy: the longest matching path prefix
// wins.
type RouteConfig struct {
	Path    string     `json:"path" yaml:"path"`       // prefix, matched segment by segment
	Methods stringList `json:"methods" yaml:"methods"` // default: any
	Policy  string     `json:"policy" yaml:"policy"`
}

// flags are the command line.
type flags struct {
	config    string
	listen    string
	gwListen  string
	logFormat string
	logLevel  string
	rlsListen string
	pprof     string
}

// ErrHelp is returned by Load for -h: the usage is printed, and the
// process succeeds.
var ErrHelp = flag.ErrHelp

// Load reads the flags, the config file they name and the environment:
// the one place configuration comes from. Flags override the file;
// environment variables fill in secrets the file leaves empty. The usage
// (-h, a bad flag) goes to usage. The Config remembers args and getenv:
// Reload reads the same flags, file and environment again.
func Load(args []string, getenv func(string) string, usage io.Writer) (Config, error) {
	f, err := parseFlags(args, usage)
	if err != nil {
		return Config{}, err
	}
	cfg, err := readFile(f.config, getenv)
	if err != nil {
		return Config{}, err
	}
	errs := f.override(&cfg)
	cfg.args, cfg.loaded = slices.Clone(args), true
	return cfg, errors.Join(errs...)
}

// parseFlags parses the command line.
func parseFlags(args []string, usage io.Writer) (flags, error) {
	fs := flag.NewFlagSet("ratesync-node", flag.ContinueOnError)
	fs.SetOutput(usage)
	var f flags
	fs.StringVar(&f.config, "config", "", "YAML config `file` (default: a local-only namespace \"default\" with windows 1s, 1m, 1h)")
	fs.StringVar(&f.listen, "listen", "", "API listen `address` (default "+DefaultListen+")")
	fs.StringVar(&f.gwListen, "gateway-listen", "", "gateway listen `address` (overrides gateway.listen)")
	fs.StringVar(&f.logFormat, "log-format", "", "log format: text or json (default text)")
	fs.StringVar(&f.logLevel, "log-level", "", "log level: debug, info, warn, error (default info)")
	fs.StringVar(&f.rlsListen, "rls-listen", "", "Envoy rate limit service (gRPC) listen `address` (overrides rls.listen)")
	fs.StringVar(&f.pprof, "pprof-listen", "", "serve Go's profiler (/debug/pprof/) on this `address` (default: off; it has no authentication: keep it on loopback)")
	if err := fs.Parse(args); err != nil {
		return flags{}, err
	}
	if fs.NArg() > 0 {
		return flags{}, fmt.Errorf("unexpected arguments: %q (flags: -config, -listen, -gateway-listen, -rls-listen, -pprof-listen, -log-format, -log-level)", fs.Args())
	}
	return f, nil
}

// readFile reads and parses the config file named (none: the defaults).
func readFile(name string, getenv func(string) string) (Config, error) {
	if name == "" {
		return Parse("", nil, getenv)
	}
	data, err := os.ReadFile(name)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	return Parse(name, data, getenv)
}

// override sets what the flags give in cfg, and returns the flags'
// errors: each flag is checked as the file's field it overrides.
func (f flags) override(cfg *Config) []error {
	var errs []error
	for _, step := range []func(*Config) error{
		f.overrideListen,
		f.overrideGatewayListen,
		f.overrideRLSListen,
		f.checkListenersDiffer,
		f.overridePprof,
		f.overrideLogFormat,
		f.overrideLogLevel,
	} {
		if err := step(cfg); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

func (f flags) overrideListen(cfg *Config) error {
	if f.listen == "" {
		return nil
	}
	cfg.Node.Listen = f.listen
	if err := checkHostPort(f.listen); err != nil {
		return fmt.Errorf("-listen %q: %v", f.listen, err)
	}
	return nil
}

func (f flags) overrideGatewayListen(cfg *Config) error {
	switch {
	case f.gwListen == "":
		return nil
	case cfg.Gateway == nil:
		return fmt.Errorf("-gateway-listen %q: the config has no gateway section", f.gwListen)
	case checkHostPort(f.gwListen) != nil:
		return fmt.Errorf("-gateway-listen %q: %v", f.gwListen, checkHostPort(f.gwListen))
	}
	cfg.Gateway.Listen = f.gwListen
	return nil
}

func (f flags) overrideRLSListen(cfg *Config) error {
	switch {
	case f.rlsListen == "":
		return nil
	case cfg.RLS == nil:
		return fmt.Errorf("-rls-listen %q: the config has no rls section", f.rlsListen)
	case checkHostPort(f.rlsListen) != nil:
		return fmt.Errorf("-rls-listen %q: %v", f.rlsListen, checkHostPort(f.rlsListen))
	case sameListen(f.rlsListen, cfg.Node.Listen) || sameListen(f.rlsListen, cfg.gatewayListen()):
		return fmt.Errorf("-rls-listen %q: must differ from the node's and the gateway's listen addresses", f.rlsListen)
	}
	cfg.RLS.Listen = f.rlsListen
	return nil
}

// checkListenersDiffer refuses -listen or -gateway-listen on the other's
// address.
func (f flags) checkListenersDiffer(cfg *Config) error {
	g := cfg.Gateway
	switch {
	case g == nil || (f.listen == "" && f.gwListen == "") || !sameListen(g.Listen, cfg.Node.Listen):
		return nil
	case f.gwListen != "":
		return fmt.Errorf("-gateway-listen %q: must differ from the node's listen address", f.gwListen)
	}
	return fmt.Errorf("-listen %q: must differ from the gateway's listen address", f.listen)
}

func (f flags) overridePprof(cfg *Config) error {
	switch {
	case f.pprof == "":
		return nil
	case checkHostPort(f.pprof) != nil:
		return fmt.Errorf("-pprof-listen %q: %v", f.pprof, checkHostPort(f.pprof))
	case sameListen(f.pprof, cfg.Node.Listen) || sameListen(f.pprof, cfg.gatewayListen()) || (cfg.RLS != nil && sameListen(f.pprof, cfg.RLS.Listen)):
		return fmt.Errorf("-pprof-listen %q: must differ from the node's, the gateway's and the rls listen addresses", f.pprof)
	}
	cfg.Node.PprofListen = f.pprof
	return nil
}

func (f flags) overrideLogFormat(cfg *Config) error {
	if f.logFormat == "" {
		return nil
	}
	cfg.Node.LogFormat = f.logFormat
	if !slices.Contains([]string{"text", "json"}, f.logFormat) {
		return fmt.Errorf("-log-format %q: must be text or json", f.logFormat)
	}
	return nil
}

func (f flags) overrideLogLevel(cfg *Config) error {
	if f.logLevel == "" {
		return nil
	}
	cfg.Node.LogLevel = f.logLevel
	if !slices.Contains(logLevels, f.logLevel) {
		return fmt.Errorf("-log-level %q: must be one of %s", f.logLevel, strings.Join(logLevels, ", "))
	}
	return nil
}

// gatewayListen is the gateway's address, or "" without a gateway.
func (c *Config) gatewayListen() string {
	if c.Gateway == nil {
		return ""
	}
	return c.Gateway.Listen
}

// Reload reads the configuration again with the flags and the
// environment c was loaded with. A Config that Load did not return has no
// flags to read again: Reload returns an error.
func (c Config) Reload() (Config, error) {
	if !c.loaded {
		return Config{}, errors.New("config: not read by Load: nothing to read again")
	}
	return Load(c.args, c.Getenv, io.Discard)
}

// Getenv returns the environment variable name as c was loaded with it.
func (c Config) Getenv(name string) string {
	if c.getenv == nil {
		return ""
	}
	return c.getenv(name)
}

var logLevels = []string{"debug", "info", "warn", "error"}

// sameListen reports whether two listen addresses clash: the same, and
// not port 0 (any free port).
func sameListen(a, b string) bool {
	_, port, _ := net.SplitHostPort(a)
	return a == b && port != "0"
}

// Parse decodes and validates a config file (data nil: no file) and
// applies defaults and the environment. Errors name file:line: field.
func Parse(file string, data []byte, getenv func(string) string) (Config, error) {
	cfg := Config{File: file, getenv: getenv}
	src := newSource(file)
	if len(data) > 0 {
		if err := src.decode(data, &cfg); err != nil {
			return Config{}, err
		}
	}
	cfg.applyDefaults(getenv, src.set)
	if err := src.validate(&cfg); err != nil {
		return Config{}, err
	}
	for i := range cfg.Namespaces {
		slices.Sort(cfg.Namespaces[i].WindowSizes)
	}
	for i := range cfg.Policies {
		cfg.Policies[i].fillBursts()
	}
	return cfg, nil
}

// formatNumber formats a limit or a cost as the file may write it.
func formatNumber(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
