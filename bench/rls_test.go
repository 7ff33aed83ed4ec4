package bench

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	goredis "github.com/redis/go-redis/v9"
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

// rlsService is a rate limit service under test: a process listening on
// addr, with its Redis (nil for none).
type rlsService struct {
	name   string
	addr   string
	redis  *goredis.Client
	settle time.Duration // how long after a run its store work may still come (a periodic sync)
	pid    int
}

// rlsCase is one cell of the table.
type rlsCase struct {
	svc     *rlsService
	workers int
	keys    int
	driver  *rlsload.Driver
	samples []rlsSample
}

func (c *rlsCase) String() string {
	return fmt.Sprintf("%s/c=%d/keys=%d", c.svc.name, c.workers, c.keys)
}

// rlsSample is one measurement of a case.
type rlsSample struct {
	res       rlsload.Result
	cmds      float64 // Redis commands per decision sent by the service (EVALSHA counts one)
	inScripts float64 // Redis commands per decision run by the scripts the service sent
	usec      float64 // Redis usec per decision in the commands the service sent (a script's own include its commands')
	redisCPU  float64 // Redis CPU µs per decision (INFO cpu)
	serverCPU float64 // the service process's CPU µs per decision
	perCmd    map[string]float64
}

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
	bin := buildRLSNode(t)
	dir := rlsConfigDir(t)
	services := []*rlsService{
		startRLSNode(t, bin, dir, "local", "local", 0, nil),
		startRLSNode(t, bin, dir, "redis-periodic", "redis", time.Second, testenv.PrivateRedis(t)),
		startRLSNode(t, bin, dir, "redis-sync", "redis", 0, testenv.PrivateRedis(t)),
	}
	if *rlsUpCheck != "" {
		services = append(services, startUpstream(t, *rlsUpCheck, testenv.PrivateRedis(t)))
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
	t.Logf("%d services, %d cases, %d rounds of %v each (+%v warm-up), %d connection(s) per case, GOMAXPROCS %d, %d CPUs",
		len(services), len(cases), *rlsRounds, *rlsTime, *rlsWarmup, *rlsConns, procs(), numCPU())
	ctx := context.Background()
	for round := range *rlsRounds {
		for i := range cases {
			c := cases[(i+round*5)%len(cases)] // each round starts elsewhere
			s := measureRLS(ctx, t, c, scripted, *rlsWarmup)
			t.Logf("round %d %-30s %s; per decision: %.2f commands + %.2f in scripts, %.1f usec in commands, %.1f µs Redis CPU, %.1f µs service CPU",
				round+1, c, s.res, s.cmds, s.inScripts, s.usec, s.redisCPU, s.serverCPU)
			c.samples = append(c.samples, s)
		}
	}
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
	time.Sleep(c.svc.settle) // the warm-up's sync is not this run's
	before := readRedisStats(t, c.svc.redis)
	cpu0, _ := procCPU(c.svc.pid)
	res, err := c.driver.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(c.svc.settle)
	cpu1, _ := procCPU(c.svc.pid)
	after := readRedisStats(t, c.svc.redis)
	if res.Errors > 0 || res.Over > 0 {
		t.Errorf("%s: %s: want only OK answers", c, res)
	}
	s := rlsSample{res: res, perCmd: map[string]float64{}}
	n := float64(res.Requests)
	if n == 0 {
		t.Fatalf("%s: no requests", c)
	}
	s.serverCPU = (cpu1 - cpu0) * 1e6 / n
	if c.svc.redis != nil {
		// INFO commandstats counts the commands a script runs as well as
		// the script, whose usec includes theirs: when scripts ran, the
		// commands our scripts call are taken for theirs.
		scripts := false
		for name, a := range after.cmds {
			if isScript(name) && a.calls > before.cmds[name].calls {
				scripts = true
			}
		}
		for name, a := range after.cmds {
			b := before.cmds[name]
			calls, usec := float64(a.calls-b.calls)/n, float64(a.usec-b.usec)/n
			if calls <= 0 {
				continue
			}
			if scripts && scripted[name] {
				s.perCmd[name+scriptSuffix] = calls
				s.inScripts += calls
				continue
			}
			s.perCmd[name] = calls
			s.cmds += calls
			s.usec += usec
		}
		s.redisCPU = (after.cpu - before.cpu) * 1e6 / n
	}
	return s
}

