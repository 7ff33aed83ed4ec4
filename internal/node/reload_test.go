package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/arith"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratesync/ratesync/internal/node/config"
	"github.com/ratesync/ratesync/internal/testenv"
	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
	"github.com/ratesync/ratesync/strategy/redis"
)

// lockedBuffer is a log destination tests read while the node writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// reloadNode is a node built from a config file that reloads it.
type reloadNode struct {
	*Node
	file string
	logs *lockedBuffer
}

// newReloadNode writes yaml to node.yaml in a temporary directory and
// builds a node of it, as run does (flags, file, environment), that
// reloads the same way. Its logs go to the test's output and to logs.
func newReloadNode(t *testing.T, yaml string, env map[string]string, opts ...ratelimiting.Option) *reloadNode {
	t.Helper()
	file := filepath.Join(t.TempDir(), "node.yaml")
	writeFile(t, file, yaml)
	args := []string{"-config", file}
	cfg, err := config.Load(args, envOf(env), io.Discard)
	if err != nil {
		t.Fatalf("config.Load: %v", err)
	}
	logs := &lockedBuffer{}
	log := slog.New(slog.NewTextHandler(io.MultiWriter(t.Output(), logs), &slog.HandlerOptions{Level: slog.LevelDebug}))
	n, err := newNode(context.Background(), cfg, log, opts...)
	if err != nil {
		t.Fatalf("newNode: %v", err)
	}
	n.load = func() (config.Config, error) { return config.Load(args, envOf(env), io.Discard) }
	t.Cleanup(func() { _ = n.close(context.Background()) })
	return &reloadNode{Node: n, file: file, logs: logs}
}

func writeFile(t *testing.T, name, data string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// rewrite writes yaml to the node's file and reloads it, failing the test
// when the reload fails.
func (n *reloadNode) rewrite(t *testing.T, yaml string) {
	t.Helper()
	writeFile(t, n.file, yaml)
	if err := n.reload(context.Background(), "test"); err != nil {
		t.Fatalf("reload: %v", err)
	}
}

// checkJSON is the answer of /v1/check.
type checkJSON struct {
	Allowed bool `json:"allowed"`
	Limits  []struct {
		Limit     float64 `json:"limit"`
		Window    string  `json:"window"`
		Remaining float64 `json:"remaining"`
	} `json:"limits"`
}

// check posts body to /v1/check and decodes a 200 or 429 answer.
func (n *reloadNode) check(t *testing.T, body string) checkJSON {
	t.Helper()
	w := do(n.api, "POST", "/v1/check", body)
	if w.Code != 200 && w.Code != 429 {
		t.Fatalf("check %s: status %d: %s", body, w.Code, w.Body)
	}
	var out checkJSON
	if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
		t.Fatalf("check %s: %v: %s", body, err, w.Body)
	}
	return out
}

var reloadsRE = regexp.MustCompile(`(?m)^ratesync_config_reloads_total\{result="(ok|error)"\} (\d+)$`)

// reloads returns the node's ratesync_config_reloads_total by result.
func reloads(t *testing.T, n *Node) map[string]int {
	t.Helper()
	w := do(n.api, "GET", "/metrics", "")
	out := map[string]int{}
	for _, m := range reloadsRE.FindAllStringSubmatch(w.Body.String(), -1) {
		out[m[1]], _ = strconv.Atoi(m[2])
	}
	if len(out) != 2 || !strings.Contains(w.Body.String(), "ratesync_config_last_reload_success_timestamp_seconds ") {
		t.Fatalf("reload metrics missing from /metrics:\n%s", w.Body)
	}
	return out
}

