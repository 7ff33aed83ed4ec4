package bench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesync/ratesync/internal/httpload"
	"github.com/ratesync/ratesync/internal/testenv"
)

// The node's own HTTP overhead under closed-loop HTTP/1.1 load, against
// floors in processes of their own: /v1/check against a plain net/http
// handler decoding the same body, the gateway against a bare
// httputil.ReverseProxy to the same upstream, and envoyproxy/ratelimit's
// POST /json when its source is given. Each service with a store has a
// private Redis server, so that its INFO commandstats counts only its own
// commands.

var (
	httpSuite    = flag.Bool("http.suite", false, "run TestHTTPSuite: the node's HTTP paths against their floors, interleaved rounds (about 11 minutes with the defaults)")
	httpRounds   = flag.Int("http.rounds", 5, "TestHTTPSuite: rounds; each measures every case once, starting at a case of its own")
	httpTime     = flag.Duration("http.time", 8*time.Second, "TestHTTPSuite: measured time of one case in one round")
	httpWarmup   = flag.Duration("http.warmup", time.Second, "TestHTTPSuite: unmeasured load before each measurement, on the same connections")
	httpConns    = flag.Int("http.conns", 32, "TestHTTPSuite: keep-alive connections, each with one request in flight")
	httpCases    = flag.String("http.cases", "", "TestHTTPSuite: a regexp; only the cases whose name (service/keys=n) matches run (a case's baseline is not added)")
	httpProfile  = flag.String("http.profile", "", "TestHTTPSuite: a `directory`: in the first round, each node case is profiled while measured (CPU over the run, then allocations since the start, and an execution trace of its middle second), into NAME-keys=N.cpu.pprof, .allocs.pprof and .trace there")
	httpBefore   = flag.String("http.before", "", "TestHTTPSuite: a git `revision` of this repository: its node's /v1/check cases run too, as service@revision, and a second table gives this tree's ratios to them, round by round")
	httpUpstream = flag.String("http.upstream", os.Getenv("RATESYNC_RLS_UPSTREAM"), "TestHTTPSuite: a source tree of envoyproxy/ratelimit to build and measure too (default $RATESYNC_RLS_UPSTREAM; empty: that row is skipped)")
)

// The services' names, in the cases' names and the table.
const (
	svcFloor    = "floor"
	svcLocal    = "local"
	svcPeriodic = "redis-periodic"
	svcSync     = "redis-sync"
	svcUpstream = "envoyproxy/ratelimit"
	svcProxy    = "proxy"
	svcGateway  = "gateway"
)

// httpCase is one cell of the table: a service under one kind of request
// on a number of keys.
type httpCase struct {
	svc      *service
	keys     int
	request  string // what is asked: "POST /v1/check"
	baseline string // the service this one is measured against, on the same keys ("" for a floor)
	rival    bool   // compared with envoyproxy/ratelimit too, on the same keys
	driver   *httpload.Driver
	samples  []httpSample
}

func (c *httpCase) String() string { return fmt.Sprintf("%s/keys=%d", c.svc.name, c.keys) }

// httpSample is one measurement of a case.
type httpSample = sample[httpload.Result]

// checkRequest is a /v1/check of namespace ns with one sliding limit no
// run reaches (a billion a minute): every answer is 200 and every decision
// counts.
func checkRequest(ns string) httpload.Config {
	return httpload.Config{Method: http.MethodPost, Path: "/v1/check", Header: http.Header{"Content-Type": {"application/json"}},
		Body: `{"namespace":"` + ns + `","key":"user:{key}","limits":[{"limit":1e9,"window":"1m"}]}`}
}

// jsonRequest is envoyproxy/ratelimit's POST /json of rlsDomain's
// descriptor (a billion an hour).
func jsonRequest() httpload.Config {
	return httpload.Config{Method: http.MethodPost, Path: "/json", Header: http.Header{"Content-Type": {"application/json"}},
		Body: `{"domain":"bench","descriptors":[{"entries":[{"key":"key","value":"user:{key}"}]}]}`}
}

