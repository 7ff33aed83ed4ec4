package node

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/node/config"
)

// servedNode serves a node with a gateway (over upstream) and an rls
// section on loopback listeners, as Serve does, and returns the API's and
// the gateway's addresses.
func servedNode(t *testing.T, upstream string) (api, gw string) {
	t.Helper()
	yaml := gatewayYAML(upstream, "rls:\n  config: "+rlsFile(t, strictRLSConfig)+"\n")
	n, err := newNode(context.Background(), testConfig(t, yaml, nil), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	api, gw, stop := serveOnLoopback(t, n)
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("ServeListeners: %v", err)
		}
	})
	return api, gw
}

// serveOnLoopback serves n's API and gateway on loopback listeners of
// their own, as Serve does, and returns their addresses and a function
// that stops the node (SIGTERM's path: drain, then stop) and returns
// ServeListeners' error.
func serveOnLoopback(t *testing.T, n *Node) (api, gw string, stop func() error) {
	t.Helper()
	apiLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gwLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- n.ServeListeners(ctx, apiLn, gwLn) }()
	return apiLn.Addr().String(), gwLn.Addr().String(), func() error {
		cancel()
		return <-served
	}
}

// rawResponse is what a raw request got.
type rawResponse struct {
	status int
	header http.Header
	body   string
}

// sendRaw writes req to addr as is, on a connection of its own (so that no
// client cleans its path or bounds its header), and reads the response.
// The request is written while the response is read: a server may answer
// before it has read the whole request.
func sendRaw(t *testing.T, addr, req string) rawResponse {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	// A hang fails the test instead of blocking it; no timing is asserted.
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	go func() { _, _ = io.WriteString(conn, req) }()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body: %v", err)
	}
	_ = resp.Body.Close()
	return rawResponse{status: resp.StatusCode, header: resp.Header, body: string(body)}
}