func TestReloadPolicyLimitKeepsCounts(t *testing.T) {
	clock := newTestClock(time.Now())
	const before = `
namespaces:
  - {name: default, window_sizes: [1m]}
policies:
  - name: login
    limits: [{limit: 3, window: 1m}]
`
	n := newReloadNode(t, before, nil, clock.option())
	for i := range 2 {
		if got := n.check(t, `{"policy":"login","key":"u1"}`); !got.Allowed || got.Limits[0].Remaining != float64(2-i) {
			t.Fatalf("request %d: %+v", i+1, got)
		}
	}
	n.rewrite(t, strings.Replace(before, "limit: 3", "limit: 5", 1))
	got := n.check(t, `{"policy":"login","key":"u1"}`)
	if !got.Allowed || got.Limits[0].Limit != 5 || got.Limits[0].Remaining != 2 {
		t.Fatalf("after the reload: %+v, want limit 5 with 2 remaining (the 2 hits before it kept)", got)
	}
	for range 2 {
		n.check(t, `{"policy":"login","key":"u1"}`)
	}
	if got := n.check(t, `{"policy":"login","key":"u1"}`); got.Allowed {
		t.Errorf("a sixth request under limit 5: %+v", got)
	}
	if r := reloads(t, n.Node); r["ok"] != 1 || r["error"] != 0 {
		t.Errorf("reloads %v, want ok 1", r)
	}
	if logs := n.logs.String(); !strings.Contains(logs, `msg="configuration reloaded" trigger=test policies_updated=login`) {
		t.Errorf("no reload line naming the policy:\n%s", logs)
	}
}

// A namespace added by a reload gets its store (opened then), and one
// removed is gone, with the policies that used it.
func TestReloadAddsAndRemovesNamespaces(t *testing.T) {
	r := testenv.NewRedis(t)
	env := map[string]string{config.EnvRedisURL: r.URL}
	n := newReloadNode(t, `
namespaces:
  - {name: old, window_sizes: [1m]}
policies:
  - {name: p, namespace: old, limits: [{limit: 5, window: 1m}]}
`, env)
	n.check(t, `{"policy":"p","key":"k"}`)
	n.rewrite(t, fmt.Sprintf(`
namespaces:
  - name: new
    strategy: redis
    sync_rate: 1h
    window_sizes: [1h]
    redis: {prefix: %s}
policies:
  - {name: q, namespace: new, limits: [{limit: 5, window: 1h}]}
`, r.Prefix))
	if got := n.check(t, `{"policy":"q","key":"k"}`); !got.Allowed || got.Limits[0].Remaining != 4 {
		t.Fatalf("the new namespace's policy: %+v", got)
	}
	for _, body := range []string{`{"policy":"p","key":"k"}`, `{"namespace":"old","key":"k","limits":[{"limit":5,"window":"1m"}]}`} {
		if w := do(n.api, "POST", "/v1/check", body); w.Code != 404 {
			t.Errorf("%s after its removal: status %d, want 404: %s", body, w.Code, w.Body)
		}
	}
	var names []string
	for _, nc := range n.in.Namespaces() {
		names = append(names, nc.Name)
	}
	if len(names) != 1 || names[0] != "new" {
		t.Errorf("namespaces %v, want [new]", names)
	}
	// The new namespace syncs with the store the reload opened.
	if w := do(n.api, "POST", "/v1/namespaces/new/sync", ""); w.Code != 200 {
		t.Fatalf("sync: %d %s", w.Code, w.Body)
	}
	store, err := redis.New(r.Client(t), redis.Config{Prefix: r.Prefix})
	if err != nil {
		t.Fatal(err)
	}
	start := arith.WindowStart(time.Now(), time.Hour)
	if c, err := store.GetWindow(context.Background(), "new", "k", start, time.Hour); err != nil || c != 1 {
		t.Errorf("the store holds %v hits (err %v), want 1", c, err)
	}
	logs := n.logs.String()
	if !strings.Contains(logs, "namespaces_added=new namespaces_removed=old policies_added=q policies_removed=p") {
		t.Errorf("the reload line does not name the changes:\n%s", logs)
	}
}

