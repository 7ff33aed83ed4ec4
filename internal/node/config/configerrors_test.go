package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// Every configuration error is reported, with the line of the field at
// fault, before the node starts anything: no "starting" log, no listener.
func TestConfigErrorsStopTheStart(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want string // the whole error, after "<file>:"
	}{
		{"bad duration", `
namespaces:
  - name: api
    strategy: memory
    sync_rate: fast
`, `5: namespaces[0].sync_rate: "fast": must be a duration like 1s, 1m, 1h`},
		{"sub-millisecond sync rate", `
namespaces:
  - name: api
    strategy: memory
    sync_rate: 500us
`, `5: namespaces[0].sync_rate: "500us": a periodic sync rate (> 0) must be at least 1ms`},
		{"window size not whole milliseconds", `
namespaces:
  - name: api
    window_sizes:
      - 1s
      - 1500us
`, `6: namespaces[0].window_sizes[1]: "1500us": must be > 0 and a whole number of milliseconds`},
		{"pipe in a namespace name", `
namespaces:
  - strategy: local
    name: a|b
`, `4: namespaces[0].name: "a|b": must not contain '|'`},
		{"pipe in a dict name", `
namespaces:
  - name: a
    dict: d|x
`, `4: namespaces[0].dict: "d|x": must not contain '|'`},
		{"call timeout on a local namespace", `
namespaces:
  - name: api
    timeout: 1s
`, `4: namespaces[0].timeout: "1s": only with strategy memory, redis or postgres (a local namespace never waits for a store)`},
		{"call timeout out of range", `
namespaces:
  - name: api
    strategy: memory
    timeout: 2m
`, `5: namespaces[0].timeout: "2m": must be from 1ms to 1m, like 500ms or 1s`},
		{"near_limit on a synchronous namespace", `
namespaces:
  - name: api
    strategy: memory
    sync_rate: 0
    near_limit: true
`, `6: namespaces[0].near_limit: "true": needs a periodic sync rate (sync_rate, SyncRate > 0); this namespace is synchronous, and synchronous namespaces always decide in the store`},
		{"leases on a synchronous namespace", `
namespaces:
  - name: api
    strategy: memory
    sync_rate: 0
    leases: true
`, `6: namespaces[0].leases: "true": needs a periodic sync rate (sync_rate, SyncRate > 0): returns of unused quota ride the periodic sync; this namespace is synchronous`},
		{"leases not a boolean", `
namespaces:
  - name: api
    strategy: memory
    leases: always
`, `5: namespaces[0].leases: "always": must be true or false`},
		{"store_down not one of its values", `
namespaces:
  - name: api
    strategy: memory
    leases: true
    store_down: open
`, `6: namespaces[0].store_down: "open": must be one of share, local, deny`},
		{"store_down on a periodic namespace without leases", `
namespaces:
  - name: api
    strategy: memory
    sync_rate: 1s
    store_down: deny
`, `6: namespaces[0].store_down: "deny": only with leases: true or sync_rate: 0 (a namespace that syncs periodically without leases decides on the node, whether its store answers or not)`},
		{"unknown top-level field", `
node:
  id: a
nodes: {}
`, `4: nodes: unknown field (known: gateway, headers, namespaces, node, policies, require_stores, rls)`},
		{"unknown field in a namespace", `
namespaces:
  - name: api
    sync: 1s
`, `4: namespaces[0].sync: unknown field (known: clock, dict, dict_capacity, leases, name, near_limit, postgres, redis, store_down, strategy, sync_rate, timeout, url, window_sizes)`},
		{"unknown field in redis options", `
namespaces:
  - name: api
    strategy: redis
    url: redis://127.0.0.1:1/0
    redis:
      prefix: p
      shard: 4
`, `8: namespaces[0].redis.shard: unknown field (known: cluster, fields_per_command, lane_ttl, prefix, scan_threshold, shards, timeout, ttl_margin)`},
		{"unknown field in a limit", `
policies:
  - name: api
    limits:
      - limit: 10
        window: 1s
        bucket: 5
`, `7: policies[0].limits[0].bucket: unknown field (known: burst, limit, precision, type, window)`},
		{"redis shards out of range", `
namespaces:
  - name: api
    strategy: redis
    url: redis://127.0.0.1:1/0
    redis:
      shards: 5000
`, `7: namespaces[0].redis.shards: "5000": must be 0 (default 16) or 1 to 1024`},
		{"redis lane_ttl below the store's minimum", `
namespaces:
  - name: api
    strategy: redis
    url: redis://127.0.0.1:1/0
    redis: {lane_ttl: 1ms}
`, `6: namespaces[0].redis.lane_ttl: "1ms": must be 0 (default 24h) or at least 1s`},
		{"bad redis url", `
namespaces:
  - name: api
    strategy: redis
    sync_rate: 1s
    url: http://user:hunter2@127.0.0.1/
`, `6: namespaces[0].url: "http://user:xxxxx@127.0.0.1/": not a Redis URL like redis://user:password@host:6379/0`},
		{"bad postgres url", `
namespaces:
  - name: billing
    strategy: postgres
    url: "postgres://u:pw@h:notaport/db"
`, `5: namespaces[0].url: "postgres://u:xxxxx@h:notaport/db": not a PostgreSQL URL or DSN`},
		{"duplicated namespace", `
namespaces:
  - name: api
  - name: web
  - name: api
`, `5: namespaces[2].name: "api": another namespace has this name`},
		{"limit window not in the namespace", `
policies:
  - name: api
    limits:
      - {limit: 10, window: 1s}
      - limit: 100
        window: 2m
`, `7: policies[0].limits[1].window: "2m": must be one of the window sizes of namespace "default": 1s, 1m, 1h`},
		{"cost above a limit", `
policies:
  - name: api
    limits: [{limit: 2, window: 1s}]
    cost: 3
`, `5: policies[0].cost: "3": must be at most limits[0].limit (2): a larger cost can never pass`},
		{"limit not a number", `
policies:
  - name: api
    limits:
      - {limit: lots, window: 1s}
`, `5: policies[0].limits[0].limit: "lots": must be a number`},
		{"missing_key", `
policies:
  - name: api
    limits: [{limit: 2, window: 1s}]
    missing_key: anon
`, `5: policies[0].missing_key: "anon": must be one of ip, empty`},
		{"on_store_down deny without a store", `
policies:
  - name: api
    limits: [{limit: 2, window: 1s}]
    on_store_down: deny
`, `5: policies[0].on_store_down: "deny": namespace "default" has no store (it is local only)`},
		{"policy namespace", `
policies:
  - name: api
    limits: [{limit: 2, window: 1s}]
    namespace: nope
`, `5: policies[0].namespace: "nope": no such namespace (namespaces: default)`},
		{"null list item", `
namespaces:
  - ~
  - name: a
    strategy: memory
    sync_rate: 0
`, `3: namespaces[0]: must not be empty`},
		{"null window size", `
namespaces:
  - name: a
    window_sizes: [1s, null, 1m]
`, `4: namespaces[0].window_sizes[1]: must not be empty`},
		{"explicit tag on a secret", `
node:
  admin_token: !!int s3cretTOK1
`, `3: node.admin_token: the tag !!int does not fit: must be a string`},
		{"explicit tag on a url", `
namespaces:
  - name: a
    strategy: redis
    url: !!timestamp "redis://:pw@h:1"
`, `5: namespaces[0].url: the tag !!timestamp does not fit: must be a string`},
		{"explicit bool tag on a value the decoder refuses", `
headers:
  hide: !!bool yes
`, `3: headers.hide: cannot be read as true or false`},
		{"explicit tag on a duration", `
namespaces:
  - name: a
    strategy: memory
    sync_rate: !!float 1
`, `5: namespaces[0].sync_rate: the tag !!float does not fit: must be a duration like 1s, 1m, 1h`},
		{"every namespace error", `
namespaces:
  - name: api
    strategy: memory
    sync_rate: 500us
    dict: "x|y"
    dict_capacity: -1
`, `5: namespaces[0].sync_rate: "500us": a periodic sync rate (> 0) must be at least 1ms
FILE:6: namespaces[0].dict: "x|y": must not contain '|'
FILE:7: namespaces[0].dict_capacity: "-1": must be >= 0 (0 keeps the dict's bound)`},
		{"every redis option error", `
namespaces:
  - name: api
    strategy: redis
    url: redis://127.0.0.1:1/0
    redis:
      prefix: "{x}"
      shards: -1
      ttl_margin: -1s
`, `7: namespaces[0].redis.prefix: "{x}": must not contain '{' or '}' (they delimit Cluster hash tags)
FILE:8: namespaces[0].redis.shards: "-1": must be 0 (default 16) or 1 to 1024
FILE:9: namespaces[0].redis.ttl_margin: "-1s": must be 0 (default 5s) or at least 1ms`},
		{"every postgres option error", `
namespaces:
  - name: api
    strategy: postgres
    url: postgres://u@127.0.0.1:1/db
    postgres:
      purge_batch: -1
      lane_ttl: -1s
`, `7: namespaces[0].postgres.purge_batch: "-1": must be > 0 (0 means 1000)
FILE:8: namespaces[0].postgres.lane_ttl: "-1s": must be > 0 (0 means 24h)`},
		{"a bad cost and a bad window", `
policies:
  - name: api
    cost: -1
    limits: [{limit: 2, window: 2s}]
`, `4: policies[0].cost: "-1": must be a finite number > 0
FILE:5: policies[0].limits[0].window: "2s": must be one of the window sizes of namespace "default": 1s, 1m, 1h`},
		{"no limits, one error", `
policies:
  - name: api
    limits: ~
`, `4: policies[0].limits: "[]": at least one limit is required`},
		{"a list field's line, not its first item's", `
policies:
  - name: p
    limits:
      - {limit: 1, window: 1s}
      - {limit: 1, window: 1s}
      - {limit: 1, window: 1s}
      - {limit: 1, window: 1s}
      - {limit: 1, window: 1s}
      - {limit: 1, window: 1s}
      - {limit: 1, window: 1s}
      - {limit: 1, window: 1s}
      - {limit: 1, window: 1s}
      - {limit: 1, window: 1s}
      - {limit: 1, window: 1s}
      - {limit: 1, window: 1s}
      - {limit: 1, window: 1s}
      - {limit: 1, window: 1s}
      - {limit: 1, window: 1s}
      - {limit: 1, window: 1s}
      - {limit: 1, window: 1s}
`, `4: policies[0].limits: 17 limits: at most 16`},
		{"an alias's line, not its anchor's", `
node:
  shutdown_timeout: &x 500us
namespaces:
  - name: a
    strategy: memory
    sync_rate: *x
`, `7: namespaces[0].sync_rate: "500us": a periodic sync rate (> 0) must be at least 1ms`},
		{"a field whose value is on the next line", `
namespaces:
  - name: a
    strategy: memory
    sync_rate:
      fast
`, `5: namespaces[0].sync_rate: "fast": must be a duration like 1s, 1m, 1h`},
		{"window size over 100 years", `
namespaces:
  - name: api
    window_sizes: [1s, 2562047h]
`, `4: namespaces[0].window_sizes[1]: "2562047h": must be at most 876000h (100 years)`},
		{"a second document", `
node: {id: x}
---
node: {bogus: 1}
`, `3: a second YAML document: the file must hold one`},
		{"two capacities for one dict", `
namespaces:
  - name: m
    dict: x
    dict_capacity: 5
  - name: m2
    dict: x
    dict_capacity: 7
`, `8: namespaces[1].dict_capacity: "7": namespace "m" (line 5) sets dict "x" to 5; namespaces on one dict must set the same capacity, or leave it out`},
		{"burst on a sliding window", `
policies:
  - name: api
    limits:
      - limit: 10
        window: 1s
        burst: 5
`, `7: policies[0].limits[0].burst: "5": only applies to type token_bucket and leaky_bucket, not sliding`},
		{"burst 0 on a fixed window", `
policies:
  - name: api
    limits:
      - {limit: 10, window: 1s, type: fixed_window, burst: 0}
`, `5: policies[0].limits[0].burst: "0": only applies to type token_bucket and leaky_bucket, not fixed`},
		{"negative burst", `
policies:
  - name: api
    limits:
      - limit: 10
        window: 1m
        type: token_bucket
        burst: -1
`, `8: policies[0].limits[0].burst: "-1": must be a finite number >= 0 (0 means the limit)`},
		{"NaN burst", `
policies:
  - name: api
    limits:
      - {limit: 10, window: 1m, type: leaky_bucket, burst: .nan}
`, `5: policies[0].limits[0].burst: ".nan": must be a number`},
		{"burst above 1e15", `
policies:
  - name: api
    limits:
      - {limit: 10, window: 1m, type: leaky_bucket, burst: 1e16}
`, `5: policies[0].limits[0].burst: "1e16": must be at most 1e+15`},
		{"cost above the burst", `
policies:
  - name: api
    cost: 6
    limits:
      - {limit: 10, window: 1m, type: token_bucket, burst: 5}
`, `4: policies[0].cost: "6": must be at most limits[0].burst (5), the bucket's capacity: a larger cost can never pass`},
		{"cost above the limit of a bucket without burst", `
policies:
  - name: api
    limits:
      - {limit: 100, window: 1m}
      - {limit: 10, window: 1m, type: leaky_bucket}
    cost: 11
`, `7: policies[0].cost: "11": must be at most limits[1].limit (10), the bucket's capacity when burst is 0: a larger cost can never pass`},
		{"unknown type", `
policies:
  - name: api
    limits:
      - {limit: 10, window: 1m, type: leaky}
`, `5: policies[0].limits[0].type: "leaky": must be one of sliding, fixed, anchored, sliding_log, token_bucket, leaky_bucket, sliding_window, fixed_window`},
		{"bucket window not whole milliseconds", `
policies:
  - name: api
    limits:
      - type: token_bucket
        limit: 10
        window: 1500us
`, `7: policies[0].limits[0].window: "1500us": must be whole milliseconds, > 0 and at most 876000h`},
		{"bucket window over 100 years", `
policies:
  - name: api
    limits:
      - {limit: 10, window: 876001h, type: leaky_bucket}
`, `5: policies[0].limits[0].window: "876001h": must be whole milliseconds, > 0 and at most 876000h`},
		{"bucket too slow to refill", `
policies:
  - name: api
    limits:
      - {limit: 1, window: 876000h, type: token_bucket, burst: 2}
`, `5: policies[0].limits[0].burst: "2": must let the bucket refill from empty within 876000h: burst / limit × window is longer`},
		{"bucket with penalty", `
policies:
  - name: api
    penalty: true
    limits:
      - {limit: 10, window: 1m, type: token_bucket}
`, `4: policies[0].penalty: "true": limits[0] is a token_bucket, and a bucket cannot count denied requests: drop penalty, or use a window type`},
		{"one bucket, two rates", `
policies:
  - name: api
    limits:
      - {limit: 10, window: 1m, type: token_bucket, burst: 20}
      - {limit: 20, window: 1m, type: token_bucket}
`, `6: policies[0].limits[1].limit: "20": limits[0] is the same token_bucket with limit 10: bucket limits of one type and window share one bucket, which has one rate`},
		{"every bucket error", `
policies:
  - name: api
    cost: 30
    limits:
      - {limit: 10, window: 1500us, type: token_bucket, burst: 20}
      - {limit: 10, window: 1s, burst: 3}
`, `4: policies[0].cost: "30": must be at most limits[0].burst (20), the bucket's capacity: a larger cost can never pass
FILE:6: policies[0].limits[0].window: "1500us": must be whole milliseconds, > 0 and at most 876000h
FILE:7: policies[0].limits[1].burst: "3": only applies to type token_bucket and leaky_bucket, not sliding`},
		{"precision on a fixed window", `
policies:
  - name: api
    limits:
      - {limit: 10, window: 1m, type: fixed, precision: 1s}
`, `5: policies[0].limits[0].precision: "1s": only applies to type sliding, not fixed`},
		{"precision 0 on an anchored window", `
policies:
  - name: api
    limits:
      - limit: 10
        window: 1m
        type: anchored
        precision: 0s
`, `8: policies[0].limits[0].precision: "0s": only applies to type sliding, not anchored`},
		{"precision not a duration", `
policies:
  - name: api
    limits:
      - {limit: 10, window: 1m, precision: fine}
`, `5: policies[0].limits[0].precision: "fine": must be a duration like 1s, 1m, 1h`},
		{"negative precision", `
policies:
  - name: api
    limits:
      - {limit: 10, window: 1m, precision: -1s}
`, `5: policies[0].limits[0].precision: "-1s": must be whole milliseconds > 0 (0 means the window)`},
		{"precision not dividing the window", `
policies:
  - name: api
    limits:
      - limit: 10
        window: 1m
        precision: 7s
`, `7: policies[0].limits[0].precision: "7s": must divide limits[0].window (1m)`},
		{"too many sub-windows", `
policies:
  - name: api
    limits:
      - {limit: 10, window: 2m, precision: 1s}
`, `5: policies[0].limits[0].precision: "1s": must be at least limits[0].window / 60 (2s): a window slides over at most 60 sub-windows`},
		{"precision not a window size of the namespace", `
policies:
  - name: api
    limits:
      - {limit: 10, window: 1m, precision: 10s}
`, `5: policies[0].limits[0].precision: "10s": must be one of the window sizes of namespace "default": 1s, 1m, 1h`},
		{"precision with penalty", `
policies:
  - name: api
    penalty: true
    limits:
      - {limit: 10, window: 1h, precision: 1m}
`, `6: policies[0].limits[0].precision: "1m": cannot be used with penalty (Kong's penalty counts in its two windows): drop one of them`},
		{"sliding_log in a periodic namespace", `
namespaces:
  - name: api
    strategy: memory
    sync_rate: 1s
policies:
  - name: api
    namespace: api
    limits:
      - {limit: 10, window: 1m, type: sliding_log}
`, `10: policies[0].limits[0].type: "sliding_log": sliding_log is decided as a whole per key, locally or in the store, and cannot sync periodically (namespace "api" syncs every 1s): use sliding_window with precision, or a synchronous or local-only namespace`},
		{"anchored in a periodic namespace", `
namespaces:
  - name: api
    strategy: memory
policies:
  - name: api
    namespace: api
    limits:
      - limit: 10
        window: 1m
        type: anchored
`, `11: policies[0].limits[0].type: "anchored": anchored is decided as a whole per key, locally or in the store, and cannot sync periodically (namespace "api" syncs every 1s): use fixed_window, or a synchronous or local-only namespace`},
		{"sliding_log above 10000", `
policies:
  - name: api
    limits:
      - {limit: 100000, window: 1h, type: sliding_log}
`, `5: policies[0].limits[0].limit: "100000": must be at most 10000 for sliding_log (a log keeps an entry per admitted millisecond): use sliding_window with precision, e.g. precision 1m`},
		{"sliding_log cost too fine", `
policies:
  - name: api
    cost: 0.5
    limits:
      - {limit: 10000, window: 1h, type: sliding_log}
`, `4: policies[0].cost: "0.5": must be at least limits[0].limit / 10000 (1) for sliding_log: a log holds at most 10000 entries per key; use sliding_window with precision for finer costs`},
		{"sliding_log with penalty", `
policies:
  - name: api
    penalty: true
    limits:
      - {limit: 100, window: 1m}
      - {limit: 10, window: 1m, type: sliding_log}
`, `4: policies[0].penalty: "true": limits[1] is sliding_log, and only sliding_window and fixed_window can count denied requests: drop penalty, or use one of them`},
		{"burst on an anchored window", `
policies:
  - name: api
    limits:
      - {limit: 10, window: 1m, type: anchored, burst: 5}
`, `5: policies[0].limits[0].burst: "5": only applies to type token_bucket and leaky_bucket, not anchored`},
		{"anchored window over 100 years", `
policies:
  - name: api
    limits:
      - {limit: 10, window: 876001h, type: anchored}
`, `5: policies[0].limits[0].window: "876001h": must be whole milliseconds, > 0 and at most 876000h`},
		{"cost above an anchored limit", `
policies:
  - name: api
    cost: 4
    limits:
      - {limit: 3, window: 1m, type: anchored}
`, `4: policies[0].cost: "4": must be at most limits[0].limit (3): a larger cost can never pass`},
		{"every anchored, sliding_log and precision error", `
policies:
  - name: api
    limits:
      - {limit: 10, window: 1m, type: fixed, precision: 1s}
      - {limit: 20000, window: 1m, type: sliding_log}
      - {limit: 10, window: 90s, precision: 30s}
      - {limit: 10, window: 1500us, type: anchored}
`, `5: policies[0].limits[0].precision: "1s": only applies to type sliding, not fixed
FILE:6: policies[0].limits[1].limit: "20000": must be at most 10000 for sliding_log (a log keeps an entry per admitted millisecond): use sliding_window with precision, e.g. precision 1s
FILE:7: policies[0].limits[2].precision: "30s": must be one of the window sizes of namespace "default": 1s, 1m, 1h
FILE:8: policies[0].limits[3].window: "1500us": must be whole milliseconds, > 0 and at most 876000h`},
		{"YAML syntax: bad indent in a list item", `
node:
  id: a
namespaces:
  - name: x
   strategy: local
`, `6: invalid YAML: did not find expected '-' indicator`},
		{"YAML syntax: key out of its block", `
node:
  id: a
  listen: 127.0.0.1:1
 log_level: debug
`, `5: invalid YAML: did not find expected key`},
		{"YAML syntax: unclosed flow mapping", `
policies:
  - name: a
    limits:
      - {limit: 1, window: 1s
      - {limit: 2, window: 1m}
`, `5: invalid YAML: did not find expected ',' or '}'`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "node.yaml")
			if err := os.WriteFile(file, []byte(tt.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			_, err := Load([]string{"-config", file, "-listen", "127.0.0.1:0"}, envOf(nil), &logs)
			if want := file + ":" + strings.ReplaceAll(tt.want, "FILE:", file+":"); err == nil || err.Error() != want {
				t.Errorf("error:\n%v\nwant:\n%s", err, want)
			}
			if logs.Len() > 0 {
				t.Errorf("Load wrote before refusing the configuration:\n%s", &logs)
			}
		})
	}
}

