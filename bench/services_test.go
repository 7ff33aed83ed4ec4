package bench

import (
	"bufio"
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
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

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesync/ratesync/internal/testenv"
)

// What the suites measuring services in processes of their own share
// (TestRLSSuite, TestHTTPSuite): building and starting the processes, the
// Redis statistics and process CPU read around a run, and the table cells.

// servicesProcs is -services.procs for the suites' first line.
func servicesProcs() string {
	if *serviceProcs > 0 {
		return strconv.Itoa(*serviceProcs)
	}
	return "default"
}

var serviceProcs = flag.Int("services.procs", 0, "TestHTTPSuite, TestRLSSuite: GOMAXPROCS of every service process they start (nodes, floors, envoyproxy/ratelimit; not Redis, not the driver); 0: Go's default, the machine's cores")

// service is a process under test listening on addr, with its Redis (nil
// for none).
type service struct {
	name   string
	addr   string
	redis  *goredis.Client
	settle time.Duration // how long after a run its store work may still come (a periodic sync)
	pid    int
	pprof  string // the node's profiler, http://host:port/debug/pprof/, when started with -pprof-listen
	gc     bool   // addr serves the node's /metrics: the run counts its garbage collections
}

// useRedis makes svc count on r with the given sync rate (0:
// synchronous): it returns the YAML lines of a node's section (a
// namespace, rls) that count on r, each indented by indent, and the
// environment that gives the node r's URL.
func useRedis(t *testing.T, svc *service, r *testenv.Redis, syncRate time.Duration, indent string) (yaml string, env []string) {
	t.Helper()
	svc.redis = r.Client(t)
	if syncRate > 0 {
		svc.settle = syncRate + 200*time.Millisecond
	}
	yaml = fmt.Sprintf("%sstrategy: redis\n%ssync_rate: %v\n%sredis: {prefix: %s}\n", indent, indent, syncRate, indent, r.Prefix)
	return yaml, []string{"RATESYNC_REDIS_URL=" + r.URL}
}

// cost is what a run of a service cost per decision: its Redis's work
// (zero without Redis) and the service process's CPU.
type cost struct {
	cmds      float64 // Redis commands per decision sent by the service (EVALSHA counts one)
	inScripts float64 // Redis commands per decision run by the scripts the service sent
	usec      float64 // Redis usec per decision in the commands the service sent (a script's own include its commands')
	redisCPU  float64 // Redis CPU µs per decision (INFO cpu)
	serverCPU float64 // the service process's CPU µs per decision
	gcs       float64 // the node's garbage collections per 1,000 decisions; -1: not counted
	perCmd    map[string]float64
}

// sample is one measurement of a case: what the driver saw, and the cost.
type sample[R any] struct {
	res R
	cost
}

// perDecision is c for a log line.
func (c cost) perDecision() string {
	line := fmt.Sprintf("per decision: %.2f commands + %.2f in scripts, %.1f usec in commands, %.1f µs Redis CPU, %.1f µs service CPU",
		c.cmds, c.inScripts, c.usec, c.redisCPU, c.serverCPU)
	if c.gcs >= 0 {
		line += fmt.Sprintf("; %.3f garbage collections per 1,000 decisions", c.gcs)
	}
	return line
}

// misplaced tells what is wrong with c in a harness's brief run: Redis
// commands of a service without Redis, or a synchronous service's
// decisions without an EVALSHA, a hit counted in a script and some usec.
func (c cost) misplaced(redis, synchronous bool) string {
	switch {
	case !redis && (c.cmds != 0 || c.inScripts != 0):
		return fmt.Sprintf("%.3f Redis commands per decision without Redis", c.cmds)
	case synchronous && (c.perCmd["evalsha"] <= 0 || c.inScripts < 1 || c.usec <= 0):
		return fmt.Sprintf("per decision %v, %.3f in scripts, %.2f usec: want EVALSHA, a hit counted in a script, some usec", c.perCmd, c.inScripts, c.usec)
	}
	return ""
}

// interleave measures each of n cases once a round, each round starting
// at another case, so that every case meets the shared machine in each of
// its moods; measure gets the round (from 0) and the case's index.
func interleave(rounds, n int, measure func(round, i int)) {
	for round := range rounds {
		first := round * n / rounds
		for i := range n {
			measure(round, (first+i)%n)
		}
	}
}

