package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/arith"
	"github.com/ratesync/ratesync/internal/node/config"
	"github.com/ratesync/ratesync/internal/node/nodetest"
	"github.com/ratesync/ratesync/internal/testenv"
	"github.com/ratesync/ratesync/strategy/redis"
)

// buildNode builds the ratesync-node binary into a temporary directory.
func buildNode(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary: skipped with -short")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool on PATH")
	}
	bin := filepath.Join(t.TempDir(), "ratesync-node")
	cmd := exec.Command(goTool, "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// process is a running ratesync-node.
type process struct {
	cmd  *exec.Cmd
	url  string // the API's base URL, from the "listening" log line
	mu   sync.Mutex
	logs strings.Builder
	done chan error
}

// startNode starts bin with args and env and waits for its API's URL (from
// its log in either format).
func startNode(t *testing.T, bin string, env []string, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(bin, args...), done: make(chan error, 1)}
	p.cmd.Env = append(os.Environ(), env...)
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.logs.WriteString(line + "\n")
			p.mu.Unlock()
			if m := nodetest.ListeningRE.FindStringSubmatch(line); m != nil {
				urls <- m[1]
			}
			if m := nodetest.ListeningJSONRE.FindStringSubmatch(line); m != nil {
				urls <- m[1]
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		p.done <- p.cmd.Wait()
	}()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
		}
		if t.Failed() {
			t.Logf("node logs:\n%s", p.log())
		}
	})
	select {
	case p.url = <-urls:
	case err := <-p.done:
		t.Fatalf("node exited before listening: %v\n%s", err, p.log())
	case <-time.After(30 * time.Second):
		t.Fatalf("node not listening within 30s\n%s", p.log())
	}
	return p
}

func (p *process) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// stop sends sig and returns the exit code.
func (p *process) stop(t *testing.T, sig os.Signal) int {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		var ee *exec.ExitError
		switch {
		case err == nil:
			return 0
		case errors.As(err, &ee):
			return ee.ExitCode()
		default:
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("node did not exit within 60s of %v\n%s", sig, p.log())
	}
	return -1
}