// scriptSuffix marks the commands a script ran in rlsSample.perCmd.
const scriptSuffix = " (script)"

// isScript tells the commands that run a script.
func isScript(cmd string) bool {
	switch cmd {
	case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro":
		return true
	}
	return false
}

var redisCall = regexp.MustCompile(`redis\.p?call\('([A-Za-z]+)'`)

// scriptCommands returns the commands the Redis store's Lua scripts call
// (strategy/redis/*.lua), lower case as INFO commandstats names them.
func scriptCommands(t *testing.T) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "strategy", "redis", "*.lua"))
	if err != nil || len(files) == 0 {
		t.Fatalf("the store's scripts: %v, %d files", err, len(files))
	}
	out := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range redisCall.FindAllStringSubmatch(string(b), -1) {
			out[strings.ToLower(m[1])] = true
		}
	}
	return out
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
	var b strings.Builder
	b.WriteString("| service | workers | keys | decisions/s | x envoyproxy/ratelimit | p50 ms | p99 ms | Redis commands per decision | in scripts | Redis usec per decision | Redis CPU µs per decision | service CPU µs per decision |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range cases {
		rate := func(s rlsSample) float64 { return s.res.PerSecond() }
		_, lo, hi := spread(column(c.samples, rate))
		ratio := ""
		if u := upstream[[2]int{c.workers, c.keys}]; u != nil && len(u.samples) == len(c.samples) {
			// each round's ratio: the two ran minutes apart at most
			var ratios []float64
			for i, s := range c.samples {
				ratios = append(ratios, rate(s)/rate(u.samples[i]))
			}
			med, lo, hi := spread(ratios)
			ratio = fmt.Sprintf("%.2f [%.2f–%.2f]", med, lo, hi)
		}
		cmds, nested, usec, rcpu := "", "", "", ""
		if c.svc.redis != nil {
			cmds = fmt.Sprintf("%.3f (%s)", median(c.samples, func(s rlsSample) float64 { return s.cmds }), perCmd(c.samples, false))
			nested = fmt.Sprintf("%.3f", median(c.samples, func(s rlsSample) float64 { return s.inScripts }))
			if p := perCmd(c.samples, true); p != "" {
				nested += " (" + p + ")"
			}
			usec = fmt.Sprintf("%.2f", median(c.samples, func(s rlsSample) float64 { return s.usec }))
			rcpu = fmt.Sprintf("%.1f", median(c.samples, func(s rlsSample) float64 { return s.redisCPU }))
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s [%s–%s] | %s | %.2f | %.2f | %s | %s | %s | %s | %.1f |\n",
			c.svc.name, c.workers, thousands(c.keys), thousands(int(median(c.samples, rate))), thousands(int(lo)), thousands(int(hi)), ratio,
			median(c.samples, func(s rlsSample) float64 { return ms(s.res.P50) }),
			median(c.samples, func(s rlsSample) float64 { return ms(s.res.P99) }),
			cmds, nested, usec, rcpu,
			median(c.samples, func(s rlsSample) float64 { return s.serverCPU }))
	}
	return b.String()
}

