package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratesync/ratesync/internal/node/config"
	"github.com/ratesync/ratesync/internal/testenv"
)

// rlsFile writes an rls configuration file and returns its path.
func rlsFile(t testing.TB, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rls.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// shouldRateLimit asks n's service for one request of descriptors.
func shouldRateLimit(t testing.TB, n *Node, domain string, ds ...*ratelimitv3.RateLimitDescriptor) *pb.RateLimitResponse {
	t.Helper()
	resp, err := n.metrics.rls.decide(context.Background(), n.rls, &pb.RateLimitRequest{Domain: domain, Descriptors: ds})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

// The extension keys: several limits per descriptor, an algorithm, a
// burst. A rule with an algorithm is decided by ratesync's limiter, so a
// denied hit is not counted; an upstream rule beside it counts every hit.
const extensionConfig = `
domain: ext
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 100, name: hourly}
    rate_limits:
      - {unit: minute, requests_per_unit: 3, algorithm: sliding, name: per-minute}
  - key: burst
    rate_limit: {unit: second, requests_per_unit: 1, algorithm: token_bucket, burst: 4, name: bucket}
  - key: log
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: sliding_log}
`

func TestRLSExtensions(t *testing.T) {
	clock := newTestClock(time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC))
	n := newTestNode(t, fmt.Sprintf("rls:\n  config: %s\n  response_headers: true\n", rlsFile(t, extensionConfig)), nil, clock.option())

	t.Run("several limits", func(t *testing.T) {
		for i := range 3 {
			resp := shouldRateLimit(t, n, "ext", desc("user", "u"))
			if resp.OverallCode != ok {
				t.Fatalf("request %d: %v", i+1, resp)
			}
			if st := resp.Statuses[0]; st.CurrentLimit.Name != "per-minute" || st.LimitRemaining != uint32(2-i) {
				t.Errorf("request %d: the most constrained limit should show: %v", i+1, st)
			}
		}
		resp := shouldRateLimit(t, n, "ext", desc("user", "u"))
		st := resp.Statuses[0]
		if resp.OverallCode != over || st.CurrentLimit.Name != "per-minute" || st.CurrentLimit.Unit != pb.RateLimitResponse_RateLimit_MINUTE || st.LimitRemaining != 0 {
			t.Fatalf("request 4: %v", resp)
		}
		if st.DurationUntilReset.GetSeconds() < 1 || st.DurationUntilReset.GetSeconds() > 120 {
			t.Errorf("request 4: duration_until_reset %v", st.DurationUntilReset.AsDuration())
		}
		w, err := n.in.SlidingWindow(context.Background(), config.RLSNamespace, "ext|user=u", time.Hour)
		if err != nil || w.Current != 4 {
			t.Errorf("the upstream rule counted %v (%v), want every hit: 4", w.Current, err)
		}
		h := resp.ResponseHeadersToAdd
		if len(h) != 2 || h[0].Key != "RateLimit-Policy" || h[0].Value != `"per-minute";q=3;w=60` || h[1].Key != "RateLimit" || !strings.HasPrefix(h[1].Value, `"per-minute";r=0;t=`) {
			t.Errorf("response headers %v", h)
		}
	})

	t.Run("a token bucket with a burst", func(t *testing.T) {
		for i := range 4 {
			if resp := shouldRateLimit(t, n, "ext", desc("burst", "b")); resp.OverallCode != ok {
				t.Fatalf("request %d of the burst: %v", i+1, resp)
			}
		}
		if resp := shouldRateLimit(t, n, "ext", desc("burst", "b")); resp.OverallCode != over {
			t.Fatalf("past the burst: %v", resp)
		}
		clock.Advance(time.Second)
		if resp := shouldRateLimit(t, n, "ext", desc("burst", "b")); resp.OverallCode != ok {
			t.Fatalf("a second later: %v", resp)
		}
	})

	t.Run("a sliding log", func(t *testing.T) {
		for i, want := range []pb.RateLimitResponse_Code{ok, ok, over} {
			if resp := shouldRateLimit(t, n, "ext", desc("log", "l")); resp.OverallCode != want {
				t.Fatalf("request %d: %v", i+1, resp)
			}
			clock.Advance(20 * time.Second)
		}
		clock.Advance(5 * time.Second) // the first entry is 65s old
		if resp := shouldRateLimit(t, n, "ext", desc("log", "l")); resp.OverallCode != ok {
			t.Fatalf("after the first entry left: %v", resp)
		}
	})

	t.Run("metrics per rule", func(t *testing.T) {
		body := do(n.api, "GET", "/metrics", "").Body.String()
		for _, want := range []string{
			`ratesync_rls_total_hits_total{descriptor="ext.user",domain="ext"} 4`,
			`ratesync_rls_requests_total{result="over_limit"}`,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("metrics lack %s", want)
			}
		}
	})
}