// Every error the node answers itself, on any of its HTTP listeners, is
// problem+json naming what is wrong, including the requests Go's server
// and mux would answer on their own: a path not in canonical form (which
// the mux redirects), header fields over the node's bound (which the
// server answers in text/plain past its own bound).
func TestRawRequestErrors(t *testing.T) {
	up := newUpstream(t)
	api, gw := servedNode(t, up.srv.URL)
	big := strings.Repeat("x", 100<<10)
	body := `{"key":"k","limits":[{"limit":10,"window":"1m"}]}`
	post := func(target, body string, headers ...string) string {
		return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: node\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%sConnection: close\r\n\r\n%s",
			target, len(body), strings.Join(headers, ""), body)
	}
	get := func(method, target string, headers ...string) string {
		return method + " " + target + " HTTP/1.1\r\nHost: node\r\n" + strings.Join(headers, "") + "Connection: close\r\n\r\n"
	}
	tooLong := strings.Repeat("a", config.DefaultMaxBodyBytes+1)
	tests := []struct {
		name, addr, req string
		wantStatus      int
		wantAllow       string // 405
		wantDetail      []string
	}{
		{"the check itself", api, post("/v1/check", body), 200, "", nil},
		{"double slash: POST", api, post("/v1//check", body), 404, "", []string{"POST /v1//check: no such endpoint", "does not redirect", "did you mean /v1/check?"}},
		{"leading double slash: GET", api, get("GET", "//healthz"), 404, "", []string{"GET //healthz", "did you mean /healthz?"}},
		{"trailing slash", api, post("/v1/check/", body), 404, "", []string{"POST /v1/check/", "did you mean /v1/check?"}},
		{"dot segment", api, get("GET", "/v1/./window?key=k&window=1m"), 404, "", []string{"GET /v1/./window", "did you mean /v1/window?"}},
		{"dot-dot segment", api, post("/v1/namespaces/default/../default/sync", ""), 404, "", []string{"did you mean /v1/namespaces/default/sync?"}},
		{"dot-dot above the root", api, get("GET", "/../../metrics"), 404, "", []string{"did you mean /metrics?"}},
		{"non-canonical unknown path", api, get("GET", "/nope//x"), 404, "", []string{"GET /nope//x: no such endpoint"}},
		{"asterisk", api, get("GET", "*"), 400, "", []string{"GET *: the asterisk form of request target is for OPTIONS only"}},
		{"CONNECT", api, "CONNECT node:443 HTTP/1.1\r\nHost: node:443\r\n\r\n", 404, "", []string{"CONNECT", "no such endpoint"}},
		{"absolute form", api, get("GET", "http://node//readyz"), 404, "", []string{"did you mean /readyz?"}},
		{"unknown path", api, get("GET", "/v2/check"), 404, "", []string{"GET /v2/check: no such endpoint"}},
		{"root", api, get("GET", "/"), 404, "", []string{"GET /: no such endpoint"}},
		{"check: DELETE", api, get("DELETE", "/v1/check"), 405, "POST", []string{"DELETE /v1/check: method not allowed (allowed: POST)"}},
		{"window: PUT", api, get("PUT", "/v1/window"), 405, "GET, HEAD", []string{"PUT /v1/window: method not allowed (allowed: GET, HEAD)"}},
		{"sync: GET", api, get("GET", "/v1/namespaces/default/sync"), 405, "POST", []string{"allowed: POST"}},
		{"json: GET", api, get("GET", "/json"), 405, "POST", []string{"GET /json: method not allowed"}},
		{"header field over the bound", api, get("GET", "/healthz", "X-Big: "+big+"\r\n"), 431, "", []string{`the largest is header field "X-Big"`, "at most 65536"}},
		{"header field over the bound on the hot path", api, post("/v1/check", body, "X-Big: "+big+"\r\n"), 431, "", []string{`"X-Big"`}},
		{"many small fields over the bound", api, get("GET", "/healthz", strings.Repeat("X-Small: "+strings.Repeat("s", 1000)+"\r\n", 80)), 431, "", []string{`"X-Small"`}},
		{"request target over the bound", api, get("GET", "/healthz?q="+big), 431, "", []string{"the largest is the request target"}},
		{"body over the bound", api, post("/v1/check", tooLong), 413, "", []string{"at most 65536 bytes"}},
		{"chunked body over the bound", api, "POST /v1/check HTTP/1.1\r\nHost: node\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n" +
			fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(tooLong), tooLong), 413, "", []string{"at most 65536 bytes"}},
		{"gateway: header field over the bound", gw, get("GET", "/ip", "X-Big: "+big+"\r\n"), 431, "", []string{`"X-Big"`}},
		{"gateway: proxied", gw, get("GET", "/ip"), 200, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := sendRaw(t, tt.addr, tt.req)
			if resp.status != tt.wantStatus {
				t.Fatalf("status %d, want %d: %s", resp.status, tt.wantStatus, resp.body)
			}
			if tt.wantStatus < 400 {
				return
			}
			if ct := resp.header.Get("Content-Type"); ct != "application/problem+json" {
				t.Fatalf("Content-Type %q, want application/problem+json: %s", ct, resp.body)
			}
			var p problem
			if err := json.Unmarshal([]byte(resp.body), &p); err != nil || p.Status != tt.wantStatus || p.Type == "" || p.Title == "" {
				t.Fatalf("body %q: %+v, %v", resp.body, p, err)
			}
			for _, s := range tt.wantDetail {
				if !strings.Contains(p.Detail, s) {
					t.Errorf("detail %q does not say %q", p.Detail, s)
				}
			}
			if got := resp.header.Get("Allow"); got != tt.wantAllow {
				t.Errorf("Allow %q, want %q", got, tt.wantAllow)
			}
		})
	}
}

// What Go's server answers itself, in text/plain, before the node sees the
// request, as README lists it: header fields past the server's own bound,
// requests it cannot parse, an unknown transfer coding, another HTTP
// version, an unknown expectation.
func TestGoAnswersItself(t *testing.T) {
	up := newUpstream(t)
	api, _ := servedNode(t, up.srv.URL)
	tests := []struct {
		name, req  string
		wantStatus int
	}{
		{"header fields past the server's bound", "GET /healthz HTTP/1.1\r\nHost: node\r\nX-Big: " + strings.Repeat("x", serverMaxHeaderBytes+8<<10) + "\r\n\r\n", 431},
		{"no Host", "GET /healthz HTTP/1.1\r\n\r\n", 400},
		{"malformed header field", "GET /healthz HTTP/1.1\r\nHost: node\r\nBad Name: x\r\n\r\n", 400},
		{"unknown transfer coding", "POST /v1/check HTTP/1.1\r\nHost: node\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 501},
		{"HTTP/2.0 request line", "GET /healthz HTTP/2.0\r\nHost: node\r\n\r\n", 505},
		{"unknown expectation", "POST /v1/check HTTP/1.1\r\nHost: node\r\nExpect: 200-ok\r\nContent-Length: 2\r\n\r\n{}", 417},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := sendRaw(t, api, tt.req)
			ct := resp.header.Get("Content-Type")
			if resp.status != tt.wantStatus || ct != "" && !strings.HasPrefix(ct, "text/plain") {
				t.Errorf("status %d, Content-Type %q, want Go's own %d: %s", resp.status, ct, tt.wantStatus, resp.body)
			}
		})
	}
}