// perCmd names the commands of the samples (run by scripts, or sent by
// the service) with their median calls per decision, largest first:
// "evalsha 1.000".
func perCmd(samples []rlsSample, inScripts bool) string {
	names := map[string]bool{}
	for _, s := range samples {
		for n := range s.perCmd {
			if strings.HasSuffix(n, scriptSuffix) == inScripts {
				names[n] = true
			}
		}
	}
	type nc struct {
		name string
		per  float64
	}
	var out []nc
	for n := range names {
		out = append(out, nc{n, median(samples, func(s rlsSample) float64 { return s.perCmd[n] })})
	}
	slices.SortFunc(out, func(a, b nc) int {
		if a.per != b.per {
			if a.per > b.per {
				return -1
			}
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	var parts []string
	for _, c := range out {
		if c.per >= 0.0005 {
			parts = append(parts, fmt.Sprintf("%s %.3f", strings.TrimSuffix(c.name, scriptSuffix), c.per))
		}
	}
	return strings.Join(parts, ", ")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// median is the median of f over samples.
func median(samples []rlsSample, f func(rlsSample) float64) float64 {
	m, _, _ := spread(column(samples, f))
	return m
}

func column(samples []rlsSample, f func(rlsSample) float64) []float64 {
	v := make([]float64, len(samples))
	for i, s := range samples {
		v[i] = f(s)
	}
	return v
}

// spread returns the median, least and greatest of v (0s when empty).
func spread(v []float64) (med, lo, hi float64) {
	if len(v) == 0 {
		return 0, 0, 0
	}
	v = slices.Sorted(slices.Values(v))
	med = v[len(v)/2]
	if len(v)%2 == 0 {
		med = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return med, v[0], v[len(v)-1]
}

// thousands writes n with comma separators: 12,345.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// redisStats is what INFO commandstats and INFO cpu tell at one moment.
type redisStats struct {
	cmds map[string]cmdStat
	cpu  float64
}

type cmdStat struct{ calls, usec int64 }

// readRedisStats reads c's command stats (without INFO itself, which only
// this harness sends) and CPU; nil c reads nothing.
func readRedisStats(t *testing.T, c *goredis.Client) redisStats {
	t.Helper()
	st := redisStats{cmds: map[string]cmdStat{}}
	if c == nil {
		return st
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	st.cmds = parseCommandStats(s)
	delete(st.cmds, "info")
	cpu, ok := redisCPU(c)
	if !ok {
		t.Fatal("INFO cpu: no used_cpu_user and used_cpu_sys")
	}
	st.cpu = cpu
	return st
}

// parseCommandStats reads the lines "cmdstat_NAME:calls=N,usec=N,..." of
// INFO commandstats.
func parseCommandStats(info string) map[string]cmdStat {
	out := map[string]cmdStat{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var cs cmdStat
		for _, f := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(f, "=")
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				continue
			}
			switch k {
			case "calls":
				cs.calls = n
			case "usec":
				cs.usec = n
			}
		}
		out[strings.TrimPrefix(name, "cmdstat_")] = cs
	}
	return out
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

// buildRLSNode builds cmd/node into a temporary directory.
func buildRLSNode(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the node: skipped with -short")
	}
	bin := filepath.Join(t.TempDir(), "ratesync-node")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/ratesync/ratesync/cmd/node").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/node: %v\n%s", err, out)
	}
	return bin
}

var rlsListening = regexp.MustCompile(`msg="rls listening" address=(\S+)`)

// startRLSNode starts the node with an rls section of strategy and
// syncRate (0: synchronous; ignored for local), counting on r (nil for
// local).
func startRLSNode(t *testing.T, bin, dir, name, strategy string, syncRate time.Duration, r *testenv.Redis) *rlsService {
	t.Helper()
	yaml := "rls:\n  config: rls\n  strategy: " + strategy + "\n"
	var env []string
	svc := &rlsService{name: name}
	if r != nil {
		yaml += fmt.Sprintf("  sync_rate: %v\n  redis: {prefix: %s}\n", syncRate, r.Prefix)
		env = append(env, "RATESYNC_REDIS_URL="+r.URL)
		svc.redis = r.Client(t)
		if syncRate > 0 {
			svc.settle = syncRate + 200*time.Millisecond
		}
	}
	cfg := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProcess(t, name, exec.Command(bin, "-config", cfg, "-listen", "127.0.0.1:0", "-rls-listen", "127.0.0.1:0"), env, rlsListening)
	svc.addr, svc.pid = p.match, p.cmd.Process.Pid
	waitRLS(t, svc.addr)
	return svc
}

// startUpstream builds envoyproxy/ratelimit from its source tree src and
// starts it on r, with its defaults but for statsd (off) and its ports
// (free loopback ones).
func startUpstream(t *testing.T, src string, r *testenv.Redis) *rlsService {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ratelimit")
	build := exec.Command("go", "build", "-o", bin, "./src/service_cmd")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./src/service_cmd in %s: %v\n%s", src, err, out)
	}
	dir := rlsConfigDir(t)
	ports := freePorts(t, 3)
	env := []string{
		"REDIS_URL=" + r.Addr, "REDIS_SOCKET_TYPE=tcp", "USE_STATSD=false", "LOG_LEVEL=warn",
		"RUNTIME_ROOT=" + filepath.Join(dir, "runtime"), "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"HOST=127.0.0.1", "GRPC_HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1",
		"PORT=" + strconv.Itoa(ports[0]), "GRPC_PORT=" + strconv.Itoa(ports[1]), "DEBUG_PORT=" + strconv.Itoa(ports[2]),
	}
	p := startProcess(t, "envoyproxy/ratelimit", exec.Command(bin), env, nil)
	svc := &rlsService{name: "envoyproxy/ratelimit", addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1])), redis: r.Client(t), pid: p.cmd.Process.Pid}
	waitRLS(t, svc.addr)
	return svc
}

