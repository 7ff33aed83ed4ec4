package node

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/node/config"
	"github.com/ratesync/ratesync/internal/testenv"
	"github.com/ratesync/ratesync/namespace"
)

// clock: store is the default of a namespace with a store, node that of a
// local one; the file's value reaches the namespace's configuration, the
// rls section's too.
func TestClockConfig(t *testing.T) {
	cfg := testConfig(t, fmt.Sprintf(`
namespaces:
  - {name: local}
  - {name: stored, strategy: memory}
  - {name: own, strategy: memory, clock: node}
  - {name: said, strategy: memory, clock: store}
rls:
  config: %s
  strategy: memory
  clock: node
`, rlsFile(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")), nil)
	want := map[string]struct {
		file  string
		clock namespace.Clock
	}{
		"local":             {config.ClockNode, namespace.NodeClock},
		"stored":            {config.ClockStore, namespace.StoreClock},
		"own":               {config.ClockNode, namespace.NodeClock},
		"said":              {config.ClockStore, namespace.StoreClock},
		config.RLSNamespace: {config.ClockNode, namespace.NodeClock},
	}
	for _, ns := range cfg.Namespaces {
		w, ok := want[ns.Name]
		if !ok {
			t.Fatalf("unexpected namespace %q", ns.Name)
		}
		if got := ns.Namespace(nil).Clock; ns.Clock != w.file || got != w.clock {
			t.Errorf("namespace %q: clock %q (%v), want %q (%v)", ns.Name, ns.Clock, got, w.file, w.clock)
		}
	}
	if cfg.RLS.Clock != config.ClockNode {
		t.Errorf("rls.clock = %q, want node", cfg.RLS.Clock)
	}
}

var offsetRE = regexp.MustCompile(`(?m)^ratesync_clock_offset_seconds\{namespace="api"\} (\S+)$`)

// /metrics exports each namespace's offset from its store's clock once
// measured: here the test's servers, on this machine, so near 0.
func TestClockOffsetMetric(t *testing.T) {
	stores := map[string]func(t *testing.T) string{
		config.StrategyRedis: func(t *testing.T) string {
			r := testenv.NewRedis(t)
			return fmt.Sprintf("url: %q\n    redis: {prefix: %s}", r.URL, r.Prefix)
		},
		config.StrategyPostgres: func(t *testing.T) string { return fmt.Sprintf("url: %q", testenv.NewPostgres(t).URL) },
	}
	for _, name := range []string{config.StrategyRedis, config.StrategyPostgres} {
		t.Run(name, func(t *testing.T) {
			n := newTestNode(t, fmt.Sprintf(`
namespaces:
  - name: api
    strategy: %s
    %s
    sync_rate: 100ms
    window_sizes: [1s]
`, name, stores[name](t)), nil)
			var got string
			waitFor(t, 10*time.Second, "the offset metric", func() bool {
				m := offsetRE.FindStringSubmatch(do(n.api, "GET", "/metrics", "").Body.String())
				if m != nil {
					got = m[1]
				}
				return m != nil
			})
			v, err := strconv.ParseFloat(got, 64)
			if err != nil || v < -0.1 || v > 0.1 {
				t.Fatalf("ratesync_clock_offset_seconds = %q, want a number within 0.1 of 0 (the server runs on this machine)", got)
			}
		})
	}
}
