package node

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/node/config"
	"github.com/ratesync/ratesync/internal/testenv"
)

// The node's "listening" log line, in text and in JSON: its API's URL.
var (
	listeningRE     = regexp.MustCompile(`msg=listening url=(http://\S+)`)
	listeningJSONRE = regexp.MustCompile(`"msg":"listening","url":"(http://[^"]+)"`)
)

// runWithLog runs the node as cmd/node does: its configuration read from
// args and env (name=value), its log on stderr.
func runWithLog(ctx context.Context, args, env []string, stderr io.Writer) error {
	getenv := func(name string) string {
		for _, kv := range env {
			if k, v, ok := strings.Cut(kv, "="); ok && k == name {
				return v
			}
		}
		return ""
	}
	cfg, err := config.Load(args, getenv, stderr)
	if errors.Is(err, config.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	return RunWithLog(ctx, cfg, stderr)
}

// logWriter collects a node's logs and hands out its API URL.
type logWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	urls chan string
}

func newLogWriter() *logWriter { return &logWriter{urls: make(chan string, 4)} }

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if m := listeningRE.FindSubmatch(p); m != nil {
		w.urls <- string(m[1])
	}
	if m := listeningJSONRE.FindSubmatch(p); m != nil {
		w.urls <- string(m[1])
	}
	return w.buf.Write(p)
}

func (w *logWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// runNode runs run in the background and returns its API URL and a stop
// function returning run's error.
func runNode(t *testing.T, args, env []string) (string, *logWriter, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logs := newLogWriter()
	done := make(chan error, 1)
	go func() { done <- runWithLog(ctx, args, env, logs) }()
	stop := func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(60 * time.Second):
			t.Fatalf("run did not return within 60s\n%s", logs)
			return nil
		}
	}
	select {
	case url := <-logs.urls:
		t.Cleanup(func() { cancel() })
		return url, logs, stop
	case err := <-done:
		cancel()
		t.Fatalf("run returned before listening: %v\n%s", err, logs)
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatalf("not listening within 60s\n%s", logs)
	}
	return "", nil, nil
}

func TestRunDefaults(t *testing.T) {
	url, logs, stop := runNode(t, []string{"-listen", "127.0.0.1:0"}, nil)
	resp, err := http.Post(url+"/v1/check", "application/json", strings.NewReader(`{"key":"k","limits":[{"limit":5,"window":"1s"},{"limit":50,"window":"1m"},{"limit":500,"window":"1h"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("check: %d", resp.StatusCode)
	}
	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}
	out := logs.String()
	for _, want := range []string{`msg="ratesync node starting"`, `\"window_sizes\":[\"1s\",\"1m\",\"1h\"]`, "msg=listening url=http://127.0.0.1:", "final sync done"} {
		if !strings.Contains(out, want) {
			t.Errorf("logs lack %s:\n%s", want, out)
		}
	}
}

// -pprof-listen serves Go's profiler on its own listener, not on the API's.
func TestRunPprof(t *testing.T) {
	url, logs, stop := runNode(t, []string{"-listen", "127.0.0.1:0", "-pprof-listen", "127.0.0.1:0"}, nil)
	m := regexp.MustCompile(`msg="profiler listening" url=(\S+)`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no profiler line in the log:\n%s", logs)
	}
	get := func(u string) int {
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	if code := get(m[1] + "cmdline"); code != http.StatusOK {
		t.Errorf("%scmdline: %d, want 200", m[1], code)
	}
	if code := get(url + "/debug/pprof/cmdline"); code != http.StatusNotFound {
		t.Errorf("the API serves /debug/pprof/: %d, want 404", code)
	}
	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}
}

// The example config parses and starts, with real Redis and PostgreSQL
// servers behind its namespaces.
func TestRunExample(t *testing.T) {
	r, pg := testenv.NewRedis(t), testenv.NewPostgres(t)
	env := []string{config.EnvRedisURL + "=" + r.URL, config.EnvPostgresURL + "=" + pg.URL, config.EnvAdminToken + "=example-t0ken"}
	url, logs, stop := runNode(t, []string{"-config", "../../cmd/node/testdata/example.yaml", "-listen", "127.0.0.1:0", "-gateway-listen", "127.0.0.1:0", "-rls-listen", "127.0.0.1:0", "-log-format", "json"}, env)
	for _, target := range []string{"/readyz", "/v1/namespaces"} {
		resp, err := http.Get(url + target)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET %s: %d %s", target, resp.StatusCode, body)
		}
	}
	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}
	out := logs.String()
	if strings.Contains(out, "example-t0ken") || !strings.Contains(out, `"msg":"gateway listening"`) || !strings.Contains(out, `"msg":"rls listening"`) || !strings.Contains(out, `"from":"RATESYNC_ADMIN_TOKEN"`) {
		t.Errorf("logs:\n%s", out)
	}
}

func TestRunErrors(t *testing.T) {
	bad := t.TempDir() + "/bad.yaml"
	if err := os.WriteFile(bad, []byte("namespaces:\n  - name: r\n    strategy: redis\n    url: redis://:pw@127.0.0.1:6379/0\n    sync_rate: fast\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = busy.Close() })
	tests := []struct {
		name string
		args []string
		want string // "" no error
	}{
		{"help", []string{"-h"}, ""},
		{"bad config", []string{"-config", bad}, `bad.yaml:5: namespaces[0].sync_rate: "fast": must be a duration like 1s, 1m, 1h`},
		{"address in use", []string{"-listen", busy.Addr().String()}, "address already in use"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			err := runWithLog(context.Background(), tt.args, nil, &logs)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("run: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("run: %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// Shutdown lets a request in flight finish before the node stops.
func TestShutdownDrains(t *testing.T) {
	release, arrived := make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		close(arrived)
		<-release
		_, _ = io.WriteString(w, "late but whole")
	}))
	t.Cleanup(up.Close)
	cfg := testConfig(t, gatewayYAML(up.URL, ""), nil)
	cfg.Gateway.Timeout = config.Duration(time.Minute)
	n, err := newNode(context.Background(), cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
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

	type answer struct {
		code int
		body string
		err  error
	}
	answers := make(chan answer, 1)
	go func() {
		resp, err := (&http.Client{Timeout: time.Minute}).Get("http://" + gwLn.Addr().String() + "/ip")
		if err != nil {
			answers <- answer{err: err}
			return
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		answers <- answer{code: resp.StatusCode, body: string(body)}
	}()
	<-arrived
	cancel() // SIGTERM: stop accepting, drain
	waitFor(t, 10*time.Second, "readyz refuses while draining", func() bool { return n.closing.Load() })
	close(release)
	a := <-answers
	if a.err != nil || a.code != 200 || a.body != "late but whole" {
		t.Errorf("in-flight request: %+v", a)
	}
	if err := <-served; err != nil {
		t.Errorf("ServeListeners: %v", err)
	}
}