// gatewayRequest is a GET from consumer user:{key}, the header the
// gateway's policy limits by.
func gatewayRequest() httpload.Config {
	return httpload.Config{Method: http.MethodGet, Path: "/", Header: http.Header{"X-Consumer-Id": {"user:{key}"}}}
}

var (
	floorListening   = regexp.MustCompile(`httpfloor: \w+ listening on http://(\S+)`)
	apiListening     = regexp.MustCompile(`msg=listening url=http://(\S+)`)
	gatewayListening = regexp.MustCompile(`msg="gateway listening" url=http://(\S+)`)
)

// startFloor starts bench/httpfloor (bin) in mode as the service name.
func startFloor(t *testing.T, bin, name, mode string, args ...string) *service {
	t.Helper()
	cmd := append([]string{"-mode", mode, "-listen", "127.0.0.1:0"}, args...)
	p := startProcess(t, name, exec.Command(bin, cmd...), nil, floorListening)
	return &service{name: name, addr: p.match, pid: p.cmd.Process.Pid}
}

// startCheckNode starts the node with a namespace "bench" (window 1m)
// counting on r at syncRate (0: synchronous), or local when r is nil,
// with args as its flags (nodeArgs, or fewer for an older build).
func startCheckNode(t *testing.T, bin, dir, name string, syncRate time.Duration, r *testenv.Redis, args ...string) *service {
	t.Helper()
	yaml := "namespaces:\n  - name: bench\n    window_sizes: [1m]\n"
	var env []string
	svc := &service{name: name}
	if r != nil {
		ns, e := useRedis(t, svc, r, syncRate, "    ")
		yaml, env = yaml+ns, e
	} else {
		yaml += "    strategy: local\n"
	}
	return startNode(t, bin, dir, svc, yaml, env, apiListening, args...)
}

// nodeArgs are the node's flags: its API on a free port, and its
// profiler on another when -http.profile is set.
func nodeArgs(extra ...string) []string {
	args := append([]string{"-listen", "127.0.0.1:0"}, extra...)
	if *httpProfile != "" {
		args = append(args, "-pprof-listen", "127.0.0.1:0")
	}
	return args
}

// startGateway starts the node as a gateway to upstream (an address): a
// local namespace, and one route, /, whose policy limits each consumer
// (X-Consumer-ID) to a billion a minute.
func startGateway(t *testing.T, bin, dir, upstream string) *service {
	t.Helper()
	yaml := `namespaces:
  - {name: bench, strategy: local, window_sizes: [1m]}
policies:
  - {name: bench, namespace: bench, key: consumer, limits: [{limit: 1000000000, window: 1m}]}
gateway:
  listen: 127.0.0.1:0
  upstream: http://` + upstream + `
  consumer_header: X-Consumer-ID
  routes:
    - {path: /, policy: bench}
`
	return startNode(t, bin, dir, &service{name: svcGateway}, yaml, nil, gatewayListening, nodeArgs()...)
}