// Changing a namespace's sync rate and window sizes goes through
// Instance.Update: the counts of the sizes kept stay, on a Redis namespace
// and a local one.
func TestReloadUpdatesNamespaceKeepingCounts(t *testing.T) {
	r := testenv.NewRedis(t)
	env := map[string]string{config.EnvRedisURL: r.URL}
	clock := newTestClock(time.Now()) // frozen; the namespace counts on it (clock: node)
	cfg := func(rate, sizes string) string {
		return fmt.Sprintf(`
namespaces:
  - name: api
    strategy: redis
    sync_rate: %s
    window_sizes: %s
    clock: node
    redis: {prefix: %s}
  - name: loc
    window_sizes: %s
`, rate, sizes, r.Prefix, sizes)
	}
	n := newReloadNode(t, cfg("1s", "[1m]"), env, clock.option())
	body := func(ns, window string) string {
		return fmt.Sprintf(`{"namespace":%q,"key":"k","limits":[{"limit":10,"window":%q}]}`, ns, window)
	}
	for range 3 {
		n.check(t, body("api", "1m"))
		n.check(t, body("loc", "1m"))
	}
	n.rewrite(t, cfg("200ms", "[1m, 1h]"))
	for _, ns := range []string{"api", "loc"} {
		if got := n.check(t, body(ns, "1m")); got.Limits[0].Remaining != 6 {
			t.Errorf("%s 1m after the reload: %+v, want 6 remaining (3 hits kept)", ns, got)
		}
		if got := n.check(t, body(ns, "1h")); got.Limits[0].Remaining != 9 {
			t.Errorf("%s 1h, a size the reload added: %+v, want 9 remaining", ns, got)
		}
	}
	for _, nc := range n.in.Namespaces() {
		if nc.Name == "api" && (nc.SyncRate != 200*time.Millisecond || len(nc.WindowSizes) != 2) {
			t.Errorf("namespace api after the reload: %+v", nc)
		}
	}
	if logs := n.logs.String(); !strings.Contains(logs, "namespaces_updated=api,loc") {
		t.Errorf("the reload line does not name the updated namespaces:\n%s", logs)
	}
}

// A reload that changes leases or store_down updates the namespace in
// place: the instance decides with them from then on, counts kept.
func TestReloadLeasesAndStoreDown(t *testing.T) {
	cfg := func(fields string) string {
		return fmt.Sprintf(`
namespaces:
  - name: api
    strategy: memory
    window_sizes: [1m]
    clock: node
%s`, fields)
	}
	clock := newTestClock(time.Now()) // frozen: the counts stay in one window
	n := newReloadNode(t, cfg(""), nil, clock.option())
	body := `{"namespace":"api","key":"k","limits":[{"limit":10,"window":"1m"}]}`
	tests := []struct {
		name, fields string
		leases       bool
		storeDown    namespace.StoreDown
	}{
		{"leased", "    leases: true\n", true, namespace.StoreDownShare},
		{"leased, store_down local", "    leases: true\n    store_down: local\n", true, namespace.StoreDownLocal},
		{"synchronous, store_down deny", "    sync_rate: 0\n    store_down: deny\n", false, namespace.StoreDownDeny},
		{"periodic", "", false, namespace.StoreDownShare},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n.check(t, body)
			n.rewrite(t, cfg(tt.fields))
			for _, nc := range n.in.Namespaces() {
				if nc.Name == "api" && (nc.Leases != tt.leases || nc.StoreDown != tt.storeDown) {
					t.Errorf("namespace api after the reload: Leases %v, StoreDown %v; want %v, %v", nc.Leases, nc.StoreDown, tt.leases, tt.storeDown)
				}
			}
			if got := n.check(t, body); !got.Allowed || got.Limits[0].Remaining != float64(8-2*i) {
				t.Errorf("after the reload: %+v, want %d remaining (the hits before it kept)", got, 8-2*i)
			}
		})
	}
	if logs := n.logs.String(); strings.Count(logs, "namespaces_updated=api") != len(tests) {
		t.Errorf("want %d reload lines naming namespace api:\n%s", len(tests), logs)
	}
}

