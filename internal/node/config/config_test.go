package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
)

func TestExampleConfigParses(t *testing.T) {
	data, err := os.ReadFile("../../../cmd/node/testdata/example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse("../../../cmd/node/testdata/example.yaml", data, envOf(map[string]string{
		EnvRedisURL:    "redis://:s3cret@127.0.0.1:6379/0",
		EnvPostgresURL: "postgres://u:pw@127.0.0.1:5432/db",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Namespaces) != 4 || len(cfg.Policies) != 3 || cfg.Gateway == nil || len(cfg.Gateway.Routes) != 3 || cfg.RLS == nil || cfg.RLS.Rules == nil {
		t.Fatalf("parsed %d namespaces, %d policies, gateway %v", len(cfg.Namespaces), len(cfg.Policies), cfg.Gateway)
	}
	api := cfg.Namespaces[1]
	if api.Strategy != StrategyRedis || api.SyncRate != Duration(time.Second) || api.URLFrom != EnvRedisURL || api.Redis.Prefix != "ratesync-example" {
		t.Errorf("namespace api = %+v", api)
	}
	if p := cfg.Policies[0]; len(p.Limits) != 2 || p.Limits[1].Type != "fixed" || p.Key[0] != "header:X-Api-Key" {
		t.Errorf("policy api = %+v", p)
	}
	if r := cfg.Namespaces[3]; r.Name != RLSNamespace || r.Strategy != StrategyRedis || r.SyncRate != 0 || len(r.WindowSizes) != 7 {
		t.Errorf("the rls namespace = %+v", r)
	}
	if m := cfg.Masked(); strings.Contains(m.Namespaces[1].URL, "s3cret") || strings.Contains(m.Namespaces[2].URL, "pw") || strings.Contains(m.RLS.URL, "s3cret") {
		t.Errorf("masked URLs: %q, %q", m.Namespaces[1].URL, m.Namespaces[2].URL)
	}
}

func TestDefaultConfig(t *testing.T) {
	cfg, err := Load(nil, envOf(nil), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Node.Listen != "127.0.0.1:8080" || len(cfg.Namespaces) != 1 {
		t.Fatalf("default config: %+v", cfg)
	}
	ns := cfg.Namespaces[0]
	if ns.Name != "default" || ns.Strategy != StrategyLocal || len(ns.WindowSizes) != 3 ||
		ns.WindowSizes[0] != Duration(time.Second) || ns.WindowSizes[2] != Duration(time.Hour) {
		t.Errorf("default namespace: %+v", ns)
	}
	if cfg.Node.MaxBodyBytes != 64<<10 || cfg.Node.MaxKeyBytes != 1024 || cfg.Node.LogFormat != "text" || cfg.Node.GCHeapFloor != 64<<20 {
		t.Errorf("node defaults: %+v", cfg.Node)
	}
}

func TestLoadConfigFlags(t *testing.T) {
	file := t.TempDir() + "/node.yaml"
	if err := os.WriteFile(file, []byte("node:\n  listen: 127.0.0.1:7000\ngateway:\n  upstream: http://127.0.0.1:9\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		wantErr string
		check   func(t *testing.T, c Config)
	}{
		{name: "listen flag overrides the file", args: []string{"-config", file, "-listen", "127.0.0.1:0"},
			check: func(t *testing.T, c Config) {
				if c.Node.Listen != "127.0.0.1:0" {
					t.Errorf("listen = %q", c.Node.Listen)
				}
			}},
		{name: "gateway listen flag", args: []string{"-config", file, "-gateway-listen", "127.0.0.1:0"},
			check: func(t *testing.T, c Config) {
				if c.Gateway.Listen != "127.0.0.1:0" {
					t.Errorf("gateway listen = %q", c.Gateway.Listen)
				}
			}},
		{name: "json logs", args: []string{"-log-format", "json"},
			check: func(t *testing.T, c Config) {
				if c.Node.LogFormat != "json" {
					t.Errorf("log format = %q", c.Node.LogFormat)
				}
			}},
		{name: "admin token from the environment", env: map[string]string{EnvAdminToken: "tok"},
			check: func(t *testing.T, c Config) {
				if c.Node.AdminToken != "tok" || c.Node.AdminTokenFrom != EnvAdminToken {
					t.Errorf("token = %q from %q", c.Node.AdminToken, c.Node.AdminTokenFrom)
				}
			}},
		{name: "pprof listen flag", args: []string{"-pprof-listen", "127.0.0.1:6060"},
			check: func(t *testing.T, c Config) {
				if c.Node.PprofListen != "127.0.0.1:6060" {
					t.Errorf("pprof listen = %q", c.Node.PprofListen)
				}
			}},
		{name: "bad pprof listen", args: []string{"-pprof-listen", "6060"}, wantErr: `-pprof-listen "6060"`},
		{name: "pprof on the API's address", args: []string{"-listen", "127.0.0.1:7001", "-pprof-listen", "127.0.0.1:7001"}, wantErr: `-pprof-listen "127.0.0.1:7001": must differ`},
		{name: "bad log format", args: []string{"-log-format", "xml"}, wantErr: "-log-format"},
		{name: "bad listen", args: []string{"-listen", "nope"}, wantErr: "-listen"},
		{name: "gateway listen without gateway", args: []string{"-gateway-listen", "127.0.0.1:0"}, wantErr: "no gateway section"},
		{name: "missing file", args: []string{"-config", "/nonexistent.yaml"}, wantErr: "no such file"},
		{name: "unknown flag", args: []string{"-bogus"}, wantErr: "bogus"},
		{name: "stray argument", args: []string{"extra"}, wantErr: "unexpected arguments"},
		{name: "help", args: []string{"-h"}, wantErr: "help requested"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Load(tt.args, envOf(tt.env), &bytes.Buffer{})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, cfg)
		})
	}
	if _, err := Load([]string{"-h"}, envOf(nil), &bytes.Buffer{}); !errors.Is(err, ErrHelp) {
		t.Errorf("-h: %v, want ErrHelp", err)
	}
}

