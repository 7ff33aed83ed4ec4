package bench

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratesync/ratesync/internal/rlsload"
	"github.com/ratesync/ratesync/internal/testenv"
)

// The node's Envoy rate limit service under closed-loop gRPC load: the
// node process (and, when its source is given, envoyproxy/ratelimit) on
// private Redis servers, one per service, so that each one's INFO
// commandstats counts only its own commands.

var (
	rlsSuite   = flag.Bool("rls.suite", false, "run TestRLSSuite: ShouldRateLimit of each service, interleaved rounds (several minutes)")
	rlsRounds  = flag.Int("rls.rounds", 5, "TestRLSSuite: rounds; each measures every case once, in an order of its own")
	rlsTime    = flag.Duration("rls.time", 3*time.Second, "TestRLSSuite: measured time of one case in one round")
	rlsWarmup  = flag.Duration("rls.warmup", 500*time.Millisecond, "TestRLSSuite: unmeasured load before each measurement")
	rlsConns   = flag.Int("rls.conns", 2, "TestRLSSuite: gRPC connections the workers share (Envoy: one per worker thread; 0: one per worker)")
	rlsCases   = flag.String("rls.cases", "", "TestRLSSuite: a regexp; only the cases whose name (service/c=workers/keys=n) matches run")
	rlsUpCheck = flag.String("rls.upstream", os.Getenv("RATESYNC_RLS_UPSTREAM"), "TestRLSSuite: a source tree of envoyproxy/ratelimit to build and measure too (default $RATESYNC_RLS_UPSTREAM; empty: that row is skipped)")
)

// rlsDomain is the rate limit configuration every service runs: one
// descriptor key whose every value counts on its own, with a limit no run
// reaches (a billion per hour), so every answer is OK and every decision
// counts.
const rlsDomain = `domain: bench
descriptors:
  - key: key
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
`

// rlsCase is one cell of the table.
type rlsCase struct {
	svc     *service
	workers int
	keys    int
	driver  *rlsload.Driver
	samples []rlsSample
}

func (c *rlsCase) String() string {
	return fmt.Sprintf("%s/c=%d/keys=%d", c.svc.name, c.workers, c.keys)
}

// rlsSample is one measurement of a case.
type rlsSample = sample[rlsload.Result]

// TestRLSSuite measures ShouldRateLimit: the node with strategy local,
// Redis periodic (sync_rate 1s) and Redis synchronous (sync_rate 0s), and
// envoyproxy/ratelimit when -rls.upstream names its source, each at 16 and
// 64 workers, on one key and on 10,000 keys. Every round runs every case
// once, in a rotated order, so that all of them meet the same machine.
// Run with -rls.suite (see bench/README.md); skipped otherwise.
func TestRLSSuite(t *testing.T) {
	if !*rlsSuite {
		t.Skip("measures for minutes: run with -rls.suite")
	}
	bin := buildNode(t)
	dir := rlsConfigDir(t)
	services := []*service{
		startRLSNode(t, bin, dir, "local", 0, nil),
		startRLSNode(t, bin, dir, "redis-periodic", time.Second, testenv.PrivateRedis(t)),
		startRLSNode(t, bin, dir, "redis-sync", 0, testenv.PrivateRedis(t)),
	}
	if *rlsUpCheck != "" {
		up := startUpstream(t, buildUpstream(t, *rlsUpCheck), dir, testenv.PrivateRedis(t), upstreamGRPC)
		waitRLS(t, up.addr)
		services = append(services, up)
	} else {
		t.Log("envoyproxy/ratelimit: skipped (set -rls.upstream or RATESYNC_RLS_UPSTREAM to its source tree)")
	}
	only, err := regexp.Compile(*rlsCases)
	if err != nil {
		t.Fatalf("-rls.cases: %v", err)
	}
	scripted := scriptCommands(t)
	var cases []*rlsCase
	for _, svc := range services {
		for _, workers := range []int{16, 64} {
			for _, keys := range []int{1, 10000} {
				if !only.MatchString(fmt.Sprintf("%s/c=%d/keys=%d", svc.name, workers, keys)) {
					continue
				}
				conns := *rlsConns
				if conns == 0 {
					conns = workers
				}
				d, err := rlsload.New(rlsload.Config{Target: svc.addr, Workers: workers, Conns: conns, Keys: keys, Duration: *rlsTime, Seed: 1})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(d.Close)
				cases = append(cases, &rlsCase{svc: svc, workers: workers, keys: keys, driver: d})
			}
		}
	}
	t.Logf("%d services, %d cases, %d rounds of %v each (+%v warm-up), %d connection(s) per case, GOMAXPROCS %d (services: %s), %d CPUs",
		len(services), len(cases), *rlsRounds, *rlsTime, *rlsWarmup, *rlsConns, procs(), servicesProcs(), numCPU())
	ctx := context.Background()
	interleave(*rlsRounds, len(cases), func(round, i int) {
		c := cases[i]
		s := measureRLS(ctx, t, c, scripted, *rlsWarmup)
		t.Logf("round %d %-30s %s; %s", round+1, c, s.res, s.perDecision())
		c.samples = append(c.samples, s)
	})
	t.Logf("ShouldRateLimit, %d rounds of %v per case, median [range]:\n%s", *rlsRounds, *rlsTime, rlsTable(cases))
}