// A file that does not load keeps the running configuration: the error
// names file:line, is logged at ERROR and counted.
func TestReloadBadFileKeepsConfig(t *testing.T) {
	dir := t.TempDir()
	rlsFile := filepath.Join(dir, "rls.yaml")
	const rules = "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 2}\n"
	writeFile(t, rlsFile, rules)
	good := `
namespaces:
  - {name: default, window_sizes: [1m]}
policies:
  - name: login
    limits: [{limit: 3, window: 1m}]
rls:
  config: ` + rlsFile + `
  listen: 127.0.0.1:0
`
	n := newReloadNode(t, good, nil)
	n.check(t, `{"policy":"login","key":"u"}`)
	tests := []struct {
		name, file, rls string
		want            *regexp.Regexp
	}{
		{"yaml", good + "  : [\n", rules, regexp.MustCompile(`node\.yaml:1\d: `)},
		{"validation", strings.Replace(good, "limit: 3", "limit: -3", 1), rules, regexp.MustCompile(`node\.yaml:6: policies\[0\]\.limits\[0\]\.limit`)},
		{"unknown field", strings.Replace(good, "policies:", "policy:", 1), rules, regexp.MustCompile(`node\.yaml:4: policy`)},
		{"rls rules", good, strings.Replace(rules, "unit: minute", "unit: fortnight", 1), regexp.MustCompile(`rls\.yaml:4: `)},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			writeFile(t, n.file, tt.file)
			writeFile(t, rlsFile, tt.rls)
			err := n.reload(context.Background(), "test")
			if err == nil || !tt.want.MatchString(err.Error()) {
				t.Fatalf("reload: %v, want an error matching %s", err, tt.want)
			}
			if r := reloads(t, n.Node); r["error"] != i+1 || r["ok"] != 0 {
				t.Errorf("reloads %v, want error %d", r, i+1)
			}
			line := ""
			for l := range strings.Lines(n.logs.String()) {
				if strings.Contains(l, "configuration reload failed") {
					line = l
				}
			}
			if !strings.Contains(line, "level=ERROR") || !tt.want.MatchString(line) {
				t.Errorf("the error log line %q does not name file:line", line)
			}
			if got := n.check(t, `{"policy":"login","key":"u"}`); got.Limits[0].Limit != 3 {
				t.Errorf("the running policy after a failed reload: %+v", got)
			}
			if got := n.rls.Config().Domains(); len(got) != 1 || got[0] != "edge" {
				t.Errorf("rls domains %v after a failed reload", got)
			}
		})
	}
	// Back to a good file: applied, and counted.
	writeFile(t, rlsFile, rules)
	n.rewrite(t, strings.Replace(good, "limit: 3", "limit: 9", 1))
	if got := n.check(t, `{"policy":"login","key":"u"}`); got.Limits[0].Limit != 9 {
		t.Errorf("after a good reload: %+v", got)
	}
}

// Settings that need a restart keep their running values and are named in
// a WARN line; the rest of the file applies.
func TestReloadKeepsRestartSettings(t *testing.T) {
	n := newReloadNode(t, `
node: {id: one, log_format: text}
policies:
  - {name: p, limits: [{limit: 3, window: 1m}]}
`, nil)
	n.rewrite(t, `
node: {id: two, log_format: json, listen: 127.0.0.1:9999, max_key_bytes: 8}
policies:
  - {name: p, limits: [{limit: 4, window: 1m}]}
gateway:
  upstream: http://127.0.0.1:1
  routes: [{path: /, policy: p}]
`)
	cfg := n.state().cfg
	if cfg.Node.ID != "one" || cfg.Node.LogFormat != "text" || cfg.Node.Listen != config.DefaultListen || cfg.Gateway != nil {
		t.Errorf("settings that need a restart changed: %+v, gateway %v", cfg.Node, cfg.Gateway)
	}
	if cfg.Node.MaxKeyBytes != 8 {
		t.Errorf("node.max_key_bytes %d, want 8", cfg.Node.MaxKeyBytes)
	}
	if w := do(n.api, "POST", "/v1/check", `{"policy":"p","key":"123456789"}`); w.Code != 400 {
		t.Errorf("a 9-byte key after max_key_bytes 8: status %d", w.Code)
	}
	if got := n.check(t, `{"policy":"p","key":"k"}`); got.Limits[0].Limit != 4 {
		t.Errorf("policy after the reload: %+v", got)
	}
	logs := n.logs.String()
	for _, f := range []string{"node.id", "node.listen", "node.log_format", `"gateway (section added)"`} {
		if !strings.Contains(logs, "level=WARN msg=\"configuration reload: this setting needs a restart; the running value is kept\" field="+f) {
			t.Errorf("no WARN naming %s:\n%s", f, logs)
		}
	}
	if r := reloads(t, n.Node); r["ok"] != 1 {
		t.Errorf("reloads %v, want ok 1", r)
	}
}