// The syntax error line is the faulty line, not the start of the block
// around it.
func TestFaultLine(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want int
	}{
		{"first line", "node: [\n", 1},
		{"bad indent", "a: 1\nb:\n  c: 2\n  d: 3\n e: 4\n", 5},
		{"tab", "node:\n  id: a\n\tlisten: x\n", 3},
		{"unterminated quote", "node:\n  id: a\n  listen: \"abc\n  x: 1\n", 3},
		{"after a flow list over two lines", "w: [1s,\n  1m]\nx: : y\n", 3},
		{"no final newline", "a: 1\nb: [", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := faultLine([]byte(tt.yaml)); got != tt.want {
				t.Errorf("faultLine = %d, want %d", got, tt.want)
			}
		})
	}
}

// An error of the YAML decoder, should one get past the checks before it,
// names a line and quotes no value.
func TestDecodeErrorHasALineAndNoValue(t *testing.T) {
	var v struct {
		A int `yaml:"a"`
	}
	err := yaml.Unmarshal([]byte("b: 1\na: s3cretTOK1\n"), &v)
	got := newSource("node.yaml").decodeError(err, 1).Error()
	if want := "node.yaml:2: cannot unmarshal !!str a value into int"; got != want {
		t.Errorf("decodeError = %q, want %q", got, want)
	}
	got = newSource("node.yaml").decodeError(errors.New("yaml: document contains excessive aliasing"), 1).Error()
	if want := "node.yaml:1: document contains excessive aliasing"; got != want {
		t.Errorf("decodeError = %q, want %q", got, want)
	}
}

