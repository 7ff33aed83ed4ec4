package node

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// upstream is a real HTTP server behind the gateway that counts its calls.
type upstream struct {
	srv   *httptest.Server
	calls atomic.Int64
	xff   atomic.Value // last X-Forwarded-For seen
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.calls.Add(1)
		u.xff.Store(r.Header.Get("X-Forwarded-For"))
		w.Header().Set("X-Upstream", "yes")
		_, _ = io.WriteString(w, "upstream "+r.Method+" "+r.URL.Path)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func gatewayYAML(upstreamURL, extra string) string {
	return `
namespaces:
  - name: default
policies:
  - name: api
    limits: [{limit: 2, window: 1m}]
    key: header:X-Api-Key
  - name: writes
    limits: [{limit: 1, window: 1m}]
    key: [ip, method]
  - name: per-ip
    limits: [{limit: 100, window: 1m}]
    key: ip
    error_message: per-ip quota
gateway:
  upstream: ` + upstreamURL + `
  timeout: 300ms
  connect_timeout: 300ms
  trusted_proxies: [127.0.0.1]
  routes:
    - {path: /api/, policy: api}
    - {path: /api/write, methods: [POST, PUT], policy: writes}
    - {path: /ip, policy: per-ip}
` + extra
}

// newGatewayServer serves the node's gateway over real HTTP.
func newGatewayServer(t *testing.T, yaml string) (*Node, *httptest.Server) {
	t.Helper()
	n := newTestNode(t, yaml, nil)
	srv := httptest.NewServer(n.gateway)
	t.Cleanup(srv.Close)
	return n, srv
}

func send(t *testing.T, method, url string, headers ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	// A hang fails the test instead of blocking it; no timing is asserted.
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func TestGateway(t *testing.T) {
	up := newUpstream(t)
	_, gw := newGatewayServer(t, gatewayYAML(up.srv.URL, ""))
	tests := []struct {
		name       string
		method     string
		path       string
		headers    []string
		wantStatus int
		wantCalled bool
		wantPolicy string // RateLimit-Policy prefix; "" none
		wantRemain string
	}{
		{"allowed", "GET", "/api/items", []string{"X-Api-Key", "a"}, 200, true, `"api/1m";q=2`, "1"},
		{"allowed again", "GET", "/api/items", []string{"X-Api-Key", "a"}, 200, true, `"api/1m";q=2`, "0"},
		{"denied: upstream not called", "GET", "/api/items", []string{"X-Api-Key", "a"}, 429, false, `"api/1m";q=2`, "0"},
		{"another key", "GET", "/api/items", []string{"X-Api-Key", "b"}, 200, true, `"api/1m";q=2`, "1"},
		{"longest prefix wins", "POST", "/api/write/x", nil, 200, true, `"writes/1m";q=1`, "0"},
		{"longest prefix, denied", "POST", "/api/write/x", nil, 429, false, `"writes/1m";q=1`, "0"},
		{"method not in the longer route: the shorter", "GET", "/api/write/x", []string{"X-Api-Key", "c"}, 200, true, `"api/1m";q=2`, "1"},
		{"segment match only", "GET", "/apix", nil, 200, true, "", ""},
		{"no route: unlimited", "GET", "/other", nil, 200, true, "", ""},
		{"exact prefix", "GET", "/ip", nil, 200, true, `"per-ip/1m"`, "99"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := up.calls.Load()
			resp, body := send(t, tt.method, gw.URL+tt.path, tt.headers...)
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status %d, want %d; body %s", resp.StatusCode, tt.wantStatus, body)
			}
			if called := up.calls.Load() > before; called != tt.wantCalled {
				t.Errorf("upstream called %v, want %v", called, tt.wantCalled)
			}
			if got := resp.Header.Get("RateLimit-Policy"); !strings.HasPrefix(got, tt.wantPolicy) || (tt.wantPolicy == "") != (got == "") {
				t.Errorf("RateLimit-Policy = %q, want prefix %q", got, tt.wantPolicy)
			}
			if got := resp.Header.Get("X-RateLimit-Remaining"); got != tt.wantRemain {
				t.Errorf("X-RateLimit-Remaining = %q, want %q", got, tt.wantRemain)
			}
			switch tt.wantStatus {
			case 429:
				var msg struct{ Message string }
				if err := json.Unmarshal([]byte(body), &msg); err != nil || msg.Message != "API rate limit exceeded" {
					t.Errorf("denied body %q", body)
				}
				if resp.Header.Get("Retry-After") == "" || resp.Header.Get("RateLimit") == "" {
					t.Errorf("denied without Retry-After or RateLimit: %v", resp.Header)
				}
			case 200:
				if body != "upstream "+tt.method+" "+tt.path || resp.Header.Get("X-Upstream") != "yes" {
					t.Errorf("body %q, headers %v", body, resp.Header)
				}
			}
		})
	}
}

func TestGatewayForwardedFor(t *testing.T) {
	up := newUpstream(t)
	_, gw := newGatewayServer(t, gatewayYAML(up.srv.URL, ""))
	// The test client connects from 127.0.0.1, a trusted proxy: the key is
	// the right-most untrusted address of X-Forwarded-For.
	for _, tt := range []struct {
		name, xff, wantRemain string
	}{
		{"client A", "198.51.100.1", "99"},
		{"client A again, behind another hop", "6.6.6.6, 198.51.100.1", "98"},
		{"client B", "198.51.100.2", "99"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, _ := send(t, "GET", gw.URL+"/ip", "X-Forwarded-For", tt.xff)
			if got := resp.Header.Get("X-RateLimit-Remaining"); resp.StatusCode != 200 || got != tt.wantRemain {
				t.Errorf("status %d remaining %q, want 200 %q", resp.StatusCode, got, tt.wantRemain)
			}
			if got, _ := up.xff.Load().(string); got != tt.xff+", 127.0.0.1" {
				t.Errorf("upstream saw X-Forwarded-For %q", got)
			}
		})
	}
}

func TestGatewayMatch(t *testing.T) {
	up := newUpstream(t)
	n := newTestNode(t, gatewayYAML(up.srv.URL, ""), nil)
	g := n.gateway
	tests := []struct {
		method, path string
		want         string // the route's prefix; "-" no route
	}{
		{"GET", "/api/", "/api"},
		{"GET", "/api", "/api"},
		{"GET", "/api/write", "/api"},
		{"PUT", "/api/write", "/api/write"},
		{"PUT", "/api/write/deeper", "/api/write"},
		{"PUT", "/api/writer", "/api"},
		{"GET", "/ip/x", "/ip"},
		{"GET", "/api/../ip", "/ip"},
		{"GET", "//ip", "/ip"},
		{"GET", "/", "-"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			r := httptest.NewRequest(tt.method, "/", nil)
			r.URL.Path = tt.path
			got := "-"
			if rt := g.match(r); rt != nil {
				got = rt.prefix
			}
			if got != tt.want {
				t.Errorf("match = %q, want %q", got, tt.want)
			}
		})
	}
}
