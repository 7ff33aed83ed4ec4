package integration

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/testenv"
	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/postgres"
)

// storeVia opens a private store of kind behind a fault proxy: the store
// the nodes use through the proxy, and the proxy.
func storeVia(t *testing.T, kind string) (strategy.Strategy, *testenv.Proxy) {
	t.Helper()
	switch kind {
	case "redis":
		r := testenv.NewRedis(t)
		p := testenv.NewProxy(t, r.Addr)
		return redisStoreVia(t, r, p), p
	default:
		pg := testenv.NewPostgres(t)
		if _, err := postgres.New(context.Background(), pg.Pool(t), postgres.Config{}); err != nil { // migrated directly
			t.Fatal(err)
		}
		p := testenv.NewProxy(t, pg.Addr())
		s, err := postgres.New(context.Background(), (&testenv.Postgres{URL: pg.URLVia(p)}).Pool(t), postgres.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return s, p
	}
}

// Leased namespaces under faults: four nodes, 2,000 requests a second on
// one key with a limit of 100 a second (fixed windows), through a proxy
// that drops 20% or 50% of the store's replies, or cuts the store off for
// 5 s, or with a node that stops mid-run without a word (a crash: what it
// held stays counted). In every window the nodes decided in, they admit at
// most the limit between them; while the store answers they admit most of
// it. Cut off, a node spends what it holds, then refuses until a window
// starts after the outage has lasted a sync and two call timeouts, and
// decides on its share there (the limit divided by the four nodes it
// counted): through a store that loses replies it never does.
func TestLeasesUnderFaults(t *testing.T) {
	for _, kind := range []string{"redis", "postgres"} {
		for _, fault := range []string{"lost-20", "lost-50", "cut-5s", "crash"} {
			t.Run(kind+"/"+fault, func(t *testing.T) {
				leasesUnderFault(t, kind, fault, true)
			})
		}
	}
}

// Synchronous namespaces through the same faults: every decision in the
// store, and while it does not answer, the store-down behaviour's share,
// which a 5 s cut never reaches (a synchronous node probes the store at
// most 5 s apart, so it shares only once an outage has lasted that and two
// call timeouts): in every window the nodes admit at most the limit.
func TestSynchronousUnderFaults(t *testing.T) {
	for _, kind := range []string{"redis", "postgres"} {
		for _, fault := range []string{"lost-20", "lost-50", "cut-5s", "crash"} {
			t.Run(kind+"/"+fault, func(t *testing.T) {
				leasesUnderFault(t, kind, fault, false)
			})
		}
	}
}

// leasesUnderFault runs one case of TestLeasesUnderFaults, or of
// TestSynchronousUnderFaults when leased is false.
func leasesUnderFault(t *testing.T, kind, fault string, leased bool) {
	const (
		nodes = 4
		limit = 100
	)
	window := time.Second
	store, proxy := storeVia(t, kind)
	rate := 250 * time.Millisecond
	if !leased {
		rate = namespace.Synchronous
	}
	// The nodes count on their own clock, one clock in one process, so
	// that the window of each hit is known to the millisecond whatever a
	// lossy store does to the measure of its clock (store time is tested
	// on its own).
	c := newCluster(t, ClusterConfig{Nodes: nodes, SyncRate: rate, Strategy: store, Leases: leased, Clock: namespace.NodeClock,
		WindowSizes: []time.Duration{window}, Options: []ratelimiting.Option{ratelimiting.WithSyncTimeout(5*time.Second, time.Second)}})
	lim := ratelimiting.Limit{Limit: limit, Window: window, Algorithm: ratelimiting.FixedWindow}
	ctx := context.Background()
	duration := 4 * time.Second
	if fault == "cut-5s" {
		// The nodes count each other through the store every
		// second at first: let every node count all four.
		warm := time.Now().Add(2500 * time.Millisecond)
		for time.Now().Before(warm) {
			for _, in := range c.Nodes {
				if _, err := in.AllowOne(ctx, c.Namespace(), "warm", 1, lim); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		duration = 9 * time.Second
	}
	var crashed atomic.Bool
	load := Load{Rate: 2000, Duration: duration, Limits: []ratelimiting.Limit{lim}, Start: nextBoundary(window)}
	go func() {
		time.Sleep(time.Until(load.Start.Add(time.Second)))
		switch fault {
		case "lost-20":
			proxy.DropShare(0.2)
		case "lost-50":
			proxy.DropShare(0.5)
		case "cut-5s":
			proxy.Cut()
			time.Sleep(5 * time.Second)
			proxy.Restore()
		case "crash":
			time.Sleep(500 * time.Millisecond)
			crashed.Store(true)
		}
	}()
	res, err := run(ctx, nodes, load, func(ctx context.Context, node int, key string, cost float64) (answer, error) {
		if node == 0 && crashed.Load() {
			return answer{}, nil // the crashed node answers nothing
		}
		st, err := c.Nodes[node].AllowOne(ctx, c.Namespace(), key, cost, lim)
		return answer{allowed: st.Allowed, reset: st.Reset}, err
	})
	proxy.DropShare(0)
	if err != nil {
		t.Fatal(err)
	}
	noErrors(t, res)
	for _, d := range res.Decisions {
		// The window each hit was counted in, by the node's Reset, ends
		// while the hit was asked or answered, or the attribution is wrong.
		if s := d.DecidedWindow(window); d.Allowed {
			if at := s.Add(window - d.Reset); at.Before(d.At.Add(-clockSlack)) || at.After(d.At.Add(d.Latency+clockSlack)) {
				t.Fatalf("a hit asked at %v and answered %v later was counted in the window starting %v, %v before its end", d.At, d.Latency, s, d.Reset)
			}
		}
	}
	per := res.PerDecidedWindow(window)
	counts := admissions(per)
	for _, w := range per {
		if w.Admitted > limit {
			t.Errorf("window %v (%v into the run) admitted %d > limit %d", w.Start, w.Start.Sub(load.Start), w.Admitted, limit)
		}
	}
	var stats []string
	calls := uint64(0)
	for _, in := range c.Nodes {
		for _, st := range in.Stats() {
			calls += st.Leases.StoreCalls
			stats = append(stats, fmt.Sprintf("%d nodes seen, %d fallbacks", st.Nodes, st.Leases.Fallbacks))
		}
	}
	var shown []string
	for _, w := range per {
		shown = append(shown, fmt.Sprintf("%v:%d", w.Start.Sub(load.Start), w.Admitted))
	}
	t.Logf("%s, %s: admissions per window (by its start into the run) %v (limit %d, offered %d a window); %.2f grant requests per 100 decisions; %v; %d replies dropped",
		kind, fault, shown, limit, 2000, float64(calls)*100/float64(len(res.Decisions)), stats, proxy.Dropped())
	if fault == "cut-5s" && leased {
		// The windows that start 2.25 s (a sync and two call
		// timeouts) into the cut, and before its end, are shared.
		shared := 0
		for _, w := range per {
			if into := w.Start.Sub(load.Start); into >= 4*time.Second && into < 6*time.Second {
				shared = max(shared, w.Admitted)
			}
		}
		if shared < limit/2 {
			t.Errorf("cut off, no window admitted half the limit on the nodes' shares: %v", counts)
		}
	}
	if fault == "lost-20" || fault == "crash" {
		// Whole windows before and after the fault admit most
		// of the limit.
		best := 0
		for _, n := range counts {
			best = max(best, n)
		}
		if best < limit*9/10 {
			t.Errorf("no window admitted 90%% of the limit: %v", counts)
		}
	}
}