// waitHTTP asks svc req until it answers 200, for 30s at most.
func waitHTTP(t *testing.T, svc *service, req httpload.Config) {
	t.Helper()
	req.Target, req.Conns, req.Requests, req.Timeout = svc.addr, 1, 1, time.Second
	d, err := httpload.New(req)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := d.Run(context.Background())
		switch {
		case err != nil:
			t.Fatal(err)
		case res.Status[http.StatusOK] == 1:
			return
		case time.Now().After(deadline):
			t.Fatalf("%s: no 200 answer within 30s: %s", svc.name, res)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// httpServices starts the suite's processes (envoyproxy/ratelimit when
// upstream, its binary, is set) and returns its cases on each of keys,
// each case's driver made from load (its Target, Keys and Seed set here).
//
// before, when set, is another build of the node (buildNodeAt), named rev:
// its /v1/check cases run too, as service@rev, on the same floor.
func httpServices(t *testing.T, upstream, before, rev string, keys []int, load httpload.Config) []*httpCase {
	t.Helper()
	node, floors := buildNode(t), buildCommand(t, "github.com/ratesync/ratesync/bench/httpfloor")
	dir := rlsConfigDir(t)
	type svcReq struct {
		svc      *service
		req      httpload.Config
		request  string
		baseline string
		rival    bool
	}
	check := func(svc *service, baseline string, rival bool) svcReq {
		return svcReq{svc, checkRequest("bench"), "POST /v1/check", baseline, rival}
	}
	all := []svcReq{
		check(startFloor(t, floors, svcFloor, "floor"), "", false),
		check(startCheckNode(t, node, dir, svcLocal, 0, nil, nodeArgs()...), svcFloor, true),
		check(startCheckNode(t, node, dir, svcPeriodic, time.Second, testenv.PrivateRedis(t), nodeArgs()...), svcFloor, true),
		check(startCheckNode(t, node, dir, svcSync, 0, testenv.PrivateRedis(t), nodeArgs()...), svcFloor, true),
	}
	if before != "" {
		// No profiler: an older node may not have -pprof-listen.
		listen := []string{"-listen", "127.0.0.1:0"}
		all = append(all,
			check(startCheckNode(t, before, dir, svcLocal+"@"+rev, 0, nil, listen...), svcFloor, true),
			check(startCheckNode(t, before, dir, svcPeriodic+"@"+rev, time.Second, testenv.PrivateRedis(t), listen...), svcFloor, true),
			check(startCheckNode(t, before, dir, svcSync+"@"+rev, 0, testenv.PrivateRedis(t), listen...), svcFloor, true),
		)
	}
	if upstream != "" {
		all = append(all, svcReq{startUpstream(t, upstream, dir, testenv.PrivateRedis(t), upstreamHTTP), jsonRequest(), "POST /json", svcFloor, false})
	}
	up := startFloor(t, floors, "upstream", "upstream")
	all = append(all,
		svcReq{startFloor(t, floors, svcProxy, "proxy", "-upstream", "http://"+up.addr), gatewayRequest(), "GET / (proxied)", "", false},
		svcReq{startGateway(t, node, dir, up.addr), gatewayRequest(), "GET / (proxied)", svcProxy, false},
	)
	var cases []*httpCase
	for _, s := range all {
		waitHTTP(t, s.svc, s.req)
		for _, k := range keys {
			cfg := s.req
			cfg.Target, cfg.Keys, cfg.Seed = s.svc.addr, k, 1
			cfg.Conns, cfg.Requests, cfg.Duration, cfg.Timeout = load.Conns, load.Requests, load.Duration, load.Timeout
			d, err := httpload.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(d.Close)
			cases = append(cases, &httpCase{svc: s.svc, keys: k, request: s.request, baseline: s.baseline, rival: s.rival, driver: d})
		}
	}
	return cases
}

// TestHTTPSuite measures the node's HTTP paths against their floors, each
// service a process of its own: /v1/check of the node with a local
// namespace, a Redis one synced every second and a synchronous Redis one,
// against the floor (bench/httpfloor -mode floor); envoyproxy/ratelimit's
// POST /json when -http.upstream names its source, against the same
// floor; the node's gateway (a local policy on route /) against a bare
// httputil.ReverseProxy (bench/httpfloor -mode proxy), both in front of
// the same upstream. Every case runs on one key and on 10,000, with
// -http.conns keep-alive connections. Every round runs every case once,
// starting at another case, and each case's ratio to its baseline is taken
// within the round. Run with -http.suite (see bench/README.md); skipped
// otherwise.
func TestHTTPSuite(t *testing.T) {
	if !*httpSuite {
		t.Skip("measures for minutes: run with -http.suite")
	}
	only, err := regexp.Compile(*httpCases)
	if err != nil {
		t.Fatalf("-http.cases: %v", err)
	}
	upstream := ""
	if *httpUpstream != "" {
		upstream = buildUpstream(t, *httpUpstream)
	} else {
		t.Log("envoyproxy/ratelimit: skipped (set -http.upstream or RATESYNC_RLS_UPSTREAM to its source tree)")
	}
	before := ""
	if *httpBefore != "" {
		before = buildNodeAt(t, *httpBefore)
	}
	cases := httpServices(t, upstream, before, *httpBefore, []int{1, 10000}, httpload.Config{Conns: *httpConns, Duration: *httpTime})
	cases = slices.DeleteFunc(cases, func(c *httpCase) bool { return !only.MatchString(c.String()) })
	if len(cases) == 0 {
		t.Fatalf("-http.cases %q matches no case", *httpCases)
	}
	scripted := scriptCommands(t)
	t.Logf("%d cases, %d rounds of %v each (+%v warm-up), %d connections per case, GOMAXPROCS %d (services: %s), %d CPUs",
		len(cases), *httpRounds, *httpTime, *httpWarmup, *httpConns, procs(), servicesProcs(), numCPU())
	ctx := context.Background()
	interleave(*httpRounds, len(cases), func(round, i int) {
		c := cases[i]
		var prof func()
		if round == 0 && *httpProfile != "" && c.svc.pprof != "" {
			prof = profile(t, c, *httpProfile, *httpWarmup, *httpTime)
		}
		s := measureHTTP(ctx, t, c, scripted, *httpWarmup)
		if prof != nil {
			prof()
		}
		t.Logf("round %d %-30s %s; %s", round+1, c, s.res, s.perDecision())
		c.samples = append(c.samples, s)
	})
	t.Logf("HTTP/1.1, %d connections, %d rounds of %v per case, median [range]:\n%s", *httpConns, *httpRounds, *httpTime, httpTable(cases))
	if before != "" {
		t.Logf("this tree's node against %s's, ratios taken round by round, median [range]:\n%s", *httpBefore, beforeTable(cases, *httpBefore))
	}
}

// beforeTable renders, for each case that has a twin run by the node of
// revision rev (service@rev), this tree's ratios to the twin, each taken
// within a round: requests/s, Redis command time (usec) and CPU per
// decision, Redis commands per decision (sent and run in scripts) and the
// service's CPU per request.
func beforeTable(cases []*httpCase, rev string) string {
	byName := map[string]*httpCase{}
	for _, c := range cases {
		byName[c.String()] = c
	}
	var b strings.Builder
	b.WriteString("| service | keys | x requests/s | x Redis usec / decision | x Redis CPU µs / decision | x Redis commands / decision | x service CPU µs / request |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, c := range cases {
		o := byName[fmt.Sprintf("%s@%s/keys=%d", c.svc.name, rev, c.keys)]
		if o == nil {
			continue
		}
		cell := func(f func(httpSample) float64) string { return ratioCell(column(c.samples, f), column(o.samples, f)) }
		usec, rcpu, cmds := "", "", ""
		if c.svc.redis != nil {
			usec = cell(func(s httpSample) float64 { return s.usec })
			rcpu = cell(func(s httpSample) float64 { return s.redisCPU })
			cmds = cell(func(s httpSample) float64 { return s.cmds + s.inScripts })
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", c.svc.name, thousands(c.keys),
			cell(func(s httpSample) float64 { return s.res.PerSecond() }), usec, rcpu, cmds,
			cell(func(s httpSample) float64 { return s.serverCPU }))
	}
	return b.String()
}

// profile starts a CPU profile of c's node that covers its measured run
// (which starts after warm and lasts run) and an execution trace of the
// run's middle second, and returns a function that waits for both and
// takes the allocation profile, writing the three into dir.
// Read them with go tool pprof (see bench/README.md).
func profile(t *testing.T, c *httpCase, dir string, warm, run time.Duration) (wait func()) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(dir, strings.ReplaceAll(c.String(), "/", "-"))
	secs := max(1, int((run-run/8)/time.Second))
	fetch := func(url, file string) error {
		resp, err := http.Get(url)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", url, resp.Status)
		}
		f, err := os.Create(file)
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, resp.Body); err != nil {
			_ = f.Close()
			return err
		}
		return f.Close()
	}
	done, traced := make(chan error, 1), make(chan error, 1)
	go func() {
		time.Sleep(warm + run/16) // into the measured run
		done <- fetch(fmt.Sprintf("%sprofile?seconds=%d", c.svc.pprof, secs), base+".cpu.pprof")
	}()
	go func() {
		time.Sleep(warm + run/2 - time.Second/2) // the middle second of the measured run
		traced <- fetch(c.svc.pprof+"trace?seconds=1", base+".trace")
	}()
	return func() {
		if err := <-done; err != nil {
			t.Errorf("%s: CPU profile: %v", c, err)
		}
		if err := <-traced; err != nil {
			t.Errorf("%s: execution trace: %v", c, err)
		}
		if err := fetch(c.svc.pprof+"allocs", base+".allocs.pprof"); err != nil {
			t.Errorf("%s: allocation profile: %v", c, err)
		}
		t.Logf("%s: profiles %s.cpu.pprof, %s.allocs.pprof, execution trace %s.trace", c, base, base, base)
	}
}