// A file whose aliases expand to a great many values is refused before it
// is expanded: 3000 window sizes aliased 3000 times.
func TestAliasBombIsRefused(t *testing.T) {
	var b strings.Builder
	b.WriteString("namespaces:\n  - {name: w, window_sizes: &w [")
	for i := range 3000 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("1s")
	}
	b.WriteString("]}\n")
	for i := range 3000 {
		fmt.Fprintf(&b, "  - {name: n%d, window_sizes: *w}\n", i)
	}
	_, err := Parse("node.yaml", []byte(b.String()), envOf(nil))
	if err == nil || !strings.Contains(err.Error(), "too many values: the file, aliases expanded, has more than 100000") {
		t.Errorf("err = %.300v, want too many values", err)
	}
}

// Walking stops after maxErrors errors.
func TestErrorsAreCapped(t *testing.T) {
	var b strings.Builder
	b.WriteString("namespaces:\n")
	for i := range 500 {
		fmt.Fprintf(&b, "  - {name: n%d, bogus: 1}\n", i)
	}
	_, err := Parse("node.yaml", []byte(b.String()), envOf(nil))
	if err == nil || strings.Count(err.Error(), "\n") != maxErrors || !strings.HasSuffix(err.Error(), "more than 100 errors; stopped") {
		t.Errorf("err = %.300v..., want %d errors and a last line", err, maxErrors)
	}
}