func TestConfigErrors(t *testing.T) {
	redis := map[string]string{EnvRedisURL: "redis://127.0.0.1:6379/0"}
	tests := []struct {
		name string
		yaml string
		env  map[string]string
		want string // a line of the error
	}{
		{"unknown top-level field", "nodes: {}\n", nil, `test.yaml:1: nodes: unknown field (known: gateway, headers, namespaces, node, policies, require_stores, rls)`},
		{"unknown nested field", "node:\n  listen: 127.0.0.1:1\n  colour: red\n", nil, `test.yaml:3: node.colour: unknown field`},
		{"repeated field", "node:\n  id: a\n  id: b\n", nil, `test.yaml:3: node.id: repeated field`},
		{"bad window in a policy", `
policies:
  - name: api
    limits:
      - {limit: 100, window: 1m}
      - {limit: 10, window: abc}
`, nil, `test.yaml:6: policies[0].limits[1].window: "abc": must be a duration like 1s, 1m, 1h`},
		{"window not in the namespace", `
policies:
  - name: api
    limits:
      - limit: 10
        window: 2m
`, nil, `test.yaml:6: policies[0].limits[0].window: "2m": must be one of the window sizes of namespace "default": 1s, 1m, 1h`},
		{"limit zero", "policies:\n  - name: a\n    limits: [{limit: 0, window: 1s}]\n", nil, `test.yaml:3: policies[0].limits[0].limit: "0": must be a finite number > 0`},
		{"limit not a number", "policies:\n  - name: a\n    limits: [{limit: lots, window: 1s}]\n", nil, `policies[0].limits[0].limit: "lots": must be a number`},
		{"limit missing", "policies:\n  - name: a\n    limits: [{window: 1s}]\n", nil, `test.yaml:3: policies[0].limits[0].limit: required`},
		{"limit type", "policies:\n  - name: a\n    limits: [{limit: 1, window: 1s, type: leaky}]\n", nil, `policies[0].limits[0].type: "leaky": must be one of sliding, fixed, anchored, sliding_log, token_bucket, leaky_bucket, sliding_window, fixed_window`},
		{"no limits", "policies:\n  - name: a\n", nil, `test.yaml:2: policies[0].limits: "[]": at least one limit is required`},
		{"too many limits", "policies:\n  - name: a\n    limits: [" + strings.Repeat("{limit: 1, window: 1s},", 17) + "]\n", nil, `policies[0].limits: 17 limits: at most 16`},
		{"cost above a limit", "policies:\n  - name: a\n    cost: 5\n    limits: [{limit: 2, window: 1s}]\n", nil, `test.yaml:3: policies[0].cost: "5": must be at most limits[0].limit (2)`},
		{"unknown namespace", "policies:\n  - name: a\n    namespace: nope\n    limits: [{limit: 1, window: 1s}]\n", nil, `test.yaml:3: policies[0].namespace: "nope": no such namespace (namespaces: default)`},
		{"duplicate policy", "policies:\n  - {name: a, limits: [{limit: 1, window: 1s}]}\n  - {name: a, limits: [{limit: 1, window: 1s}]}\n", nil, `test.yaml:3: policies[1].name: "a": another policy has this name`},
		{"bad key selector", "policies:\n  - name: a\n    key: cookie\n    limits: [{limit: 1, window: 1s}]\n", nil, `test.yaml:3: policies[0].key: key selector "cookie": must be one of`},
		{"consumer without header", "policies:\n  - name: a\n    key: consumer\n    limits: [{limit: 1, window: 1s}]\n", nil, `test.yaml:3: policies[0].key: key selector "consumer": needs a consumer header (KeyOptions.ConsumerHeader; gateway.consumer_header in the node's config)`},
		{"missing_key", "policies:\n  - name: a\n    missing_key: anon\n    limits: [{limit: 1, window: 1s}]\n", nil, `policies[0].missing_key: "anon": must be one of ip, empty`},
		{"deny on a local namespace", "policies:\n  - name: a\n    on_store_down: deny\n    limits: [{limit: 1, window: 1s}]\n", nil, `test.yaml:3: policies[0].on_store_down: "deny": namespace "default" has no store`},
		{"strategy", "namespaces:\n  - name: x\n    strategy: etcd\n", nil, `test.yaml:3: namespaces[0].strategy: "etcd": must be one of local, memory, redis, postgres`},
		{"namespace without name", "namespaces:\n  - strategy: local\n", nil, `test.yaml:2: namespaces[0].name: required`},
		{"sync_rate on local", "namespaces:\n  - name: x\n    sync_rate: 1s\n", nil, `test.yaml:3: namespaces[0].sync_rate: "1s": only with strategy memory, redis or postgres`},
		{"negative sync_rate", "namespaces:\n  - name: x\n    strategy: memory\n    sync_rate: -1s\n", nil, `namespaces[0].sync_rate: "-1s": must be > 0 (periodic) or 0 (synchronous)`},
		{"redis without url", "namespaces:\n  - name: x\n    strategy: redis\n", nil, `test.yaml:2: namespaces[0].url: required with strategy redis (or set RATESYNC_REDIS_URL)`},
		{"bad redis url from env", "namespaces:\n  - name: x\n    strategy: redis\n", map[string]string{EnvRedisURL: "http://u:hunter2@h/"}, `test.yaml:2: namespaces[0].url (from RATESYNC_REDIS_URL): "http://u:xxxxx@h/": not a Redis URL`},
		{"url on local", "namespaces:\n  - name: x\n    url: redis://h/0\n", nil, `namespaces[0].url: only with strategy redis or postgres`},
		{"redis options on memory", "namespaces:\n  - name: x\n    strategy: memory\n    redis: {prefix: p}\n", nil, `namespaces[0].redis: only with strategy redis`},
		{"duplicate namespace", "namespaces:\n  - name: x\n  - name: x\n", nil, `test.yaml:3: namespaces[1].name: "x": another namespace has this name`},
		{"window size zero", "namespaces:\n  - name: x\n    window_sizes: [0s]\n", nil, `test.yaml:3: namespaces[0].window_sizes[0]: "0s": must be > 0`},
		{"window size twice", "namespaces:\n  - name: x\n    window_sizes: [1s, 1s]\n", nil, `namespaces[0].window_sizes[1]: "1s": listed twice`},
		{"near_limit on local", "namespaces:\n  - name: x\n    near_limit: true\n", nil, `test.yaml:3: namespaces[0].near_limit: "true": needs a periodic sync rate (sync_rate, SyncRate > 0) and a store`},
		{"near_limit synchronous", "namespaces:\n  - name: x\n    strategy: memory\n    sync_rate: 0\n    near_limit: true\n", nil, `test.yaml:5: namespaces[0].near_limit: "true": needs a periodic sync rate (sync_rate, SyncRate > 0)`},
		{"leases on local", "namespaces:\n  - name: x\n    leases: true\n", nil, `test.yaml:3: namespaces[0].leases: "true": needs a periodic sync rate (sync_rate, SyncRate > 0) and a store; this namespace is local only`},
		{"leases synchronous", "namespaces:\n  - name: x\n    strategy: memory\n    sync_rate: 0\n    leases: true\n", nil, `test.yaml:5: namespaces[0].leases: "true": needs a periodic sync rate (sync_rate, SyncRate > 0): returns of unused quota ride the periodic sync`},
		{"leases and near_limit", "namespaces:\n  - name: x\n    strategy: memory\n    near_limit: true\n    leases: true\n", nil, `test.yaml:5: namespaces[0].leases: "true": leases and near_limit are alternatives`},
		{"leases not a bool", "namespaces:\n  - name: x\n    strategy: memory\n    leases: maybe\n", nil, `test.yaml:4: namespaces[0].leases: "maybe": must be true or false`},
		{"store_down", "namespaces:\n  - name: x\n    strategy: memory\n    sync_rate: 0\n    store_down: open\n", nil, `test.yaml:5: namespaces[0].store_down: "open": must be one of share, local, deny`},
		{"store_down on local", "namespaces:\n  - name: x\n    store_down: local\n", nil, `test.yaml:3: namespaces[0].store_down: "local": only with strategy memory, redis or postgres (a local namespace has no store)`},
		{"store_down periodic without leases", "namespaces:\n  - name: x\n    strategy: memory\n    store_down: share\n", nil, `test.yaml:4: namespaces[0].store_down: "share": only with leases: true or sync_rate: 0`},
		{"rls leases", "rls:\n  config: rules.yaml\n  strategy: memory\n  sync_rate: 0\n  leases: true\n", nil, `test.yaml:5: rls.leases: "true": needs a periodic sync rate (sync_rate, SyncRate > 0)`},
		{"rls leases not a bool", "rls:\n  config: rules.yaml\n  leases: 1\n", nil, `test.yaml:3: rls.leases: "1": must be true or false`},
		{"rls store_down", "rls:\n  config: rules.yaml\n  strategy: memory\n  leases: true\n  store_down: closed\n", nil, `test.yaml:5: rls.store_down: "closed": must be one of share, local, deny`},
		{"rls store_down on local", "rls:\n  config: rules.yaml\n  store_down: deny\n", nil, `test.yaml:3: rls.store_down: "deny": only with strategy memory, redis or postgres`},
		{"dict capacity", "namespaces:\n  - name: x\n    dict_capacity: -5\n", nil, `test.yaml:3: namespaces[0].dict_capacity: "-5": must be >= 0`},
		{"clock", "namespaces:\n  - name: x\n    strategy: memory\n    clock: ntp\n", nil, `test.yaml:4: namespaces[0].clock: "ntp": must be one of store, node`},
		{"store clock on local", "namespaces:\n  - name: x\n    clock: store\n", nil, `test.yaml:3: namespaces[0].clock: "store": only with strategy memory, redis or postgres`},
		{"rls clock", "rls:\n  config: rules.yaml\n  strategy: memory\n  clock: wall\n", nil, `test.yaml:4: rls.clock: "wall": must be one of store, node`},
		{"pipe in name", "namespaces:\n  - name: a|b\n", nil, `namespaces[0].name: "a|b": must not contain '|'`},
		{"postgres table", "namespaces:\n  - name: x\n    strategy: postgres\n    url: postgres://h/db\n    postgres: {table: Counters}\n", nil, `test.yaml:5: namespaces[0].postgres.table: "Counters": must match ^[a-z_][a-z0-9_]*$ and be at most 52 bytes`},
		{"redis shards", "namespaces:\n  - name: x\n    strategy: redis\n    redis: {shards: 5000}\n", redis, `test.yaml:4: namespaces[0].redis.shards: "5000": must be 0 (default 16) or 1 to 1024`},
		{"listen", "node:\n  listen: localhost\n", nil, `test.yaml:2: node.listen: "localhost": must be host:port`},
		{"log format", "node:\n  log_format: xml\n", nil, `node.log_format: "xml": must be one of text, json`},
		{"body limit", "node:\n  max_body_bytes: 10\n", nil, `node.max_body_bytes: "10": must be at least 256`},
		{"heap floor", "node:\n  gc_heap_floor: -1\n", nil, `test.yaml:2: node.gc_heap_floor: "-1": must be 0 (no floor) or a number of bytes up to 1073741824 (1 GiB)`},
		{"heap floor too large", "node:\n  gc_heap_floor: 6710886400\n", nil, `test.yaml:2: node.gc_heap_floor: "6710886400": must be 0 (no floor) or a number of bytes up to 1073741824 (1 GiB)`},
		{"heap floor not a number", "node:\n  gc_heap_floor: 64MiB\n", nil, `test.yaml:2: node.gc_heap_floor: "64MiB": must be a whole number`},
		{"header family", "headers:\n  families: [draft-03]\n", nil, `headers.families[0]: "draft-03": must be one of ratelimit, x-ratelimit`},
		{"hide not a bool", "headers:\n  hide: maybe\n", nil, `headers.hide: "maybe": must be true or false`},
		{"require_stores not a bool", "require_stores: yes\n", nil, `test.yaml:1: require_stores: "yes": must be true or false`},
		{"gateway without upstream", "gateway:\n  listen: 127.0.0.1:1\n", nil, `test.yaml:1: gateway.upstream: required`},
		{"gateway upstream", "gateway:\n  upstream: ftp://x\n", nil, `gateway.upstream: "ftp://x": must be an http:// or https:// URL`},
		{"trusted proxy", "gateway:\n  upstream: http://x\n  trusted_proxies: [10.0.0.0/33]\n", nil, `gateway.trusted_proxies[0]: "10.0.0.0/33": must be an IP address or a CIDR`},
		{"route without slash", "gateway:\n  upstream: http://x\n  routes: [{path: api, policy: p}]\n", nil, `gateway.routes[0].path: "api": must start with /`},
		{"route policy", "gateway:\n  upstream: http://x\n  routes:\n    - path: /\n      policy: nope\n", nil, `test.yaml:5: gateway.routes[0].policy: "nope": no such policy`},
		{"route method", "gateway:\n  upstream: http://x\n  routes: [{path: /, methods: [get], policy: p}]\n", nil, `gateway.routes[0].methods[0]: "get": must be an upper-case HTTP method`},
		{"same listener", "node:\n  listen: 127.0.0.1:1\ngateway:\n  upstream: http://x\n  listen: 127.0.0.1:1\n", nil, `gateway.listen: "127.0.0.1:1": must differ from node.listen`},
		{"not a mapping", "- a\n- b\n", nil, `test.yaml:1: (top level): must be a mapping`},
		{"list expected", "namespaces: {name: x}\n", nil, `test.yaml:1: namespaces: must be a list`},
		{"yaml syntax", "node: [\n", nil, `test.yaml:1: invalid YAML: did not find expected node content`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("test.yaml", []byte(tt.yaml), envOf(tt.env))
			if err == nil {
				t.Fatalf("no error, want %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error:\n%v\nwant a line containing:\n%s", err, tt.want)
			}
		})
	}
}