func TestRLSConfigErrorsNameTheFileAndLine(t *testing.T) {
	for _, tc := range []struct {
		name, node, rules, want string
	}{
		{"unknown algorithm", "", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: gcra}\n",
			":4: algorithm 'gcra': must be one of sliding, fixed, anchored, sliding_log, token_bucket, leaky_bucket (a ratesync extension)"},
		{"burst on a window", "", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: sliding, burst: 3}\n",
			":4: burst: only with algorithm token_bucket or leaky_bucket, not sliding (a ratesync extension)"},
		{"an extension key out of place", "", "domain: d\ndescriptors:\n  - key: a\n    algorithm: sliding\n",
			":4: config error, key 'algorithm' belongs in a rate_limit (a ratesync extension)"},
		{"a sliding log that syncs periodically", "  strategy: memory\n  sync_rate: 1s\n", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: sliding_log}\n",
			":4: d.a: algorithm sliding_log: "},
		{"a missing file", "", "", "rls.config"},
	} {
		path := filepath.Join(t.TempDir(), "missing.yaml")
		if tc.rules != "" {
			path = rlsFile(t, tc.rules)
		}
		_, err := config.Parse("node.yaml", []byte(fmt.Sprintf("rls:\n  config: %s\n%s", path, tc.node)), envOf(nil))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "node.yaml:2: rls.config") {
			t.Errorf("%s: %v, want node.yaml:2: rls.config ... %q", tc.name, err, tc.want)
		}
	}
	_, err := config.Parse("node.yaml", []byte("namespaces: [{name: rls}]\nrls: {config: x}\n"), envOf(nil))
	if err == nil || !strings.Contains(err.Error(), `node.yaml:1: namespaces[0].name: "rls": the rls section counts in a namespace of this name`) {
		t.Errorf("a namespace named rls beside an rls section: %v", err)
	}
}