// The gateway's routes follow the file: a new route limits its path with
// its policy.
func TestReloadGatewayRoutes(t *testing.T) {
	up := newUpstream(t)
	yaml := func(routes string) string {
		return `
policies:
  - {name: one, limits: [{limit: 1, window: 1m}]}
  - {name: two, limits: [{limit: 3, window: 1m}]}
gateway:
  upstream: ` + up.srv.URL + `
  routes:
` + routes
	}
	n := newReloadNode(t, yaml("    - {path: /a, policy: one}\n"), nil)
	get := func(path string) int { return do(n.gateway, "GET", path, "").Code }
	if a1, a2, b1 := get("/a"), get("/a"), get("/b"); a1 != 200 || a2 != 429 || b1 != 200 {
		t.Fatalf("before the reload: /a %d then %d, /b %d", a1, a2, b1)
	}
	n.rewrite(t, yaml("    - {path: /a, policy: one}\n    - {path: /b, policy: two}\n"))
	if codes := []int{get("/b"), get("/b"), get("/b"), get("/a")}; codes[0] != 200 || codes[1] != 200 || codes[2] != 429 || codes[3] != 429 {
		t.Errorf("after the reload: /b %v, /a %d", codes[:3], codes[3])
	}
	if logs := n.logs.String(); !strings.Contains(logs, "routes=updated") {
		t.Errorf("the reload line does not name the routes:\n%s", logs)
	}
}

// Reloads while requests run: every request is answered by one
// configuration or the other, and no count is lost (run with -race).
func TestReloadWithRequestsInFlight(t *testing.T) {
	clock := newTestClock(time.Now())
	yaml := func(limit int) string {
		return fmt.Sprintf(`
namespaces:
  - {name: default, window_sizes: [1m]}
policies:
  - {name: p, limits: [{limit: %d, window: 1m}]}
`, limit)
	}
	n := newReloadNode(t, yaml(1000000), nil, clock.option())
	const workers, each = 8, 200
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				w := do(n.api, "POST", "/v1/check", `{"policy":"p","key":"k"}`)
				if w.Code != 200 {
					t.Errorf("status %d: %s", w.Code, w.Body)
					return
				}
			}
		})
	}
	for i := range 20 {
		n.rewrite(t, yaml(1000000+i%2))
	}
	wg.Wait()
	got := n.check(t, `{"policy":"p","key":"k"}`)
	if used := got.Limits[0].Limit - got.Limits[0].Remaining; used != workers*each+1 {
		t.Errorf("the key holds %v hits, want %d", used, workers*each+1)
	}
}