// No path, whatever its form, gets a redirect or an error other than
// problem+json from the API.
func TestNoRedirects(t *testing.T) {
	n := newTestNode(t, "", nil)
	paths := []string{
		"/v1/check", "/v1//check", "/v1/check/", "/v1/check//", "/v1/./check", "/v1/x/../check", "//v1/check", "/v1/check/.",
		"/v1/check/..", "/v1/%2e/check", "/v1/%2fcheck", "/v1/che%63k", "/v1/namespaces", "/v1/namespaces/", "/v1/namespaces/default/sync/",
		"/v1/namespaces//sync", "/v1/namespaces/a%2Fb/sync", "/v1", "/v1/", "/json/", "/metrics/", "/healthz/.", "/.", "/..", "//", "/%2F",
	}
	for _, method := range []string{"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"} {
		for _, p := range paths {
			w := do(n.api, method, p, "")
			if w.Code >= 300 && w.Code < 400 || w.Header().Get("Location") != "" {
				t.Errorf("%s %s: %d Location %q", method, p, w.Code, w.Header().Get("Location"))
			}
			if w.Code >= 400 && w.Header().Get("Content-Type") != "application/problem+json" {
				t.Errorf("%s %s: %d %q", method, p, w.Code, w.Header().Get("Content-Type"))
			}
		}
	}
}

// The gateway's own errors are problem+json: the upstream timing out 504,
// failing otherwise 502, each with Kong's message member. A denial keeps
// Kong's body (middleware).
func TestGatewayErrorsAreProblems(t *testing.T) {
	hang := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(hang); slow.Close() })
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	tests := []struct {
		name, upstream string
		wantStatus     int
		wantMessage    string
		wantDetail     string
	}{
		{"upstream does not answer within the timeout", slow.URL, http.StatusGatewayTimeout, "upstream timed out", "no response headers within gateway.timeout (300ms)"},
		{"upstream refuses connections", closed.URL, http.StatusBadGateway, "upstream unavailable", "the connection to the upstream failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, gw := newGatewayServer(t, gatewayYAML(tt.upstream, ""))
			resp, body := send(t, "GET", gw.URL+"/ip")
			if resp.StatusCode != tt.wantStatus || resp.Header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("status %d %q, want %d problem+json: %s", resp.StatusCode, resp.Header.Get("Content-Type"), tt.wantStatus, body)
			}
			var p problem
			if err := json.Unmarshal([]byte(body), &p); err != nil || p.Status != tt.wantStatus || p.Message != tt.wantMessage || !strings.Contains(p.Detail, tt.wantDetail) {
				t.Errorf("body %s: %+v, %v; want message %q, detail with %q", body, p, err, tt.wantMessage, tt.wantDetail)
			}
			if strings.Contains(body, "127.0.0.1") {
				t.Errorf("the answer shows the upstream's address: %s", body)
			}
		})
	}
}

// A client that goes away before the upstream answers is no upstream
// failure: nothing is logged at WARN, and no problem is written for
// nobody to read.
func TestGatewayClientGoneIsNoUpstreamFailure(t *testing.T) {
	hang := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(hang); slow.Close() })
	var logs lockedBuffer
	n, err := newNode(context.Background(), testConfig(t, gatewayYAML(slow.URL, ""), nil),
		slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.close(context.Background()) })
	ctx, cancel := context.WithCancel(context.Background())
	r := httptest.NewRequestWithContext(ctx, "GET", "/ip", nil)
	w := httptest.NewRecorder()
	time.AfterFunc(50*time.Millisecond, cancel)
	n.gateway.ServeHTTP(w, r)
	if w.Code != statusClientClosed || w.Body.Len() != 0 {
		t.Errorf("status %d, body %q; want %d and no body", w.Code, w.Body, statusClientClosed)
	}
	out := logs.String()
	if strings.Contains(out, "upstream failed") || !strings.Contains(out, "client gone before the upstream answered") {
		t.Errorf("logs:\n%s\nwant a DEBUG client gone line, no upstream failure", out)
	}
}