// One load reports every invalid field of a file, each at its line with
// its value and what is allowed, in the order of the lines: the shape's
// errors (types, unknown fields, allowed values) and the rules' alike. A
// field whose value could not be read, and what depends on it, get no
// second error.
func TestConfigCollectsEveryError(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{"shape", "node:\n  colour: red\n  log_level: loud\n", []string{
			`test.yaml:2: node.colour: unknown field (known: admin_token, gc_heap_floor, id, listen, log_format, log_level, max_body_bytes, max_key_bytes, shutdown_timeout)`,
			`test.yaml:3: node.log_level: "loud": must be one of debug, info, warn, error`,
		}},
		{"shape and rules", `node:
  listen: localhost
  max_body_bytes: abc
  shutdown_timeout: 9999999999h
namespaces:
  - name: a
    strategy: memory
    window_sizes: [1s, 1s]
    dict_capacity: -5
  - name: b
    strategy: memory
    sync_rate: soon
policies:
  - name: p
    namespace: a
    cost: many
    limits:
      - {limit: 0, window: 1s}
      - {limit: 10, window: 7s}
  - name: q
    namespace: b
    limits: [{limit: 1, window: 3s}]
  - name: r
    namespace: nope
    limits: [{limit: 1.5e16, window: 1s, burst: 3}]
`, []string{
			`test.yaml:2: node.listen: "localhost": must be host:port, like 127.0.0.1:8080`,
			`test.yaml:3: node.max_body_bytes: "abc": must be a whole number`,
			`test.yaml:4: node.shutdown_timeout: "9999999999h": must be at most 2562047h47m16.854775807s (about 292 years)`,
			`test.yaml:8: namespaces[0].window_sizes[1]: "1s": listed twice`,
			`test.yaml:9: namespaces[0].dict_capacity: "-5": must be >= 0 (0 keeps the dict's bound)`,
			`test.yaml:12: namespaces[1].sync_rate: "soon": must be a duration like 1s, 1m, 1h`,
			`test.yaml:16: policies[0].cost: "many": must be a number`,
			`test.yaml:18: policies[0].limits[0].limit: "0": must be a finite number > 0`,
			`test.yaml:19: policies[0].limits[1].window: "7s": must be one of the window sizes of namespace "a": 1s, 1s`,
			`test.yaml:24: policies[2].namespace: "nope": no such namespace (namespaces: a, b)`,
			`test.yaml:25: policies[2].limits[0].limit: "1.5e16": must be at most 1e+15`,
			`test.yaml:25: policies[2].limits[0].burst: "3": only applies to type token_bucket and leaky_bucket, not sliding`,
		}},
		{"what depends on a section not read", `namespaces: {name: api}
policies:
  - name: p
    namespace: api
    limits: [{limit: 1, window: 1s}]
  - name: [q]
gateway:
  upstream: http://127.0.0.1:1
  routes: [{path: /, policy: r}]
`, []string{
			`test.yaml:1: namespaces: must be a list`,
			`test.yaml:6: policies[1].name: must be a single value, not a list or a mapping`,
			`test.yaml:6: policies[1].limits: "[]": at least one limit is required`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("test.yaml", []byte(tt.yaml), envOf(nil))
			if err == nil {
				t.Fatal("accepted")
			}
			if got, want := err.Error(), strings.Join(tt.want, "\n"); got != want {
				t.Errorf("errors:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

// Values of the wrong type name the value and the type; a duration too
// large names the largest.
func TestTypeErrors(t *testing.T) {
	tests := []struct{ name, yaml, want string }{
		{"a number", "policies:\n  - name: p\n    limits: [{limit: abc, window: 1s}]\n", `test.yaml:3: policies[0].limits[0].limit: "abc": must be a number`},
		{"a whole number", "node:\n  max_key_bytes: 1.5\n", `test.yaml:2: node.max_key_bytes: "1.5": must be a whole number`},
		{"a boolean", "headers:\n  hide: sometimes\n", `test.yaml:2: headers.hide: "sometimes": must be true or false`},
		{"a duration", "gateway:\n  upstream: http://x\n  timeout: 30\n", `test.yaml:3: gateway.timeout: "30": must be a duration like 1s, 1m, 1h`},
		{"a duration too large", "namespaces:\n  - name: a\n    window_sizes: [300000000h]\n", `test.yaml:3: namespaces[0].window_sizes[0]: "300000000h": must be at most 2562047h47m16.854775807s (about 292 years)`},
		{"a negative duration too large", "node:\n  shutdown_timeout: -300000000h\n", `test.yaml:2: node.shutdown_timeout: "-300000000h": must be at least -2562047h47m16.854775808s`},
		{"a list for a string", "node:\n  id: [a, b]\n", `test.yaml:2: node.id: must be a single value, not a list or a mapping`},
		{"a mapping for a duration", "node:\n  shutdown_timeout: {s: 1}\n", `test.yaml:2: node.shutdown_timeout: must be a duration like 1s, 1m, 1h`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("test.yaml", []byte(tt.yaml), envOf(nil))
			if err == nil || err.Error() != tt.want {
				t.Errorf("error:\n%v\nwant:\n%s", err, tt.want)
			}
		})
	}
}

func TestMaskURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"},
		{"redis://:s3cret@127.0.0.1:6379/0", "redis://:xxxxx@127.0.0.1:6379/0"},
		{"postgres://app:pa%40ss@db:5432/x?sslmode=disable", "postgres://app:xxxxx@db:5432/x?sslmode=disable"},
		{"postgres://db/x?password=hunter2&sslmode=require", "postgres://db/x?password=xxxxx&sslmode=require"},
		{"host=db user=app password=hunter2 dbname=x", "host=db user=app password=xxxxx dbname=x"},
		{"host=db password='a b' dbname=x", "host=db password=xxxxx dbname=x"},
		{"postgres://u:pw@h:notaport/db", "postgres://u:xxxxx@h:notaport/db"},
		{"postgres://u:p@ss@h:notaport/db", "xxxxx@h:notaport/db"},
		{"//u:pw1LEAK@h:6379", "xxxxx@h:6379"},
		{"redis:/u:pw@h", "xxxxx@h"},
		{"u:pw@h:6379", "xxxxx@h:6379"},
		{"postgresql:/u:pw@h/db", "xxxxx@h/db"},
		{"redis://h:6379/u:pw@x", "xxxxx@x"},
		{"user=u password=p@ss host=h", "user=u password=xxxxx host=h"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := MaskURL(tt.in); got != tt.want {
				t.Errorf("MaskURL(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// The effective configuration shows the values in force, defaults filled
// in, secrets masked.
func TestEffectiveConfigShowsDefaults(t *testing.T) {
	cfg := testConfig(t, `
namespaces:
  - name: api
    strategy: redis
    dict: api
  - name: web
    dict: api
    dict_capacity: 5000
  - name: other
policies:
  - name: p
    namespace: api
    limits: [{limit: 10, window: 1s}]
`, map[string]string{EnvRedisURL: "redis://:pw@127.0.0.1:1/0"})
	data, err := json.Marshal(cfg.Masked())
	if err != nil {
		t.Fatal(err)
	}
	out := string(data)
	for _, want := range []string{
		`"name":"api","strategy":"redis","url":"redis://:xxxxx@127.0.0.1:1/0","sync_rate":"1s","window_sizes":["1s","1m","1h"],"dict":"api","dict_capacity":5000`,
		`"redis":{"cluster":false,"prefix":"ratesync","shards":16,"ttl_margin":"5s","lane_ttl":"24h","timeout":"5s","scan_threshold":1000,"fields_per_command":1000}`,
		`"name":"other","strategy":"local","sync_rate":"never","window_sizes":["1s","1m","1h"],"dict":"default","dict_capacity":1000000`,
		`"missing_key":"ip","cost":1,"penalty":false,"on_store_down":"local","error_message":"API rate limit exceeded"`,
		`"limits":[{"limit":10,"window":"1s","type":"sliding"}],"key":["ip"]`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("effective config lacks %s:\n%s", want, out)
		}
	}
}

// Policies with token and leaky buckets: any window, the type's other
// spellings read as the node's own, and the burst in force shown.
func TestBucketPolicies(t *testing.T) {
	cfg := testConfig(t, `
namespaces:
  - name: default
  - name: shared
    strategy: memory
    sync_rate: 1s
    window_sizes: [1s]
policies:
  - name: uploads
    limits:
      - {limit: 10, window: 1m, type: token_bucket, burst: 20}
      - {limit: 2, window: 90s, type: leaky_bucket}
      - {limit: 100, window: 1h, type: sliding_window}
      - {limit: 5, window: 1s, type: fixed_window}
  - name: shared
    namespace: shared
    cost: 15
    limits: [{limit: 10, window: 2m, type: token_bucket, burst: 20}]
`, nil)
	data, err := json.Marshal(cfg.Masked())
	if err != nil {
		t.Fatal(err)
	}
	want := `"limits":[{"limit":10,"window":"1m","type":"token_bucket","burst":20},{"limit":2,"window":"90s","type":"leaky_bucket","burst":2},{"limit":100,"window":"1h","type":"sliding"},{"limit":5,"window":"1s","type":"fixed"}]`
	if !strings.Contains(string(data), want) {
		t.Errorf("effective config lacks %s:\n%s", want, data)
	}
	got := cfg.Policies[0].Policy(nil).Limits
	wantLimits := []ratelimiting.Limit{
		{Limit: 10, Window: time.Minute, Algorithm: ratelimiting.TokenBucket, Burst: 20},
		{Limit: 2, Window: 90 * time.Second, Algorithm: ratelimiting.LeakyBucket, Burst: 2},
		{Limit: 100, Window: time.Hour, Algorithm: ratelimiting.SlidingWindow},
		{Limit: 5, Window: time.Second, Algorithm: ratelimiting.FixedWindow},
	}
	if !slices.Equal(got, wantLimits) {
		t.Errorf("limits = %+v, want %+v", got, wantLimits)
	}
}

// A policy with a bucket needs a namespace whose store keeps buckets.
func TestBucketPolicyNeedsAStoreThatKeepsBuckets(t *testing.T) {
	for _, st := range []struct{ strategy, url string }{
		{StrategyMemory, ""},
		{StrategyRedis, "redis://127.0.0.1:1/0"},
		{StrategyPostgres, "postgres://u@127.0.0.1:1/db"},
	} {
		t.Run(st.strategy, func(t *testing.T) {
			yaml := fmt.Sprintf(`
namespaces:
  - name: s
    strategy: %s
    url: %q
policies:
  - name: p
    namespace: s
    limits:
      - {limit: 10, window: 1m, type: token_bucket}
`, st.strategy, st.url)
			if st.url == "" {
				yaml = strings.Replace(yaml, "    url: \"\"\n", "", 1)
			}
			_, err := Parse("test.yaml", []byte(yaml), envOf(nil))
			switch want := `test.yaml:10: policies[0].limits[0].type: "token_bucket": the store of namespace "s" does not keep buckets`; {
			case keepsBuckets(st.strategy) && err != nil:
				t.Errorf("the store keeps buckets, and the config is refused: %v", err)
			case !keepsBuckets(st.strategy) && (err == nil || err.Error() != want):
				t.Errorf("error %v, want %s", err, want)
			}
		})
	}
	if !keepsBuckets(StrategyMemory) {
		t.Error("the memory store keeps buckets")
	}
}

// Policies with anchored windows, sliding logs and precision limits: any
// window for the first two, a window that is not one of the namespace's
// sizes when its precision is; precision shown where the file sets it.
func TestKeyedAndPrecisionPolicies(t *testing.T) {
	cfg := testConfig(t, `
namespaces:
  - name: default
    window_sizes: [1s, 1m]
  - name: sync
    strategy: memory
    sync_rate: 0
    window_sizes: [1m]
  - name: periodic
    strategy: memory
    sync_rate: 1s
    window_sizes: [1m]
policies:
  - name: login
    limits:
      - {limit: 3, window: 15m, type: anchored}
      - {limit: 100, window: 90s, type: sliding_log}
      - {limit: 1000, window: 1h, precision: 1m}
      - {limit: 10, window: 1m, type: sliding_window, precision: 1s}
  - name: sync
    namespace: sync
    limits:
      - {limit: 5, window: 1m, type: sliding_log}
      - {limit: 5, window: 1h, type: anchored}
  - name: periodic
    namespace: periodic
    limits: [{limit: 500, window: 10m, precision: 1m}]
`, nil)
	data, err := json.Marshal(cfg.Masked())
	if err != nil {
		t.Fatal(err)
	}
	want := `"limits":[{"limit":3,"window":"15m","type":"anchored"},{"limit":100,"window":"90s","type":"sliding_log"},{"limit":1000,"window":"1h","type":"sliding","precision":"1m"},{"limit":10,"window":"1m","type":"sliding","precision":"1s"}]`
	if !strings.Contains(string(data), want) {
		t.Errorf("effective config lacks %s:\n%s", want, data)
	}
	got := cfg.Policies[0].Policy(nil).Limits
	wantLimits := []ratelimiting.Limit{
		{Limit: 3, Window: 15 * time.Minute, Algorithm: ratelimiting.AnchoredWindow},
		{Limit: 100, Window: 90 * time.Second, Algorithm: ratelimiting.SlidingLog},
		{Limit: 1000, Window: time.Hour, Precision: time.Minute},
		{Limit: 10, Window: time.Minute, Precision: time.Second},
	}
	if !slices.Equal(got, wantLimits) {
		t.Errorf("limits = %+v, want %+v", got, wantLimits)
	}
}

// Anchored windows and sliding logs are decided in the store of a
// synchronous namespace: every store the node opens keeps and decides
// them, as far as the configuration can tell.
func TestKeyedPolicyInASynchronousStore(t *testing.T) {
	for _, st := range []struct{ strategy, url string }{
		{StrategyRedis, "redis://127.0.0.1:1/0"},
		{StrategyPostgres, "postgres://u@127.0.0.1:1/db"},
	} {
		t.Run(st.strategy, func(t *testing.T) {
			_, err := Parse("test.yaml", []byte(fmt.Sprintf(`
namespaces:
  - {name: s, strategy: %s, url: %q, sync_rate: 0}
policies:
  - name: p
    namespace: s
    limits:
      - {limit: 10, window: 1m, type: sliding_log}
      - {limit: 10, window: 1m, type: anchored}
`, st.strategy, st.url)), envOf(nil))
			if err != nil {
				t.Errorf("refused: %v", err)
			}
		})
	}
}

// A leased namespace, and where store_down applies: leased and
// synchronous namespaces (share when the file leaves it out), the rls
// section's as a namespace's; the effective configuration shows both.
func TestLeasedNamespaces(t *testing.T) {
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rules, []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, fmt.Sprintf(`
namespaces:
  - name: leased
    strategy: memory
    sync_rate: 200ms
    leases: true
    store_down: local
  - name: leased-default
    strategy: memory
    leases: true
  - name: sync
    strategy: memory
    sync_rate: 0
    store_down: deny
  - name: sync-default
    strategy: memory
    sync_rate: 0
  - name: periodic
    strategy: memory
  - name: local
rls:
  config: %q
  strategy: memory
  leases: true
  store_down: deny
`, rules), nil)
	tests := []struct {
		name      string
		leases    bool
		storeDown string
		want      namespace.StoreDown
	}{
		{"leased", true, "local", namespace.StoreDownLocal},
		{"leased-default", true, "share", namespace.StoreDownShare},
		{"sync", false, "deny", namespace.StoreDownDeny},
		{"sync-default", false, "share", namespace.StoreDownShare},
		{"periodic", false, "", namespace.StoreDownShare},
		{"local", false, "", namespace.StoreDownShare},
		{RLSNamespace, true, "deny", namespace.StoreDownDeny},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := cfg.Namespaces[i]
			if ns.Name != tt.name || ns.Leases != tt.leases || ns.StoreDown != tt.storeDown {
				t.Errorf("namespace %q: leases %v, store_down %q; want %q: %v, %q", ns.Name, ns.Leases, ns.StoreDown, tt.name, tt.leases, tt.storeDown)
			}
			if nc := ns.Namespace(nil); nc.Leases != tt.leases || nc.StoreDown != tt.want {
				t.Errorf("namespace.Config: Leases %v, StoreDown %v; want %v, %v", nc.Leases, nc.StoreDown, tt.leases, tt.want)
			}
		})
	}
	data, err := json.Marshal(cfg.Masked())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"name":"leased","strategy":"memory","sync_rate":"200ms","window_sizes":["1s","1m","1h"],"dict":"default","dict_capacity":1000000,"near_limit":false,"leases":true,"store_down":"local","timeout":"1s"`,
		`"name":"periodic","strategy":"memory","sync_rate":"1s","window_sizes":["1s","1m","1h"],"dict":"default","dict_capacity":1000000,"near_limit":false,"leases":false,"timeout":"1s"`,
		`"leases":true,"store_down":"deny"`,
	} {
		if !strings.Contains(string(data), want) {
			t.Errorf("effective config lacks %s:\n%s", want, data)
		}
	}
	if cfg.RLS.StoreDown != "deny" || !cfg.RLS.Leases {
		t.Errorf("rls section: leases %v, store_down %q", cfg.RLS.Leases, cfg.RLS.StoreDown)
	}
}

// The types the config file allows are the types /v1/check reads, and the
// errors of both list them alike.
func TestLimitTypes(t *testing.T) {
	f, _ := reflect.TypeFor[LimitConfig]().FieldByName("Type")
	types := strings.Fields(f.Tag.Get("oneof"))
	if got := strings.Join(types, ", "); got != LimitTypesText {
		t.Errorf("oneof %q, LimitTypesText %q", got, LimitTypesText)
	}
	for _, typ := range types {
		alg, ok := ParseLimitType(typ)
		if !ok {
			t.Errorf("ParseLimitType(%q) fails", typ)
		}
		if got := LimitType(ratelimiting.Limit{Algorithm: alg}); !strings.HasPrefix(typ, got) {
			t.Errorf("type %q reads as %v, written %q", typ, alg, got)
		}
	}
	for _, typ := range []string{"leaky", "Sliding", "anchored_window", "log", "fixed "} {
		if _, ok := ParseLimitType(typ); ok {
			t.Errorf("ParseLimitType(%q) succeeds", typ)
		}
	}
}

// Reload reads the file again with the flags and the environment of the
// Load that made the configuration; a configuration Parse made has none.
func TestReload(t *testing.T) {
	file := filepath.Join(t.TempDir(), "node.yaml")
	if err := os.WriteFile(file, []byte("node: {log_level: debug}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load([]string{"-config", file, "-log-format", "json"}, envOf(map[string]string{EnvAdminToken: "tok"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte("node: {log_level: warn}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	next, err := cfg.Reload()
	if err != nil {
		t.Fatal(err)
	}
	if n := next.Node; n.LogLevel != "warn" || n.LogFormat != "json" || n.AdminToken != "tok" {
		t.Errorf("reloaded: %+v, want log_level warn from the file, log_format json from the flag, the token from the environment", n)
	}
	if _, err := testConfig(t, "", nil).Reload(); err == nil {
		t.Error("a configuration from Parse reloaded")
	}
}