// freePorts returns n loopback ports that were free a moment ago.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		_ = ln.Close()
	}
	return ports
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

// process is a service started by the harness.
type process struct {
	cmd   *exec.Cmd
	match string // the first submatch of the pattern startProcess waited for
	mu    sync.Mutex
	logs  strings.Builder
	done  chan struct{}
}

func (p *process) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// startProcess starts cmd with env added, keeps its output, and when
// pattern is set waits for a line matching it. The process is stopped
// (an interrupt, then a kill after 10s) when t ends.
func startProcess(t *testing.T, name string, cmd *exec.Cmd, env []string, pattern *regexp.Regexp) *process {
	t.Helper()
	p := &process{cmd: cmd, done: make(chan struct{})}
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	matches := make(chan string, 1)
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			if p.logs.Len() < 1<<20 {
				p.logs.WriteString(line + "\n")
			}
			p.mu.Unlock()
			if pattern != nil {
				if m := pattern.FindStringSubmatch(line); m != nil {
					select {
					case matches <- m[1]:
					default:
					}
				}
			}
		}
		_, _ = io.Copy(io.Discard, out)
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", name, p.log())
		}
	})
	if pattern == nil {
		return p
	}
	select {
	case p.match = <-matches:
	case <-p.done:
		t.Fatalf("%s exited before listening:\n%s", name, p.log())
	case <-time.After(30 * time.Second):
		t.Fatalf("%s not listening within 30s:\n%s", name, p.log())
	}
	return p
}

func numCPU() int { return runtime.NumCPU() }

// TestRLSHarness runs TestRLSSuite's harness briefly: the node with
// strategy local and with a synchronous Redis namespace, a few hundred
// requests each, answered OK, with the Redis commands counted where they
// belong.
func TestRLSHarness(t *testing.T) {
	bin := buildRLSNode(t)
	dir := rlsConfigDir(t)
	local := startRLSNode(t, bin, dir, "local", "local", 0, nil)
	synced := startRLSNode(t, bin, dir, "redis-sync", "redis", 0, testenv.PrivateRedis(t))
	scripted := scriptCommands(t)
	if !scripted["hincrby"] || scripted["evalsha"] {
		t.Errorf("commands of the store's scripts: %v, want hincrby and no evalsha", scripted)
	}
	var cases []*rlsCase
	for _, svc := range []*rlsService{local, synced} {
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
			switch {
			case s.res.OK != 300 || s.res.Requests != 300:
				t.Errorf("%s: %s, want 300 OK", c, s.res)
			case svc.redis == nil && (s.cmds != 0 || s.inScripts != 0):
				t.Errorf("%s: %.3f Redis commands per decision without Redis", c, s.cmds)
			case svc.redis != nil && (s.perCmd["evalsha"] <= 0 || s.inScripts < 1 || s.usec <= 0):
				t.Errorf("%s: per decision %v, %.3f in scripts, %.2f usec: want EVALSHA, a hit counted in a script, some usec", c, s.perCmd, s.inScripts, s.usec)
			}
		}
	}
	if tab := rlsTable(cases); strings.Count(tab, "\n") != len(cases)+2 {
		t.Errorf("table:\n%s", tab)
	}
}

func TestParseCommandStats(t *testing.T) {
	info := "# Commandstats\r\n" +
		"cmdstat_evalsha:calls=12,usec=340,usec_per_call=28.33,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_config|resetstat:calls=1,usec=33,usec_per_call=33.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_hincrby:calls=30,usec=45,usec_per_call=1.50,rejected_calls=0,failed_calls=0\r\n"
	got := parseCommandStats(info)
	want := map[string]cmdStat{"evalsha": {12, 340}, "config|resetstat": {1, 33}, "hincrby": {30, 45}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: %+v, want %+v", k, got[k], w)
		}
	}
}