// measure waits svc.settle (a periodic sync of what came before is not
// this run's), then calls run, which makes decisions of svc and returns
// what it saw and how many decisions, between two readings of svc's Redis
// statistics and process CPU, the second svc.settle after run returns (so
// that a periodic sync of the run's hits is counted), and returns the run
// with its cost per decision. scripted names the commands the store's
// scripts call (scriptCommands).
func measure[R any](t *testing.T, svc *service, scripted map[string]bool, run func() (R, int64, error)) sample[R] {
	t.Helper()
	time.Sleep(svc.settle)
	before := readRedisStats(t, svc.redis)
	gc0 := gcCount(t, svc)
	cpu0, _ := procCPU(svc.pid)
	res, decisions, err := run()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(svc.settle)
	cpu1, _ := procCPU(svc.pid)
	gc1 := gcCount(t, svc)
	after := readRedisStats(t, svc.redis)
	if decisions <= 0 {
		t.Fatalf("%s: no decisions: %v", svc.name, res)
	}
	c := costOf(before, after, cpu1-cpu0, float64(decisions), scripted)
	c.gcs = -1
	if gc0 >= 0 && gc1 >= 0 {
		c.gcs = float64(gc1-gc0) * 1000 / float64(decisions)
	}
	return sample[R]{res: res, cost: c}
}

// gcCount reads the garbage collections the node svc has made
// (go_gc_duration_seconds_count on its /metrics); -1 for a service that
// is not a node, or one whose /metrics does not say.
func gcCount(t *testing.T, svc *service) int64 {
	t.Helper()
	if !svc.gc {
		return -1
	}
	resp, err := http.Get("http://" + svc.addr + "/metrics")
	if err != nil {
		t.Fatalf("%s: /metrics: %v", svc.name, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_gc_duration_seconds_count "); ok {
			n, err := strconv.ParseFloat(v, 64) // the text format may write 1e+06
			if err != nil {
				t.Fatalf("%s: /metrics: go_gc_duration_seconds_count %q", svc.name, v)
			}
			return int64(n)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s: /metrics: %v", svc.name, err)
	}
	return -1
}

// costOf is the cost per decision of n decisions between two readings of
// a service's Redis statistics (empty without Redis), cpu seconds of its
// process apart.
func costOf(before, after redisStats, cpu, n float64, scripted map[string]bool) cost {
	c := cost{serverCPU: cpu * 1e6 / n, perCmd: map[string]float64{}}
	// INFO commandstats counts the commands a script runs as well as the
	// script, whose usec includes theirs: when scripts ran, the commands
	// our scripts call are taken for theirs.
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
			c.perCmd[name+scriptSuffix] = calls
			c.inScripts += calls
			continue
		}
		c.perCmd[name] = calls
		c.cmds += calls
		c.usec += usec
	}
	c.redisCPU = (after.cpu - before.cpu) * 1e6 / n
	return c
}

// scriptSuffix marks the commands a script ran in cost.perCmd.
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

// costColumns renders the cost cells of a table row, medians over the
// samples: Redis commands sent per decision (with each command's share),
// commands run in scripts, Redis usec and Redis CPU µs (empty without
// Redis), then the service's CPU µs.
func costColumns[R any](samples []sample[R], redis bool) string {
	cmds, nested, usec, rcpu := "", "", "", ""
	if redis {
		cmds = fmt.Sprintf("%.3f", median(samples, func(s sample[R]) float64 { return s.cmds }))
		if p := perCmd(samples, false); p != "" {
			cmds += " (" + p + ")"
		}
		nested = fmt.Sprintf("%.3f", median(samples, func(s sample[R]) float64 { return s.inScripts }))
		if p := perCmd(samples, true); p != "" {
			nested += " (" + p + ")"
		}
		usec = fmt.Sprintf("%.2f", median(samples, func(s sample[R]) float64 { return s.usec }))
		rcpu = fmt.Sprintf("%.1f", median(samples, func(s sample[R]) float64 { return s.redisCPU }))
	}
	return fmt.Sprintf("%s | %s | %s | %s | %.1f", cmds, nested, usec, rcpu, median(samples, func(s sample[R]) float64 { return s.serverCPU }))
}