// measureHTTP warms c up for warm, then measures it once, then closes its
// connections (idle connections are not left on a service while the
// others are measured). scripted names the commands the store's scripts
// call (scriptCommands).
func measureHTTP(ctx context.Context, t *testing.T, c *httpCase, scripted map[string]bool, warm time.Duration) httpSample {
	t.Helper()
	defer c.driver.Close()
	w, err := c.driver.Warm(ctx, warm)
	if err != nil {
		t.Fatal(err)
	}
	if w.Errors == w.Requests {
		t.Fatalf("%s: warm-up: %s", c, w)
	}
	s := measure(t, c.svc, scripted, func() (httpload.Result, int64, error) {
		res, err := c.driver.Run(ctx)
		return res, res.Requests, err
	})
	if s.res.Errors > 0 || s.res.Status[http.StatusOK] != s.res.Requests {
		t.Errorf("%s: %s: want only 200 answers", c, s.res)
	}
	return s
}

// httpTable renders the cases' samples as the markdown table of
// BENCHMARKS.md: medians, with the range of requests/s and of the ratios
// to the baseline's and to envoyproxy/ratelimit's requests/s in the same
// round.
func httpTable(cases []*httpCase) string {
	byName := map[string]*httpCase{}
	for _, c := range cases {
		byName[c.String()] = c
	}
	rate := func(s httpSample) float64 { return s.res.PerSecond() }
	ratio := func(c *httpCase, other string) string {
		if o := byName[fmt.Sprintf("%s/keys=%d", other, c.keys)]; o != nil {
			return ratioCell(column(c.samples, rate), column(o.samples, rate))
		}
		return ""
	}
	var b strings.Builder
	b.WriteString("| service | requests | keys | requests/s | baseline | x baseline | x envoyproxy/ratelimit | p50 ms | p99 ms | Redis commands sent / decision | commands run in scripts / decision | Redis usec / decision | Redis CPU µs / decision | service CPU µs / request |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range cases {
		base, vsBase, vsUp := "", "", ""
		if c.baseline != "" {
			base, vsBase = c.baseline, ratio(c, c.baseline)
		}
		if c.rival {
			vsUp = ratio(c, svcUpstream)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %.2f | %.2f | %s |\n",
			c.svc.name, c.request, thousands(c.keys), rateCell(column(c.samples, rate)), base, vsBase, vsUp,
			median(c.samples, func(s httpSample) float64 { return ms(s.res.P50) }),
			median(c.samples, func(s httpSample) float64 { return ms(s.res.P99) }),
			costColumns(c.samples, c.svc.redis != nil))
	}
	return b.String()
}