func post(t *testing.T, url, body string) int {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// TestEndToEnd builds the binary, runs it against a real Redis with a
// periodic sync, sends traffic, stops it with SIGTERM and checks that the
// store holds every hit: those of the periodic syncs and those of the final
// one.
func TestEndToEnd(t *testing.T) {
	r := testenv.NewRedis(t)
	bin := buildNode(t)
	cfgFile := filepath.Join(t.TempDir(), "node.yaml")
	err := os.WriteFile(cfgFile, []byte(fmt.Sprintf(`
node:
  id: e2e
  shutdown_timeout: 20s
namespaces:
  - name: api
    strategy: redis
    sync_rate: 100ms
    window_sizes: [1h]
    redis: {prefix: %s}
`, r.Prefix)), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	p := startNode(t, bin, []string{config.EnvRedisURL + "=" + r.URL}, "-config", cfgFile, "-listen", "127.0.0.1:0")

	start := time.Now()
	const keys, rounds = 5, 40
	want := map[string]float64{}
	for i := range rounds {
		for k := range keys {
			key := fmt.Sprintf("user:%d", k)
			if code := post(t, p.url+"/v1/check", `{"namespace":"api","key":"`+key+`","limits":[{"limit":1000000,"window":"1h"}]}`); code != 200 {
				t.Fatalf("check: status %d", code)
			}
			want[key]++
		}
		if code := post(t, p.url+"/v1/increment", `{"namespace":"api","key":"inc","window":"1h","value":2.5}`); code != 200 {
			t.Fatalf("increment: status %d", code)
		}
		want["inc"] += 2.5
		if i == rounds/2 {
			// Let periodic syncs carry part of the traffic.
			waitFor(t, 10*time.Second, "a periodic push", func() bool { return pushes(t, p.url) > 0 })
		}
	}
	end := time.Now()

	if code := p.stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("exit code %d after SIGTERM\n%s", code, p.log())
	}
	if !strings.Contains(p.log(), "final sync done") {
		t.Errorf("no final sync in the logs:\n%s", p.log())
	}

	store, err := redis.New(r.Client(t), redis.Config{Prefix: r.Prefix})
	if err != nil {
		t.Fatal(err)
	}
	starts := []time.Time{arith.WindowStart(start, time.Hour)}
	if s := arith.WindowStart(end, time.Hour); !s.Equal(starts[0]) {
		starts = append(starts, s) // the traffic crossed an hour
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for key, n := range want {
		got := 0.0
		for _, s := range starts {
			c, err := store.GetWindow(ctx, "api", key, s, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			got += c
		}
		if got != n {
			t.Errorf("store holds %v hits of %q, want %v", got, key, n)
		}
	}
}

var pushesRE = regexp.MustCompile(`(?m)^ratesync_pushes_total\{namespace="api"\} (\d+)`)

// pushes reads ratesync_pushes_total of namespace api from /metrics.
func pushes(t *testing.T, base string) int {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := pushesRE.FindSubmatch(body)
	if m == nil {
		return 0
	}
	var n int
	_, _ = fmt.Sscan(string(m[1]), &n)
	return n
}

// TestEndToEndSynchronousSlidingLog runs two ratesync-node processes on one
// store, in a synchronous namespace, with a sliding log policy of 2 a
// minute: what one node admits, the other counts, over HTTP.
func TestEndToEndSynchronousSlidingLog(t *testing.T) {
	bin := buildNode(t)
	stores := []struct {
		name string
		env  func(t *testing.T) (string, string) // the namespace's store lines, an environment variable
	}{
		{config.StrategyRedis, func(t *testing.T) (string, string) {
			r := testenv.NewRedis(t)
			return fmt.Sprintf("strategy: redis\n    redis: {prefix: %s}", r.Prefix), config.EnvRedisURL + "=" + r.URL
		}},
		{config.StrategyPostgres, func(t *testing.T) (string, string) {
			return "strategy: postgres", config.EnvPostgresURL + "=" + testenv.NewPostgres(t).URL
		}},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			store, env := st.env(t)
			cfgFile := filepath.Join(t.TempDir(), "node.yaml")
			err := os.WriteFile(cfgFile, []byte(fmt.Sprintf(`
namespaces:
  - name: shared
    %s
    sync_rate: 0
    window_sizes: [1m]
policies:
  - name: login
    namespace: shared
    limits: [{limit: 2, window: 1m, type: sliding_log}]
`, store)), 0o600)
			if err != nil {
				t.Fatal(err)
			}
			a := startNode(t, bin, []string{env}, "-config", cfgFile, "-listen", "127.0.0.1:0")
			b := startNode(t, bin, []string{env}, "-config", cfgFile, "-listen", "127.0.0.1:0")
			check := func(p *process) *http.Response {
				t.Helper()
				resp, err := http.Post(p.url+"/v1/check", "application/json", strings.NewReader(`{"policy":"login","key":"user:1"}`))
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				return resp
			}
			// Each process reads its own clock: the other's entries may be
			// dated a few milliseconds ahead, and weigh until 60s and a bit
			// from now (t=61).
			for i, p := range []*process{a, b} {
				resp := check(p)
				rl := resp.Header.Get("RateLimit")
				if resp.StatusCode != 200 || (rl != fmt.Sprintf(`"login/1m/sliding_log";r=%d;t=60`, 1-i) && rl != fmt.Sprintf(`"login/1m/sliding_log";r=%d;t=61`, 1-i)) {
					t.Fatalf("request %d: status %d, RateLimit %q", i+1, resp.StatusCode, rl)
				}
			}
			for _, p := range []*process{a, b} {
				resp := check(p)
				if retry, _ := strconv.Atoi(resp.Header.Get("Retry-After")); resp.StatusCode != 429 || retry < 50 || retry > 61 {
					t.Errorf("a third request: status %d, Retry-After %q, want 429 within a minute", resp.StatusCode, resp.Header.Get("Retry-After"))
				}
			}
			for _, p := range []*process{a, b} {
				if code := p.stop(t, syscall.SIGTERM); code != 0 {
					t.Errorf("exit code %d after SIGTERM\n%s", code, p.log())
				}
				if strings.Contains(p.log(), "store down") {
					t.Errorf("the store refused a check:\n%s", p.log())
				}
			}
		})
	}
}
