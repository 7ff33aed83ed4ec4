package node

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/node/config"
	"github.com/ratesync/ratesync/internal/testenv"
	"github.com/ratesync/ratesync/ratelimiting"
)

// testClock is a clock a test moves by hand; safe for concurrent use.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func newTestClock(now time.Time) *testClock { return &testClock{now: now} }

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// option returns the instance option that reads c.
func (c *testClock) option() ratelimiting.Option { return ratelimiting.WithClock(c.Now) }

func TestMain(m *testing.M) { testenv.Main(m) }

// envOf returns a getenv over a map.
func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// testConfig parses yaml as the file "test.yaml".
func testConfig(t testing.TB, yaml string, env map[string]string) config.Config {
	t.Helper()
	var data []byte
	if yaml != "" {
		data = []byte(yaml)
	}
	cfg, err := config.Parse("test.yaml", data, envOf(env))
	if err != nil {
		t.Fatalf("config.Parse: %v", err)
	}
	return cfg
}

// testLogger logs through t, so that a failing test shows the node's logs.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// newTestNode builds a node of yaml, closed when the test ends. opts are
// its instance's options, such as a clock.
func newTestNode(t testing.TB, yaml string, env map[string]string, opts ...ratelimiting.Option) *Node {
	t.Helper()
	cfg := testConfig(t, yaml, env)
	n, err := newNode(context.Background(), cfg, testLogger(t), opts...)
	if err != nil {
		t.Fatalf("newNode: %v", err)
	}
	t.Cleanup(func() { _ = n.close(context.Background()) })
	return n
}

// do sends a request to h and returns the recorded response.
func do(h http.Handler, method, target, body string, headers ...string) *httptest.ResponseRecorder {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r := httptest.NewRequest(method, target, rd)
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Set(headers[i], headers[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// problemOfBody decodes a problem+json response.
func problemOfBody(t testing.TB, w *httptest.ResponseRecorder) problem {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type = %q, want application/problem+json; body %s", ct, w.Body)
	}
	var p problem
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("problem body %q: %v", w.Body, err)
	}
	if p.Status != w.Code || p.Type == "" || p.Title == "" {
		t.Fatalf("problem %+v does not match status %d", p, w.Code)
	}
	return p
}

// waitFor polls cond until it holds, failing the test after d.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
