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
	"syscall"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/node/config"
	"github.com/ratesync/ratesync/internal/node/nodetest"
	"github.com/ratesync/ratesync/internal/testenv"
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
	return RunWithLog(ctx, cfg, stderr, nil)
}

// runNode runs the node in the test's process with args and env, and
// returns its API URL, its log and a function that stops it (nodetest.Run).
func runNode(t *testing.T, args, env []string) (string, *nodetest.LogWriter, func() error) {
	t.Helper()
	return nodetest.Run(t, func(ctx context.Context, log io.Writer) error { return runWithLog(ctx, args, env, log) })
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
	_, gw, stop := serveOnLoopback(t, n)

	type answer struct {
		code int
		body string
		err  error
	}
	answers := make(chan answer, 1)
	go func() {
		resp, err := (&http.Client{Timeout: time.Minute}).Get("http://" + gw + "/ip")
		if err != nil {
			answers <- answer{err: err}
			return
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		answers <- answer{code: resp.StatusCode, body: string(body)}
	}()
	<-arrived
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }() // SIGTERM: stop accepting, drain
	waitFor(t, 10*time.Second, "readyz refuses while draining", func() bool { return n.closing.Load() })
	close(release)
	a := <-answers
	if a.err != nil || a.code != 200 || a.body != "late but whole" {
		t.Errorf("in-flight request: %+v", a)
	}
	if err := <-stopped; err != nil {
		t.Errorf("ServeListeners: %v", err)
	}
}

// A SIGHUP the caller caught while it read the configuration (cmd/node
// asks for SIGHUP before it reads) is a reload once the node serves.
func TestSIGHUPCaughtWhileLoadingReloads(t *testing.T) {
	dir := t.TempDir()
	file := dir + "/node.yaml"
	if err := os.WriteFile(file, []byte("node:\n  listen: 127.0.0.1:0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hup := make(chan os.Signal, 1)
	hup <- syscall.SIGHUP
	_, logs, stop := nodetest.Run(t, func(ctx context.Context, log io.Writer) error {
		cfg, err := config.Load([]string{"-config", file}, func(string) string { return "" }, log)
		if err != nil {
			return err
		}
		return RunWithLog(ctx, cfg, log, hup)
	})
	waitFor(t, 30*time.Second, "a reload on the SIGHUP caught before the node served", func() bool {
		return strings.Contains(logs.String(), `msg="configuration reloaded" trigger=SIGHUP`)
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