// Every error of an rls file is reported, each on a line of its own with
// the rls.config field's line, the file's line, the field and the value.
func TestRLSConfigErrorsAllAtOnce(t *testing.T) {
	f := rlsFile(t, "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1.5}\n  - key: b\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	_, err := config.Parse("node.yaml", []byte(fmt.Sprintf("node:\n  log_level: loud\nrls:\n  config: %s\n", f)), envOf(nil))
	want := []string{
		`node.yaml:2: node.log_level: "loud": must be one of debug, info, warn, error`,
		fmt.Sprintf(`node.yaml:4: rls.config: %q: %s:4: requests_per_unit: "1.5": must be a whole number from 0 to 4294967295`, f, f),
		fmt.Sprintf(`node.yaml:4: rls.config: %q: %s:6: invalid rate limit unit 'fortnight'`, f, f),
	}
	if err == nil || err.Error() != strings.Join(want, "\n") {
		t.Errorf("errors:\n%v\nwant:\n%s", err, strings.Join(want, "\n"))
	}
}

// With a periodic sync a decision costs no store round trip: each node
// decides from its own counts and the cluster's as of the last sync.
func TestRLSPeriodicSync(t *testing.T) {
	r := testenv.NewRedis(t)
	cfg := fmt.Sprintf("rls:\n  config: %s\n  strategy: redis\n  sync_rate: 1h\n  redis: {prefix: %s}\n",
		rlsFile(t, "domain: p\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 10}\n"), r.Prefix)
	env := map[string]string{config.EnvRedisURL: r.URL}
	a, b := newTestNode(t, cfg, env), newTestNode(t, cfg, env)
	for range 4 {
		shouldRateLimit(t, a, "p", desc("k", "v"))
	}
	if st := shouldRateLimit(t, b, "p", desc("k", "v")).Statuses[0]; st.LimitRemaining != 9 {
		t.Fatalf("before a sync, node b counts alone: remaining %d, want 9", st.LimitRemaining)
	}
	ctx := context.Background()
	for _, n := range []*Node{a, b, a} {
		if err := n.in.Sync(ctx, config.RLSNamespace); err != nil {
			t.Fatal(err)
		}
	}
	if st := shouldRateLimit(t, b, "p", desc("k", "v")).Statuses[0]; st.LimitRemaining != 4 {
		t.Errorf("after the syncs: remaining %d, want 4 (5 hits of a, b's 2 ... 6 in all)", st.LimitRemaining)
	}
}

// When the store is down, a synchronous rls namespace decides from the
// node's own counts at once, and says so in /readyz and the metrics.
func TestRLSStoreDown(t *testing.T) {
	r := testenv.PrivateRedis(t)
	cfg := fmt.Sprintf("rls:\n  config: %s\n  strategy: redis\n  sync_rate: 0s\n  redis: {timeout: 500ms}\n",
		rlsFile(t, "domain: p\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 3}\n"))
	n := newTestNode(t, cfg, map[string]string{config.EnvRedisURL: r.URL})
	shouldRateLimit(t, n, "p", desc("k", "v"))
	r.Stop(t)
	var took []time.Duration
	codes := []pb.RateLimitResponse_Code{}
	for range 4 {
		start := time.Now()
		codes = append(codes, shouldRateLimit(t, n, "p", desc("k", "v")).OverallCode)
		took = append(took, time.Since(start))
	}
	if fmt.Sprint(codes) != fmt.Sprint([]pb.RateLimitResponse_Code{ok, ok, over, over}) {
		t.Errorf("with the store down: %v, want the node's own counts to decide (OK, OK, OVER_LIMIT, OVER_LIMIT)", codes)
	}
	// The first exchange that fails may wait out the hit timeout (1s);
	// from then on the namespace is down and no decision waits for it: the
	// bound is half that timeout, generous for a noisy machine.
	t.Logf("decisions with the store down took %v", took)
	if slices.Max(took[1:]) >= 500*time.Millisecond {
		t.Errorf("decisions with the store down took %v: after the first, none may wait for the store", took)
	}
	if w := do(n.api, "GET", "/readyz", ""); w.Code != 503 || !strings.Contains(w.Body.String(), config.RLSNamespace) {
		t.Errorf("readyz with the store down: %d %s", w.Code, w.Body)
	}
	if body := do(n.api, "GET", "/metrics", "").Body.String(); !strings.Contains(body, `ratesync_store_up{namespace="rls"} 0`) {
		t.Errorf("store_up of the rls namespace is not 0")
	}
	r.Start(t)
	waitFor(t, 30*time.Second, "the hits counted while down reach the store", func() bool {
		_ = n.in.Sync(context.Background(), config.RLSNamespace)
		cnt, _ := r.Client(t).Keys(context.Background(), "*").Result()
		return len(cnt) > 0 && strings.Contains(do(n.api, "GET", "/metrics", "").Body.String(), `ratesync_store_up{namespace="rls"} 1`)
	})
}

// The rls section's store fields are a namespace's, and their errors name
// the rls section, once.
func TestRLSSectionErrors(t *testing.T) {
	f := rlsFile(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: anchored}\n")
	for _, tc := range []struct {
		yaml string
		want []string
	}{
		{"rls:\n  config: %s\n  strategy: bogus\n", []string{"test.yaml:3: rls.strategy: \"bogus\""}},
		{"rls:\n  config: %s\n  strategy: memory\n  sync_rate: 1s\n", []string{"test.yaml:2: rls.config", "d.k: algorithm anchored", "fixed"}},
		{"namespaces:\n  - name: rls\nrls:\n  config: %s\n", []string{`test.yaml:2: namespaces[0].name: "rls": the rls section counts in a namespace of this name`}},
		{"rls:\n  config: %s\n  dict_capacity: -5\n", []string{"test.yaml:3: rls.dict_capacity"}},
		{"rls:\n  config: %s\n  strategy: memory\n  sync_rate: -1s\n", []string{"test.yaml:4: rls.sync_rate"}},
		{"namespaces:\n  - name: api\n    dict_capacity: 1000\nrls:\n  config: %s\n  dict_capacity: 5000\n", []string{`test.yaml:6: rls.dict_capacity: "5000": namespace "api" (line 3) sets dict "default" to 1000`}},
	} {
		_, err := config.Parse("test.yaml", []byte(fmt.Sprintf(tc.yaml, f)), envOf(nil))
		if err == nil {
			t.Errorf("%q: accepted", tc.yaml)
			continue
		}
		msg := err.Error()
		for _, w := range tc.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%q: %v\nwant %q", tc.yaml, msg, w)
			}
		}
		if lines := strings.Count(msg, "\n") + 1; lines != 1 {
			t.Errorf("%q: %d errors, want one:\n%s", tc.yaml, lines, msg)
		}
	}
}

// Descriptors counted per value (detailed_metric, overrides) add at most
// maxDetailedSeries series; past it they count under their rule.
func TestRLSMetricsAreBounded(t *testing.T) {
	n := newTestNode(t, fmt.Sprintf("rls:\n  config: %s\n", rlsFile(t, "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")), nil)
	for i := range maxDetailedSeries + 500 {
		d := desc("user", fmt.Sprint("u", i))
		d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 10, Unit: 2}
		shouldRateLimit(t, n, "d", d)
	}
	mfs, err := n.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "ratesync_rls_total_hits_total" {
			continue
		}
		if got := len(mf.GetMetric()); got != maxDetailedSeries+1 {
			t.Errorf("%d series, want %d descriptors and their rule", got, maxDetailedSeries)
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "descriptor" && l.GetValue() == "d.user" && m.GetCounter().GetValue() != 500 {
					t.Errorf("the rule counted %v hits, want the 500 past the bound", m.GetCounter().GetValue())
				}
			}
		}
	}
}

// desc is a descriptor of key=value pairs.
func desc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

var (
	ok   = pb.RateLimitResponse_OK
	over = pb.RateLimitResponse_OVER_LIMIT
)
