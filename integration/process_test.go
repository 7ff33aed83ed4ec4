package integration

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
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/testenv"
	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/postgres"
	"github.com/ratesync/ratesync/strategy/redis"
)

// buildNode builds cmd/node into a temporary directory.
func buildNode(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ratesync-node")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/ratesync/ratesync/cmd/node").CombinedOutput()
	if err != nil {
		t.Fatalf("go build ./cmd/node: %v\n%s", err, out)
	}
	return bin
}

// nodeProcess is a running ratesync-node.
type nodeProcess struct {
	cmd  *exec.Cmd
	url  string
	mu   sync.Mutex
	logs strings.Builder
	done chan error
}

var listening = regexp.MustCompile(`msg=listening url=(http://\S+)`)

// startNode runs bin with the YAML config and waits for its API's URL.
func startNode(t *testing.T, bin, config string) *nodeProcess {
	t.Helper()
	path := filepath.Join(t.TempDir(), "node.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	p := &nodeProcess{cmd: exec.Command(bin, "-config", path, "-listen", "127.0.0.1:0"), done: make(chan error, 1)}
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
			p.mu.Lock()
			p.logs.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				urls <- m[1]
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		p.done <- p.cmd.Wait()
	}()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("node %s logs:\n%s", p.url, p.log())
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

func (p *nodeProcess) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// stop signals the node and returns its exit code.
func (p *nodeProcess) stop(t *testing.T, sig os.Signal) int {
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
		}
		t.Fatal(err)
	case <-time.After(60 * time.Second):
		t.Fatalf("node did not exit within 60s of %v\n%s", sig, p.log())
	}
	return -1
}

var client = &http.Client{Timeout: 10 * time.Second}

// check asks a node's /v1/check for policy p; 200 is allowed, 429 denied,
// anything else an error.
func (p *nodeProcess) check(ctx context.Context, key string) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url+"/v1/check", strings.NewReader(`{"policy":"p","key":"`+key+`"}`))
	if err != nil {
		return false, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return false, err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return true, nil
	case http.StatusTooManyRequests:
		return false, nil
	}
	return false, fmt.Errorf("node %s: %d %s", p.url, resp.StatusCode, body)
}

