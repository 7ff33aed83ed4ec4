package node

import (
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
)

// unreachableYAML has a Redis namespace whose server refuses connections.
const unreachableYAML = `
namespaces:
  - name: default
  - name: remote
    strategy: redis
    url: redis://:hunter22@127.0.0.1:1/0
    sync_rate: 1s
    window_sizes: [1m]
    redis: {timeout: 200ms}
policies:
  - name: strict
    namespace: remote
    on_store_down: deny
    limits: [{limit: 50, window: 1m}]
  - name: lenient
    namespace: remote
    limits: [{limit: 50, window: 1m}]
`

func TestNamespacesEndpoint(t *testing.T) {
	n := newTestNode(t, unreachableYAML, nil)
	w := do(n.api, "GET", "/v1/namespaces", "")
	if w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	body := w.Body.String()
	if strings.Contains(body, "hunter22") || !strings.Contains(body, `redis://:xxxxx@127.0.0.1:1/0`) {
		t.Errorf("secret not masked: %s", body)
	}
	var got struct {
		Namespaces []struct {
			Name        string   `json:"name"`
			Strategy    string   `json:"strategy"`
			SyncRate    string   `json:"sync_rate"`
			WindowSizes []string `json:"window_sizes"`
			Policies    []string `json:"policies"`
		} `json:"namespaces"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Namespaces) != 2 || got.Namespaces[1].Strategy != "redis" || got.Namespaces[1].SyncRate != "1s" ||
		strings.Join(got.Namespaces[1].WindowSizes, ",") != "1m" || strings.Join(got.Namespaces[1].Policies, ",") != "lenient,strict" {
		t.Errorf("namespaces = %+v", got)
	}
}

func TestSyncEndpoint(t *testing.T) {
	tests := []struct {
		name       string
		yaml       string
		hit        string // a /v1/check body sent first
		target     string
		auth       string
		wantStatus int
		wantBody   string
	}{
		{"local namespace", "", "", "/v1/namespaces/default/sync", "", 200, `"synced":false`},
		{"memory namespace", apiYAML, "", "/v1/namespaces/shared/sync", "", 200, `"synced":true`},
		{"unknown namespace", "", "", "/v1/namespaces/nope/sync", "", 404, `namespace \"nope\"`},
		{"store down", unreachableYAML, `{"policy":"lenient","key":"k"}`, "/v1/namespaces/remote/sync", "", 503, "sync failed"},
		{"token: missing", "node: {admin_token: s3cr3t}", "", "/v1/namespaces/default/sync", "", 401, "Bearer"},
		{"token: wrong", "node: {admin_token: s3cr3t}", "", "/v1/namespaces/default/sync", "Bearer nope", 401, "Bearer"},
		{"token: right", "node: {admin_token: s3cr3t}", "", "/v1/namespaces/default/sync", "Bearer s3cr3t", 200, `"namespace":"default"`},
		{"token: wrong scheme", "node: {admin_token: s3cr3t}", "", "/v1/namespaces/default/sync", "Basic s3cr3t", 401, "Bearer"},
		{"no token beyond loopback", "node: {listen: '0.0.0.0:8080'}", "", "/v1/namespaces/default/sync", "", 403, "admin_token"},
		{"token beyond loopback", "node: {listen: '0.0.0.0:8080', admin_token: s3cr3t}", "", "/v1/namespaces/default/sync", "Bearer s3cr3t", 200, `"synced":false`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newTestNode(t, tt.yaml, nil)
			if tt.hit != "" {
				do(n.api, "POST", "/v1/check", tt.hit)
			}
			w := do(n.api, "POST", tt.target, "", "Authorization", tt.auth)
			if w.Code != tt.wantStatus || !strings.Contains(w.Body.String(), tt.wantBody) {
				t.Fatalf("status %d body %s; want %d with %q", w.Code, w.Body, tt.wantStatus, tt.wantBody)
			}
			if strings.Contains(w.Body.String(), "hunter22") {
				t.Errorf("secret in the answer: %s", w.Body)
			}
			if w.Code >= 400 {
				problemOfBody(t, w)
			}
			if w.Code == 401 && w.Header().Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
	n := newTestNode(t, "", nil)
	if w := do(n.api, "GET", "/v1/namespaces/default/sync", ""); w.Code != 405 {
		t.Errorf("GET sync: %d", w.Code)
	}
}

func TestHealth(t *testing.T) {
	t.Run("healthy local node", func(t *testing.T) {
		n := newTestNode(t, apiYAML, nil)
		if w := do(n.api, "GET", "/healthz", ""); w.Code != 200 || !strings.Contains(w.Body.String(), "alive") {
			t.Errorf("healthz: %d %s", w.Code, w.Body)
		}
		if w := do(n.api, "GET", "/readyz", ""); w.Code != 200 || !strings.Contains(w.Body.String(), `"status":"ready"`) {
			t.Errorf("readyz: %d %s", w.Code, w.Body)
		}
		n.closing.Store(true)
		if w := do(n.api, "GET", "/readyz", ""); w.Code != 503 || !strings.Contains(w.Body.String(), "shutting down") {
			t.Errorf("readyz while closing: %d %s", w.Code, w.Body)
		}
	})
	t.Run("store unreachable", func(t *testing.T) {
		n := newTestNode(t, unreachableYAML, nil)
		w := do(n.api, "GET", "/readyz", "")
		if w.Code != 503 {
			t.Fatalf("readyz: %d %s", w.Code, w.Body)
		}
		var got struct {
			Namespaces []readiness `json:"namespaces"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		if len(got.Namespaces) != 2 || !got.Namespaces[0].Ready || got.Namespaces[1].Ready ||
			got.Namespaces[1].Namespace != "remote" || !strings.HasPrefix(got.Namespaces[1].Reason, "store redis at redis://:xxxxx@127.0.0.1:1/0 unreachable") {
			t.Errorf("readiness %+v", got.Namespaces)
		}
		if strings.Contains(w.Body.String(), "hunter22") {
			t.Errorf("secret in /readyz: %s", w.Body)
		}
		if w := do(n.api, "GET", "/healthz", ""); w.Code != 200 {
			t.Errorf("healthz: %d", w.Code)
		}
	})
}

func TestJudge(t *testing.T) {
	n := newTestNode(t, "", nil)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	periodic := namespace.Config{Name: "p", SyncRate: time.Second}
	tests := []struct {
		name       string
		st         ratelimiting.NamespaceStats
		wantReady  bool
		wantReason string
	}{
		{"local", ratelimiting.NamespaceStats{Config: namespace.Config{Name: "l", SyncRate: -1}}, true, ""},
		{"synchronous, up", ratelimiting.NamespaceStats{Config: namespace.Config{Name: "s"}, Sync: ratelimiting.SyncStats{StoreUp: true}}, true, ""},
		{"synchronous, down", ratelimiting.NamespaceStats{Config: namespace.Config{Name: "s"}, Sync: ratelimiting.SyncStats{LastError: errors.New("refused"), LastErrorAt: now}}, false, "store unreachable since 2030-01-01T00:00:00Z: refused"},
		{"periodic, fresh", ratelimiting.NamespaceStats{Config: periodic, Sync: ratelimiting.SyncStats{StoreUp: true, LastGood: now.Add(-2 * time.Second)}}, true, ""},
		{"periodic, stale", ratelimiting.NamespaceStats{Config: periodic, Sync: ratelimiting.SyncStats{StoreUp: true, LastGood: now.Add(-4 * time.Second)}}, false, "last good sync 4s ago, more than 3 × sync_rate (1s)"},
		{"periodic, never synced", ratelimiting.NamespaceStats{Config: periodic, Sync: ratelimiting.SyncStats{StoreUp: true}}, false, "no successful sync yet"},
	}
	t.Run("probe failed", func(t *testing.T) {
		r := n.judge(ratelimiting.NamespaceStats{Config: periodic, Sync: ratelimiting.SyncStats{StoreUp: true, LastGood: now}}, now, errors.New("dial: refused"))
		if r.Ready || r.Reason != "store unreachable: dial: refused" {
			t.Errorf("judge = %+v", r)
		}
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := n.judge(tt.st, now, nil)
			if r.Ready != tt.wantReady || r.Reason != tt.wantReason {
				t.Errorf("judge = %+v, want ready %v reason %q", r, tt.wantReady, tt.wantReason)
			}
		})
	}
}

func TestStoreDownPolicies(t *testing.T) {
	n := newTestNode(t, unreachableYAML, nil)
	// The store is found down by an exchange: a sync with a diff to push.
	do(n.api, "POST", "/v1/check", `{"policy":"lenient","key":"k"}`)
	if w := do(n.api, "POST", "/v1/namespaces/remote/sync", ""); w.Code != 503 {
		t.Fatalf("sync: %d %s", w.Code, w.Body)
	}
	waitFor(t, 5*time.Second, "strict policy refuses", func() bool {
		return do(n.api, "POST", "/v1/check", `{"policy":"strict","key":"s"}`).Code == http.StatusServiceUnavailable
	})
	tests := []struct {
		body       string
		wantStatus int
	}{
		{`{"policy":"strict","key":"s"}`, http.StatusServiceUnavailable},
		{`{"policy":"lenient","key":"k"}`, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.body, func(t *testing.T) {
			w := do(n.api, "POST", "/v1/check", tt.body)
			if w.Code != tt.wantStatus {
				t.Fatalf("status %d, want %d: %s", w.Code, tt.wantStatus, w.Body)
			}
			if w.Code == http.StatusServiceUnavailable {
				if p := problemOfBody(t, w); !strings.Contains(p.Detail, "store unreachable") || w.Header().Get("Retry-After") == "" {
					t.Errorf("problem %+v, Retry-After %q", p, w.Header().Get("Retry-After"))
				}
			}
		})
	}
}

func TestMetrics(t *testing.T) {
	n := newTestNode(t, apiYAML, nil)
	do(n.api, "POST", "/v1/check", `{"key":"k","limits":[{"limit":1,"window":"1s"}]}`)
	do(n.api, "POST", "/v1/check", `{"key":"k","limits":[{"limit":1,"window":"1s"}]}`)
	do(n.api, "POST", "/v1/check", `{"policy":"heavy","key":"k"}`)
	do(n.api, "POST", "/v1/namespaces/shared/sync", "")
	w := do(n.api, "GET", "/metrics", "")
	if w.Code != 200 {
		t.Fatalf("metrics: %d", w.Code)
	}
	body := w.Body.String()
	for _, want := range []string{
		`ratesync_decisions_total{namespace="default",policy="",result="allowed"} 1`,
		`ratesync_decisions_total{namespace="default",policy="",result="denied"} 1`,
		`ratesync_decisions_total{namespace="shared",policy="heavy",result="allowed"} 1`,
		`ratesync_sync_duration_seconds_bucket{namespace="shared",op="sync",result="ok",le="+Inf"}`,
		`ratesync_pushes_total{namespace="shared"} 1`,
		`ratesync_push_errors_total{namespace="shared"} 0`,
		`ratesync_batches_in_flight{namespace="shared"} 0`,
		`ratesync_diffs_in_flight{namespace="shared"} 0`,
		`ratesync_diffs_pending{namespace="shared"} 0`,
		`ratesync_late_diffs_dropped_total{namespace="shared"} 0`,
		`ratesync_store_up{namespace="shared"} 1`,
		`ratesync_clock_offset_seconds{namespace="shared"} 0`, // an in-process store: its clock is the node's
		`ratesync_dict_entries{dict="default"}`,
		`ratesync_dict_evictions_total{dict="default"} 0`,
		`ratesync_dict_overflows_total{dict="default"} 0`,
		`go_goroutines`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(body, `ratesync_store_up{namespace="default"}`) {
		t.Error("store_up reported for a local namespace")
	}
}

// /metrics exports a leased namespace's lease figures, read from Stats at
// scrape time: the node decides most requests from what the store granted
// it, so it calls the store less often than it decides. Namespaces that
// are not leased have no lease series, and a local one no store_nodes.
func TestLeaseMetrics(t *testing.T) {
	clock := newTestClock(time.Now()) // frozen: every request in one window
	n := newTestNode(t, `
namespaces:
  - name: default
  - name: leased
    strategy: memory
    sync_rate: 1s
    window_sizes: [1m]
    clock: node
    leases: true
  - name: periodic
    strategy: memory
    window_sizes: [1m]
    clock: node
`, nil, clock.option())
	const decisions = 30
	for i := range decisions {
		w := do(n.api, "POST", "/v1/check", `{"namespace":"leased","key":"k","limits":[{"limit":25,"window":"1m"}]}`)
		if want := map[bool]int{true: 200, false: 429}[i < 25]; w.Code != want {
			t.Fatalf("decision %d: status %d, want %d: %s", i+1, w.Code, want, w.Body)
		}
	}
	body := do(n.api, "GET", "/metrics", "").Body.String()
	value := func(name, ns string) (float64, bool) {
		m := regexp.MustCompile(`(?m)^` + name + `\{namespace="` + ns + `"\} (\S+)$`).FindStringSubmatch(body)
		if m == nil {
			return 0, false
		}
		v, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return v, true
	}
	got := map[string]float64{}
	for _, name := range []string{
		"ratesync_leases_held", "ratesync_lease_grants_total", "ratesync_lease_granted_units_total",
		"ratesync_lease_returned_units_total", "ratesync_lease_expired_units_total", "ratesync_lease_store_calls_total",
		"ratesync_lease_store_denials_total", "ratesync_lease_local_denials_total", "ratesync_store_down_decisions_total",
		"ratesync_store_nodes",
	} {
		v, ok := value(name, "leased")
		if !ok {
			t.Errorf("metrics lack %s of the leased namespace", name)
		}
		got[name] = v
		if _, ok := value(name, "periodic"); ok && name != "ratesync_store_nodes" {
			t.Errorf("%s reported for a namespace that is not leased", name)
		}
	}
	if g := got["ratesync_lease_grants_total"]; g < 1 {
		t.Errorf("lease grants %v, want at least 1", g)
	}
	if c := got["ratesync_lease_store_calls_total"]; c < 1 || c >= decisions {
		t.Errorf("lease store calls %v, want from 1 to fewer than the %d decisions", c, decisions)
	}
	// Every unit admitted came from a grant, and the store never counts
	// more than the limit: what it granted and kept is the 25 admitted.
	if g, r := got["ratesync_lease_granted_units_total"], got["ratesync_lease_returned_units_total"]; g-r != 25 {
		t.Errorf("granted units %v, returned %v: want 25 kept", g, r)
	}
	if d := got["ratesync_lease_store_denials_total"] + got["ratesync_lease_local_denials_total"]; d != decisions-25 {
		t.Errorf("denials at the store %v and on the node %v, want %d in all", got["ratesync_lease_store_denials_total"], got["ratesync_lease_local_denials_total"], decisions-25)
	}
	if f := got["ratesync_store_down_decisions_total"]; f != 0 {
		t.Errorf("store-down decisions %v with the store answering", f)
	}
	if _, ok := value("ratesync_store_nodes", "periodic"); !ok {
		t.Error("metrics lack ratesync_store_nodes of the periodic namespace")
	}
	if _, ok := value("ratesync_store_nodes", "default"); ok {
		t.Error("ratesync_store_nodes reported for a local namespace")
	}
}
