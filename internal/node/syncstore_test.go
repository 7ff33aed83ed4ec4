package node

import (
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesync/ratesync/internal/node/config"
	"github.com/ratesync/ratesync/internal/testenv"
)

// Two nodes on one Redis or PostgreSQL, in a synchronous namespace:
// anchored windows, sliding logs and precision limits are decided in the
// store, so each node's answers through /v1/check count the other's hits,
// as one node's would.
func TestSynchronousStoresDecideAnchoredLogAndPrecision(t *testing.T) {
	stores := map[string]func(t *testing.T) string{
		config.StrategyRedis: func(t *testing.T) string {
			r := testenv.NewRedis(t)
			return fmt.Sprintf("url: %q\n    redis: {prefix: %q}", r.URL, r.Prefix)
		},
		config.StrategyPostgres: func(t *testing.T) string {
			return fmt.Sprintf("url: %q", testenv.NewPostgres(t).URL)
		},
	}
	for _, name := range []string{config.StrategyRedis, config.StrategyPostgres} {
		t.Run(name, func(t *testing.T) {
			yaml := fmt.Sprintf(`
namespaces:
  - name: shared
    strategy: %s
    %s
    sync_rate: 0
    window_sizes: [1s, 1m]
    clock: node
policies:
  - name: login
    namespace: shared
    limits: [{limit: 3, window: 1m, type: anchored}]
  - name: feed
    namespace: shared
    limits: [{limit: 2, window: 1m, type: sliding_log}]
`, name, stores[name](t))
			// A clock of whole seconds near the stores' own, which their
			// expiry follows; the namespace counts on it (clock: node).
			clk := newTestClock(time.Now().Truncate(time.Second).Add(time.Second))
			a := newTestNode(t, yaml, nil, clk.option())
			b := newTestNode(t, yaml, nil, clk.option())
			login, feed := `{"policy":"login","key":"k"}`, `{"policy":"feed","key":"k"}`
			precise := func(cost int) string {
				return fmt.Sprintf(`{"namespace":"shared","key":"k","cost":%d,"limits":[{"limit":10,"window":"3s","precision":"1s"}]}`, cost)
			}
			steps := []struct {
				n *Node
				checkStep
			}{
				{a, checkStep{"anchored: node a opens the window", 0, login, 200, 2, 60_000, 0}},
				{b, checkStep{"anchored: node b counts in it", 10 * time.Second, login, 200, 1, 50_000, 0}},
				{a, checkStep{"anchored: the third", 0, login, 200, 0, 50_000, 0}},
				{b, checkStep{"anchored: the fourth waits for the window's end", 0, login, 429, 0, 50_000, 50_000}},
				{a, checkStep{"anchored: a new window", 50 * time.Second, login, 200, 2, 60_000, 0}},
				{a, checkStep{"sliding log: node a", 0, feed, 200, 1, 60_000, 0}},
				{b, checkStep{"sliding log: node b, 20s later", 20 * time.Second, feed, 200, 0, 60_000, 0}},
				{a, checkStep{"sliding log: the third waits for the first to stop weighing", 0, feed, 429, 0, 60_000, 40_000}},
				{b, checkStep{"sliding log: 1ms before", 39_999 * time.Millisecond, feed, 429, 0, 20_001, 1}},
				{a, checkStep{"sliding log: then it passes", time.Millisecond, feed, 200, 0, 60_000, 0}},
				{a, checkStep{"precision: 4", 0, precise(4), 200, 6, 4000, 0}},
				{b, checkStep{"precision: 2", time.Second, precise(2), 200, 4, 4000, 0}},
				{a, checkStep{"precision: 1", time.Second, precise(1), 200, 3, 4000, 0}},
				{b, checkStep{"precision: 1 more", time.Second, precise(1), 200, 2, 4000, 0}},
				{a, checkStep{"precision: 3 do not fit", 249 * time.Millisecond, precise(3), 429, 2, 3751, 1}},
				{b, checkStep{"precision: 1 ms later they do", time.Millisecond, precise(3), 200, 0, 3750, 0}},
			}
			for _, s := range steps {
				runSteps(t, s.n, clk, []checkStep{s.checkStep})
			}
		})
	}
}

// The node's Redis client leaves resending a failed command to the syncer
// (which resends with the same identity), unless the URL sets max_retries,
// and bounds each command by its context (the store then calls on the
// caller's goroutine).
func TestRedisClientRetriesOnlyWhenTheURLSaysSo(t *testing.T) {
	for _, tc := range []struct {
		url     string
		cluster bool
		want    int
	}{
		{"redis://127.0.0.1:6379/0", false, 0},
		{"redis://127.0.0.1:6379/0?max_retries=2", false, 2},
		{"redis://127.0.0.1:6379?addr=127.0.0.1:6380", true, 0},
		{"redis://127.0.0.1:6379?addr=127.0.0.1:6380&max_retries=5", true, 5},
	} {
		ns := &config.NamespaceConfig{URL: tc.url, Redis: &config.RedisOptions{Cluster: tc.cluster}}
		newClient, err := ns.RedisClient()
		if err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		client := newClient()
		var got int
		var watches bool
		switch c := client.(type) {
		case *goredis.Client:
			got, watches = c.Options().MaxRetries, c.Options().ContextTimeoutEnabled
		case *goredis.ClusterClient:
			got, watches = c.Options().MaxRetries, c.Options().ContextTimeoutEnabled
		}
		_ = client.Close()
		if !watches {
			t.Errorf("%s: ContextTimeoutEnabled false: the store would run each call on a helper goroutine", tc.url)
		}
		if got = max(got, 0); got != tc.want { // -1 and 0 both mean none, as go-redis holds them
			t.Errorf("%s: MaxRetries %d, want %d", tc.url, got, tc.want)
		}
	}
}