func (p *nodeProcess) ready() int {
	resp, err := client.Get(p.url + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// nodeConfig is a node configuration with one namespace "api" on a store
// and one policy "p" on it that admits everything (limit 1e9 per hour), so
// that the hits admitted are the hits offered.
func nodeConfig(id, store, url, extra string, sync time.Duration) string {
	return fmt.Sprintf(`node:
  id: %s
  shutdown_timeout: 20s
namespaces:
  - name: api
    strategy: %s
    url: %q
    sync_rate: %s
    window_sizes: [1h]
%s
policies:
  - name: p
    namespace: api
    limits: [{limit: 1000000000, window: 1h}]
`, id, store, url, sync, extra)
}

// storedTotal returns the store's count of every key of res in namespace
// ns, summed over the hour windows its hits may have been counted in
// (Result.WindowStarts), and the hits res admitted.
func storedTotal(t *testing.T, s strategy.Strategy, ns string, res *Result) (stored, admitted float64) {
	t.Helper()
	starts := res.WindowStarts(time.Hour, clockSlack)
	for key, n := range res.AdmittedPerKey() {
		for _, start := range starts {
			got, err := s.GetWindow(context.Background(), ns, KeyName(key), start, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			stored += got
		}
		admitted += n
	}
	return stored, admitted
}

// Store outage under load: 3 node processes, PostgreSQL stopped 5 s and
// started again. No error reaches a caller, /readyz goes 503 and back to
// 200, and afterwards the store total equals the hits admitted.
func TestStoreOutageUnderLoad(t *testing.T) {
	pg := testenv.PrivatePostgres(t)
	bin := buildNode(t)
	var nodes []*nodeProcess
	for i := range 3 {
		nodes = append(nodes, startNode(t, bin, nodeConfig(fmt.Sprintf("outage-%d", i), "postgres", pg.URL, "", 200*time.Millisecond)))
	}
	eventually(t, 10*time.Second, "every node ready", func() bool {
		for _, n := range nodes {
			if n.ready() != http.StatusOK {
				return false
			}
		}
		return true
	})
	ctx := context.Background()
	var sawDown, sawUpAgain atomic.Bool
	var faults sync.WaitGroup
	faults.Go(func() {
		time.Sleep(2 * time.Second)
		pg.Stop(t)
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if nodes[0].ready() == http.StatusServiceUnavailable {
				sawDown.Store(true)
			}
			time.Sleep(100 * time.Millisecond)
		}
		pg.Start(t)
		for range 200 {
			if nodes[0].ready() == http.StatusOK {
				sawUpAgain.Store(true)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	res, err := RunWith(ctx, len(nodes), Load{Rate: 200, Keys: 10, Spread: Random, Duration: 10 * time.Second, Seed: 5},
		func(ctx context.Context, node int, key string, _ float64) (bool, error) {
			return nodes[node].check(ctx, key)
		})
	faults.Wait()
	if err != nil {
		t.Fatal(err)
	}
	noErrors(t, res)
	if !sawDown.Load() {
		t.Fatal("/readyz never answered 503 while PostgreSQL was down")
	}
	if !sawUpAgain.Load() {
		t.Fatal("/readyz did not answer 200 again after PostgreSQL came back")
	}
	pool := pg.Pool(t)
	store, err := postgres.New(ctx, pool, postgres.Config{})
	if err != nil {
		t.Fatal(err)
	}
	took := eventually(t, 20*time.Second, "the store holds every admitted hit", func() bool {
		stored, admitted := storedTotal(t, store, "api", res)
		return stored == admitted
	})
	stored, admitted := storedTotal(t, store, "api", res)
	t.Logf("store outage (5 s): %d requests, %v admitted, %v in the store %v after the load ended; no caller saw an error",
		len(res.Decisions), admitted, stored, took.Round(time.Millisecond))
	for _, n := range nodes {
		if code := n.stop(t, syscall.SIGTERM); code != 0 {
			t.Fatalf("node exit code %d", code)
		}
	}
	if stored, admitted := storedTotal(t, store, "api", res); stored != admitted {
		t.Fatalf("after the nodes stopped: store %v, admitted %v", stored, admitted)
	}
}

// Node loss: one of 3 node processes dies under load. With SIGKILL the hits
// lost are at most what that node admitted since its last push (its
// unsynced diffs); with SIGTERM nothing is lost.
func TestNodeLoss(t *testing.T) {
	const syncRate = 500 * time.Millisecond
	bin := buildNode(t)
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			r := testenv.NewRedis(t)
			extra := fmt.Sprintf("    redis: {prefix: %q}", r.Prefix)
			var nodes []*nodeProcess
			for i := range 3 {
				nodes = append(nodes, startNode(t, bin, nodeConfig(fmt.Sprintf("loss-%d", i), "redis", r.URL, extra, syncRate)))
			}
			var dead atomic.Bool
			var killedAt time.Time
			var faults sync.WaitGroup
			faults.Go(func() {
				time.Sleep(2500 * time.Millisecond)
				killedAt = time.Now()
				dead.Store(true) // the balancer stops sending to node 2...
				time.Sleep(20 * time.Millisecond)
				if err := nodes[2].cmd.Process.Signal(sig); err != nil { // ...which then dies
					t.Error(err)
				}
			})
			res, err := RunWith(context.Background(), len(nodes), Load{Rate: 300, Keys: 10, Spread: RoundRobin, Duration: 5 * time.Second, Seed: 9},
				func(ctx context.Context, node int, key string, _ float64) (bool, error) {
					if node == 2 && dead.Load() {
						node = 0
					}
					return nodes[node].check(ctx, key)
				})
			faults.Wait()
			if err != nil {
				t.Fatal(err)
			}
			noErrors(t, res)
			code := -1
			select {
			case err := <-nodes[2].done:
				var ee *exec.ExitError
				if err == nil {
					code = 0
				} else if errors.As(err, &ee) {
					code = ee.ExitCode()
				}
			case <-time.After(30 * time.Second):
				t.Fatal("node 2 did not exit")
			}
			for _, n := range nodes[:2] {
				if c := n.stop(t, syscall.SIGTERM); c != 0 {
					t.Fatalf("surviving node exit code %d", c)
				}
			}
			s, err := redis.New(r.Client(t), redis.Config{Prefix: r.Prefix})
			if err != nil {
				t.Fatal(err)
			}
			stored, admitted := storedTotal(t, s, "api", res)
			lost := admitted - stored
			recent := 0
			for _, d := range res.Decisions {
				if d.Node == 2 && d.Allowed && d.At.Before(killedAt) && d.At.After(killedAt.Add(-syncRate-200*time.Millisecond)) {
					recent++
				}
			}
			t.Logf("%v of node 2 (exit code %d): %v admitted, %v in the store, %v lost; node 2 admitted %d in the last sync interval (+200ms) before the signal",
				sig, code, admitted, stored, lost, recent)
			switch {
			case lost < 0:
				t.Fatalf("the store holds %v more than was admitted: double count", -lost)
			case sig == syscall.SIGTERM && lost != 0:
				t.Fatalf("SIGTERM lost %v hits, want 0 (exit code %d)", lost, code)
			case lost > float64(recent):
				t.Fatalf("SIGKILL lost %v hits, more than node 2's %d unsynced hits", lost, recent)
			}
		})
	}
}