// perCmd names the commands of the samples (run by scripts, or sent by
// the service) with their median calls per decision, largest first:
// "evalsha 1.000".
func perCmd[R any](samples []sample[R], inScripts bool) string {
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
		out = append(out, nc{n, median(samples, func(s sample[R]) float64 { return s.perCmd[n] })})
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
func median[S any](samples []S, f func(S) float64) float64 {
	m, _, _ := spread(column(samples, f))
	return m
}

func column[S any](samples []S, f func(S) float64) []float64 {
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

// ratioCell renders each round's ratio a[i]/b[i] as "median [least–
// greatest]", or "" when the two do not have a value for each round.
func ratioCell(a, b []float64) string {
	if len(a) == 0 || len(a) != len(b) {
		return ""
	}
	ratios := make([]float64, len(a))
	for i := range a {
		ratios[i] = a[i] / b[i]
	}
	med, lo, hi := spread(ratios)
	return fmt.Sprintf("%.2f [%.2f–%.2f]", med, lo, hi)
}

// rateCell renders rates as "median [least–greatest]", with thousands
// separators.
func rateCell(v []float64) string {
	med, lo, hi := spread(v)
	return fmt.Sprintf("%s [%s–%s]", thousands(int(med)), thousands(int(lo)), thousands(int(hi)))
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

// startNode starts the node (bin) as svc on the configuration yaml,
// written into dir, with env added and args after -config; it waits for
// the log line matching pattern, whose submatch is svc's address.
func startNode(t *testing.T, bin, dir string, svc *service, yaml string, env []string, pattern *regexp.Regexp, args ...string) *service {
	t.Helper()
	cfg := filepath.Join(dir, strings.ReplaceAll(svc.name, "/", "-")+".yaml")
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProcess(t, svc.name, exec.Command(bin, append([]string{"-config", cfg}, args...)...), env, pattern)
	svc.addr, svc.pid = p.match, p.cmd.Process.Pid
	svc.gc = pattern == apiListening
	// The node logs its profiler's URL before it listens.
	if m := pprofListening.FindStringSubmatch(p.log()); m != nil {
		svc.pprof = m[1]
	}
	return svc
}

var pprofListening = regexp.MustCompile(`msg="profiler listening" url=(\S+)`)

// buildCommand builds the command pkg (an import path) into a temporary
// directory and returns the binary's path.
func buildCommand(t *testing.T, pkg string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds " + pkg + ": skipped with -short")
	}
	return goBuild(t, "", pkg, filepath.Base(pkg))
}

// goBuild builds pkg, from the module in dir ("": this one), into a
// temporary directory as name, and returns the binary's path.
func goBuild(t *testing.T, dir, pkg, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	build := exec.Command("go", "build", "-o", bin, pkg)
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build %s in %s: %v\n%s", pkg, cmp.Or(dir, "."), err, out)
	}
	return bin
}

// buildNode builds cmd/node.
func buildNode(t *testing.T) string {
	t.Helper()
	return buildCommand(t, "github.com/ratesync/ratesync/cmd/node")
}

// buildNodeAt builds cmd/node as it was at rev, a git revision of this
// repository, from a copy of that revision's tree (git archive).
func buildNodeAt(t *testing.T, rev string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds cmd/node at " + rev + ": skipped with -short")
	}
	if out, err := exec.Command("git", "rev-parse", "--verify", "--quiet", rev+"^{commit}").CombinedOutput(); err != nil {
		t.Fatalf("-http.before %q: not a revision of this repository (git rev-parse: %v %s)", rev, err, out)
	}
	src := t.TempDir()
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("git rev-parse --show-toplevel: %v", err)
	}
	export := exec.Command("sh", "-c", `git archive "$1" | tar -x -C "$2"`, "sh", rev, src)
	export.Dir = strings.TrimSpace(string(top))
	if out, err := export.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", rev, err, out)
	}
	return goBuild(t, src, "./cmd/node", "node")
}

// buildUpstream builds envoyproxy/ratelimit from its source tree src.
func buildUpstream(t *testing.T, src string) string {
	t.Helper()
	return goBuild(t, src, "./src/service_cmd", "ratelimit")
}

// upstreamListener is which of envoyproxy/ratelimit's listeners a
// service started by startUpstream is addressed on.
type upstreamListener int

const (
	upstreamGRPC upstreamListener = iota // ShouldRateLimit
	upstreamHTTP                         // POST /json
)

// startUpstream starts envoyproxy/ratelimit (bin, from buildUpstream) on
// r, with its defaults but for statsd (off) and its ports (free loopback
// ones), serving the rate limit configuration of dir (rlsConfigDir).
// The service's address is the listener's; the caller waits for it to
// answer.
func startUpstream(t *testing.T, bin, dir string, r *testenv.Redis, listener upstreamListener) *service {
	t.Helper()
	ports := freePorts(t, 3)
	env := []string{
		"REDIS_URL=" + r.Addr, "REDIS_SOCKET_TYPE=tcp", "USE_STATSD=false", "LOG_LEVEL=warn",
		"RUNTIME_ROOT=" + filepath.Join(dir, "runtime"), "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"HOST=127.0.0.1", "GRPC_HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1",
		"PORT=" + strconv.Itoa(ports[0]), "GRPC_PORT=" + strconv.Itoa(ports[1]), "DEBUG_PORT=" + strconv.Itoa(ports[2]),
	}
	p := startProcess(t, "envoyproxy/ratelimit", exec.Command(bin), env, nil)
	port := ports[1]
	if listener == upstreamHTTP {
		port = ports[0]
	}
	return &service{name: "envoyproxy/ratelimit", addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), redis: r.Client(t), pid: p.cmd.Process.Pid}
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
	if *serviceProcs > 0 {
		cmd.Env = append(cmd.Env, "GOMAXPROCS="+strconv.Itoa(*serviceProcs))
	}
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