// A namespace whose store settings change gets the new store, through
// Update: its counts stay, and the next push goes to the new store.
func TestReloadMovesNamespaceToAnotherStore(t *testing.T) {
	r := testenv.NewRedis(t)
	env := map[string]string{config.EnvRedisURL: r.URL}
	yaml := func(prefix string) string {
		return fmt.Sprintf(`
namespaces:
  - {name: api, strategy: redis, sync_rate: 1h, window_sizes: [1h], redis: {prefix: %s}}
`, prefix)
	}
	n := newReloadNode(t, yaml(r.Prefix+"-a"), env)
	body := `{"namespace":"api","key":"k","limits":[{"limit":10,"window":"1h"}]}`
	n.check(t, body)
	n.rewrite(t, yaml(r.Prefix+"-b"))
	if got := n.check(t, body); got.Limits[0].Remaining != 8 {
		t.Errorf("after the store changed: %+v, want 8 remaining (the hit before kept)", got)
	}
	if w := do(n.api, "POST", "/v1/namespaces/api/sync", ""); w.Code != 200 {
		t.Fatalf("sync: %d %s", w.Code, w.Body)
	}
	start := arith.WindowStart(time.Now(), time.Hour)
	for prefix, want := range map[string]float64{r.Prefix + "-a": 0, r.Prefix + "-b": 2} {
		store, err := redis.New(r.Client(t), redis.Config{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		if c, err := store.GetWindow(context.Background(), "api", "k", start, time.Hour); err != nil || c != want {
			t.Errorf("store %s holds %v hits (err %v), want %v", prefix, c, err, want)
		}
	}
}

// The rls section's rules and response_headers follow the file.
func TestReloadRLSRulesAndHeaders(t *testing.T) {
	dir := t.TempDir()
	rulesFile := filepath.Join(dir, "edge.yaml")
	rules := func(limit int) string {
		return fmt.Sprintf("domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: %d}\n", limit)
	}
	writeFile(t, rulesFile, rules(2))
	yaml := func(headers bool) string {
		return fmt.Sprintf("rls:\n  config: %s\n  listen: 127.0.0.1:0\n  response_headers: %v\n", rulesFile, headers)
	}
	n := newReloadNode(t, yaml(false), nil)
	ask := func() *pb.RateLimitResponse {
		t.Helper()
		resp, err := n.rls.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", "u")}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if resp := ask(); resp.Statuses[0].CurrentLimit.RequestsPerUnit != 2 || len(resp.ResponseHeadersToAdd) != 0 {
		t.Fatalf("before the reload: %v", resp)
	}
	writeFile(t, rulesFile, rules(7))
	n.rewrite(t, yaml(true))
	resp := ask()
	if st := resp.Statuses[0]; st.CurrentLimit.RequestsPerUnit != 7 || st.LimitRemaining != 5 || len(resp.ResponseHeadersToAdd) == 0 {
		t.Errorf("after the reload: %v, want limit 7, 5 remaining, headers", resp)
	}
	if logs := n.logs.String(); !strings.Contains(logs, "rls_domains=edge settings=rls.response_headers") {
		t.Errorf("the reload line does not name the rls changes:\n%s", logs)
	}
}

// node.gc_heap_floor follows the file, and with GOGC in the environment
// the node leaves the collector alone.
func TestReloadHeapFloor(t *testing.T) {
	was := gcTuner().Floor()
	t.Cleanup(func() { gcTuner().Set(was) })
	n := newReloadNode(t, "node: {gc_heap_floor: 100000000}\n", nil)
	var set []int64
	n.heapFloor = func(b int64) { set = append(set, b) }
	n.rewrite(t, "node: {gc_heap_floor: 0}\n")
	if !slices.Equal(set, []int64{0}) {
		t.Errorf("floors set by the reload: %v, want [0]", set)
	}
	if !strings.Contains(n.logs.String(), "node.gc_heap_floor") {
		t.Errorf("the reload's log line does not name node.gc_heap_floor:\n%s", n.logs)
	}

	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	heapFloor(envOf(nil), log)(96 << 20)
	if f := gcTuner().Floor(); f != 96<<20 {
		t.Errorf("floor %d after setting 96 MiB", f)
	}
	heapFloor(envOf(map[string]string{"GOGC": "200"}), log)(32 << 20)
	if f := gcTuner().Floor(); f != 96<<20 {
		t.Errorf("floor %d after setting 32 MiB with GOGC=200: want it untouched", f)
	}
	if !strings.Contains(logs.String(), `msg="node.gc_heap_floor not applied: GOGC is set" GOGC=200`) {
		t.Errorf("no line saying GOGC stands:\n%s", logs.String())
	}
}