// measureRLS warms c up for warm, then measures it once. scripted names
// the commands the store's scripts call (scriptCommands).
func measureRLS(ctx context.Context, t *testing.T, c *rlsCase, scripted map[string]bool, warm time.Duration) rlsSample {
	t.Helper()
	cfg := c.driver.Config()
	warmup, err := rlsload.New(rlsload.Config{Target: cfg.Target, Workers: cfg.Workers, Conns: cfg.Conns, Keys: cfg.Keys, Duration: warm, Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := warmup.Run(ctx); err != nil {
		t.Fatal(err)
	}
	warmup.Close()
	s := measure(t, c.svc, scripted, func() (rlsload.Result, int64, error) {
		res, err := c.driver.Run(ctx)
		return res, res.Requests, err
	})
	if s.res.Errors > 0 || s.res.Over > 0 {
		t.Errorf("%s: %s: want only OK answers", c, s.res)
	}
	return s
}

// rlsTable renders the cases' samples as the markdown table of
// BENCHMARKS.md: medians, with the range of decisions/s and of the ratio
// to envoyproxy/ratelimit's decisions/s in the same round.
func rlsTable(cases []*rlsCase) string {
	upstream := map[[2]int]*rlsCase{}
	for _, c := range cases {
		if c.svc.name == "envoyproxy/ratelimit" {
			upstream[[2]int{c.workers, c.keys}] = c
		}
	}
	rate := func(s rlsSample) float64 { return s.res.PerSecond() }
	var b strings.Builder
	b.WriteString("| service | workers | keys | decisions/s | x envoyproxy/ratelimit | p50 ms | p99 ms | Redis commands per decision | in scripts | Redis usec per decision | Redis CPU µs per decision | service CPU µs per decision |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range cases {
		ratio := "" // each round's ratio: the two ran minutes apart at most
		if u := upstream[[2]int{c.workers, c.keys}]; u != nil {
			ratio = ratioCell(column(c.samples, rate), column(u.samples, rate))
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %.2f | %.2f | %s |\n",
			c.svc.name, c.workers, thousands(c.keys), rateCell(column(c.samples, rate)), ratio,
			median(c.samples, func(s rlsSample) float64 { return ms(s.res.P50) }),
			median(c.samples, func(s rlsSample) float64 { return ms(s.res.P99) }),
			costColumns(c.samples, c.svc.redis != nil))
	}
	return b.String()
}

// rlsConfigDir writes the rate limit configuration: a directory "rls"
// holding bench.yaml for the node, and runtime/ratelimit/config/bench.yaml
// for envoyproxy/ratelimit (RUNTIME_ROOT, RUNTIME_SUBDIRECTORY).
func rlsConfigDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, sub := range []string{"rls", filepath.Join("runtime", "ratelimit", "config")} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, sub, "bench.yaml"), []byte(rlsDomain), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

var rlsListening = regexp.MustCompile(`msg="rls listening" address=(\S+)`)

// startRLSNode starts the node with an rls section counting on r at
// syncRate (0: synchronous), or with strategy local when r is nil.
func startRLSNode(t *testing.T, bin, dir, name string, syncRate time.Duration, r *testenv.Redis) *service {
	t.Helper()
	yaml := "rls:\n  config: rls\n"
	var env []string
	svc := &service{name: name}
	if r != nil {
		section, e := useRedis(t, svc, r, syncRate, "  ")
		yaml, env = yaml+section, e
	} else {
		yaml += "  strategy: local\n"
	}
	startNode(t, bin, dir, svc, yaml, env, rlsListening, "-listen", "127.0.0.1:0", "-rls-listen", "127.0.0.1:0")
	waitRLS(t, svc.addr)
	return svc
}

// waitRLS polls addr until a ShouldRateLimit of the bench domain answers
// OK.
func waitRLS(t *testing.T, addr string) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	c := pb.NewRateLimitServiceClient(conn)
	req := &pb.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "key", Value: "probe"}},
	}}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := c.ShouldRateLimit(ctx, req)
		cancel()
		switch {
		case err == nil && resp.GetOverallCode() == pb.RateLimitResponse_OK && resp.GetStatuses()[0].GetCurrentLimit() != nil:
			return
		case time.Now().After(deadline):
			t.Fatalf("%s: no OK answer with a limit within 30s: %v, %v", addr, resp, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRLSHarness runs TestRLSSuite's harness briefly: the node with
// strategy local and with a synchronous Redis namespace, a few hundred
// requests each, answered OK, with the Redis commands counted where they
// belong.
func TestRLSHarness(t *testing.T) {
	bin := buildNode(t)
	dir := rlsConfigDir(t)
	local := startRLSNode(t, bin, dir, "local", 0, nil)
	synced := startRLSNode(t, bin, dir, "redis-sync", 0, testenv.PrivateRedis(t))
	scripted := scriptCommands(t)
	if !scripted["hincrby"] || scripted["evalsha"] {
		t.Errorf("commands of the store's scripts: %v, want hincrby and no evalsha", scripted)
	}
	var cases []*rlsCase
	for _, svc := range []*service{local, synced} {
		for _, keys := range []int{1, 100} {
			d, err := rlsload.New(rlsload.Config{Target: svc.addr, Workers: 4, Conns: 2, Keys: keys, Requests: 300})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(d.Close)
			c := &rlsCase{svc: svc, workers: 4, keys: keys, driver: d}
			s := measureRLS(context.Background(), t, c, scripted, 100*time.Millisecond)
			c.samples = append(c.samples, s)
			cases = append(cases, c)
			if s.res.OK != 300 || s.res.Requests != 300 {
				t.Errorf("%s: %s, want 300 OK", c, s.res)
			}
			if p := s.misplaced(svc.redis != nil, svc.redis != nil); p != "" {
				t.Errorf("%s: %s", c, p)
			}
		}
	}
	if tab := rlsTable(cases); strings.Count(tab, "\n") != len(cases)+2 {
		t.Errorf("table:\n%s", tab)
	}
}