// Flags that give both listeners one address are refused before anything
// starts, like the same in the file.
func TestListenFlagsClash(t *testing.T) {
	tests := []struct {
		name, yaml string
		args       []string
		want       string
	}{
		{"-listen on the gateway's address", "gateway: {upstream: \"http://127.0.0.1:1\", listen: \"127.0.0.1:19101\"}\n",
			[]string{"-listen", "127.0.0.1:19101"}, `-listen "127.0.0.1:19101": must differ from the gateway's listen address`},
		{"-gateway-listen on the default node address", "gateway: {upstream: \"http://127.0.0.1:1\"}\n",
			[]string{"-gateway-listen", DefaultListen}, `-gateway-listen "127.0.0.1:8080": must differ from the node's listen address`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "node.yaml")
			if err := os.WriteFile(file, []byte(tt.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			_, err := Load(append([]string{"-config", file}, tt.args...), envOf(nil), &logs)
			if err == nil || err.Error() != tt.want {
				t.Errorf("error:\n%v\nwant:\n%s", err, tt.want)
			}
			if logs.Len() > 0 {
				t.Errorf("Load wrote before refusing the configuration:\n%s", &logs)
			}
		})
	}
}

// faultLine parses a large file a few times, not once per line: a fault
// deep in 5500 lines is found.
func TestFaultLineInALargeFile(t *testing.T) {
	var b strings.Builder
	b.WriteString("policies:\n  - name: p\n    limits:\n")
	for range 5500 {
		b.WriteString("      - {limit: 1, window: 1s}\n")
	}
	b.WriteString("     bad: 1\n")
	for range 100 {
		b.WriteString("      - {limit: 1, window: 1s}\n")
	}
	data := []byte(b.String())
	if len(data) > 256<<10 {
		t.Fatalf("the file is %d bytes: keep it within maxFaultSearch", len(data))
	}
	_, err := Parse("node.yaml", data, envOf(nil))
	if err == nil || !strings.HasPrefix(err.Error(), "node.yaml:5504: invalid YAML:") {
		t.Errorf("err = %v, want node.yaml:5504: invalid YAML: ...", err)
	}
}