// TestHTTPHarness runs TestHTTPSuite's harness briefly, without
// envoyproxy/ratelimit: every service but it, on 1 and 100 keys, 300
// requests each, answered 200, each case's ratio to its baseline taken,
// with the Redis commands counted where they belong.
func TestHTTPHarness(t *testing.T) {
	cases := httpServices(t, "", "", "", []int{1, 100}, httpload.Config{Conns: 4, Requests: 300})
	scripted := scriptCommands(t)
	for _, c := range cases {
		s := measureHTTP(context.Background(), t, c, scripted, 100*time.Millisecond)
		c.samples = append(c.samples, s)
		if s.res.Status[http.StatusOK] != 300 || s.res.Requests != 300 || s.res.PerSecond() <= 0 {
			t.Errorf("%s: %s, want 300 answers 200", c, s.res)
		}
		if p := s.misplaced(c.svc.redis != nil, c.svc.name == svcSync); p != "" {
			t.Errorf("%s: %s", c, p)
		}
		if counted := s.gcs >= 0; counted != (c.request == "POST /v1/check" && c.svc.name != svcFloor) {
			t.Errorf("%s: %.3f garbage collections per 1,000 decisions: want them counted for the node's /v1/check alone", c, s.gcs)
		}
	}
	tab := httpTable(cases)
	rows := strings.Split(strings.TrimSpace(tab), "\n")
	if len(rows) != len(cases)+2 {
		t.Fatalf("table of %d rows, want %d:\n%s", len(rows), len(cases)+2, tab)
	}
	for i, c := range cases {
		cells := strings.Split(rows[i+2], " | ")
		if c.baseline != "" && (cells[4] != c.baseline || !regexp.MustCompile(`^\d+\.\d\d \[`).MatchString(cells[5])) {
			t.Errorf("%s: baseline %q, ratio %q: want %s and a ratio", c, cells[4], cells[5], c.baseline)
		}
	}
	t.Logf("\n%s", tab)
}

