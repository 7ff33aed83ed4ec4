package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/node/config"
	"github.com/ratesync/ratesync/internal/testenv"
)

// TestReloadRLSOnSIGHUPAndFileChange runs the node process with an rls
// section on a synchronous Redis namespace and changes a rule's limit in
// its configuration directory: on SIGHUP, then without a signal (the
// files are watched). Each new limit is answered over gRPC with the counts
// kept; a broken file keeps the running rules.
func TestReloadRLSOnSIGHUPAndFileChange(t *testing.T) {
	bin := buildNode(t)
	r := testenv.NewRedis(t)
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "rls"), 0o700); err != nil {
		t.Fatal(err)
	}
	rules := func(limit int) string {
		return fmt.Sprintf("domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: %d}\n", limit)
	}
	rulesFile := filepath.Join(dir, "rls", "edge.yaml")
	writeFile(t, rulesFile, rules(2))
	n := startRLSNode(t, bin, dir, fmt.Sprintf(`
rls:
  config: rls
  strategy: redis
  sync_rate: 0s
  redis: {prefix: %s}
`, r.Prefix), config.EnvRedisURL+"="+r.URL)
	awayFromHourEnd(t)
	hit := func(limit, remaining uint32) {
		t.Helper()
		resp := n.ask(t, "edge", desc("user", "u1"))
		checkStatus(t, fmt.Sprintf("limit %d", limit), resp.Statuses[0], want{ok, limit, remaining, ""})
	}
	hit(2, 1)

	// SIGHUP: the watcher may see the file first; either way the signal
	// makes a reload of its own, and the new limit applies.
	writeFile(t, rulesFile, rules(5))
	if err := n.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a reload on SIGHUP", func() bool {
		return strings.Contains(n.log(), `msg="configuration reloaded" trigger=SIGHUP`)
	})
	waitFor(t, 10*time.Second, "the new rules", func() bool { return strings.Contains(n.log(), "rls_domains=edge") })
	hit(5, 3)

	// No signal: the changed file is read within a second or so.
	reloadsBefore := strings.Count(n.log(), `msg="configuration reloaded" trigger="file changed"`)
	writeFile(t, rulesFile, rules(10))
	waitFor(t, 10*time.Second, "a reload on the file's change", func() bool {
		return strings.Count(n.log(), `msg="configuration reloaded" trigger="file changed"`) > reloadsBefore
	})
	hit(10, 7)

	// A broken file keeps the running rules; the error names file:line.
	writeFile(t, rulesFile, strings.Replace(rules(10), "unit: hour", "unit: fortnight", 1))
	waitFor(t, 10*time.Second, "the failed reload", func() bool {
		return strings.Contains(n.log(), "configuration reload failed")
	})
	if !strings.Contains(n.log(), "edge.yaml:4: invalid rate limit unit 'fortnight'") {
		t.Errorf("the error does not name the file and line:\n%s", n.log())
	}
	hit(10, 6)
	if got := metricValue(t, n.url, `ratesync_config_reloads_total{result="error"}`); got != 1 {
		t.Errorf("reload errors %v, want 1", got)
	}
	if got := metricValue(t, n.url, `ratesync_config_reloads_total{result="ok"}`); got < 2 {
		t.Errorf("reloads applied %v, want at least 2", got)
	}
	if code := n.stop(t, syscall.SIGTERM); code != 0 {
		t.Errorf("exit code %d after SIGTERM", code)
	}
}

// metricValue reads one sample of the node's /metrics.
func metricValue(t *testing.T, base, series string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("no %s in /metrics:\n%s", series, body)
	return 0
}