// beforeTable pairs each case with its twin of the other revision and
// takes the ratios round by round: the median and the range of the
// per-round ratios, not the ratio of medians.
func TestBeforeTable(t *testing.T) {
	sample := func(reqs int64, rcpu, cmds, scripted, cpu float64) httpSample {
		return httpSample{res: httpload.Result{Requests: reqs, Elapsed: time.Second},
			cost: cost{usec: cpu / 10, redisCPU: rcpu, cmds: cmds, inScripts: scripted, serverCPU: cpu}}
	}
	r := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"}) // never dialed: marks the services that use Redis
	t.Cleanup(func() { _ = r.Close() })
	now := &httpCase{svc: &service{name: svcSync, redis: r}, keys: 10000, samples: []httpSample{
		sample(1000, 10, 0.1, 1.5, 50), sample(1200, 12, 0.1, 1.7, 60), sample(900, 9, 0.1, 1.5, 40)}}
	then := &httpCase{svc: &service{name: svcSync + "@abc123", redis: r}, keys: 10000, samples: []httpSample{
		sample(500, 20, 0.1, 4.9, 100), sample(1000, 24, 0.1, 4.9, 100), sample(900, 36, 0.1, 4.9, 80)}}
	local := &httpCase{svc: &service{name: svcLocal}, keys: 10000, samples: []httpSample{sample(3000, 0, 0, 0, 20)}}
	got := beforeTable([]*httpCase{now, then, local}, "abc123")
	want := "| service | keys | x requests/s | x Redis usec / decision | x Redis CPU µs / decision | x Redis commands / decision | x service CPU µs / request |\n" +
		"|---|---|---|---|---|---|---|\n" +
		"| redis-sync | 10,000 | 1.20 [1.00–2.00] | 0.50 [0.50–0.60] | 0.50 [0.25–0.50] | 0.32 [0.32–0.36] | 0.50 [0.50–0.60] |\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}
