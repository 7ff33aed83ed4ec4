package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/ratesync/ratesync/integration"
	"github.com/ratesync/ratesync/ratelimiting"
)

const header = "store,nodes,sync_rate,limit,window,offered_per_s,max_admitted_per_window,over_admission_pct,bound_pct"

type row struct {
	store     string
	nodes     int
	sync      time.Duration
	limit     float64
	window    time.Duration
	offered   float64
	maxAdm    int
	overPct   float64
	boundPct  float64
	nearLimit bool
	errors    int
}

func (r row) csv() string {
	store := r.store
	if r.nearLimit {
		store += "+near-limit"
	}
	return fmt.Sprintf("%s,%d,%s,%g,%s,%.1f,%d,%.1f,%.1f", store, r.nodes, r.sync, r.limit, r.window, r.offered, r.maxAdm, r.overPct, r.boundPct)
}

// measure runs one configuration and returns its row.
func measure(ctx context.Context, o *options, st *store, nodes int, sync time.Duration) (row, error) {
	rtt, err := st.rtt(ctx)
	if err != nil {
		return row{}, err
	}
	c, err := integration.NewCluster(integration.ClusterConfig{
		Nodes:       nodes,
		Namespace:   fmt.Sprintf("acc-%d-%d-%d", nodes, sync.Milliseconds(), time.Now().UnixNano()),
		SyncRate:    sync,
		Strategy:    st.s,
		WindowSizes: []time.Duration{o.window},
		NearLimit:   o.nearLimit,
	})
	if err != nil {
		return row{}, err
	}
	defer c.Close(context.Background())
	spread, err := integration.ParseSpread(o.spread)
	if err != nil {
		return row{}, err
	}
	// Start on a window boundary so that every window is whole, the first
	// one included.
	res, err := integration.Run(ctx, c, integration.Load{
		Start: time.UnixMilli((time.Now().UnixMilli()/o.window.Milliseconds() + 1) * o.window.Milliseconds()),
		Rate:  o.rate, Poisson: o.poisson, Keys: o.keys, Zipf: o.zipf, Spread: spread,
		Duration: o.duration, Workers: o.workers, Seed: uint64(nodes*1000) + uint64(sync.Milliseconds()),
		Limits: []ratelimiting.Limit{{Limit: o.limit, Window: o.window, Fixed: !o.sliding}},
	})
	if err != nil {
		return row{}, err
	}
	nerr, first := res.Errors()
	if nerr > 0 {
		fmt.Fprintf(os.Stderr, "accuracy: %d decisions failed, first: %v\n", nerr, first)
	}
	maxAdm := maxAdmitted(res, o)
	var pushes, checks uint64
	for _, in := range c.Nodes {
		for _, st := range in.Stats() {
			pushes, checks = pushes+st.Sync.Pushes, checks+st.Sync.Checks
		}
	}
	var perWindow []string
	for _, w := range res.PerWindow(o.window) {
		perWindow = append(perWindow, fmt.Sprint(w.Admitted))
	}
	fmt.Fprintf(os.Stderr, "accuracy: %d nodes, sync %v: admitted %d of %d (per window %s); store calls: %d pushes, %d checks (%.1f/s)\n",
		nodes, sync, res.Admitted(), len(res.Decisions), strings.Join(perWindow, " "), pushes, checks, float64(pushes+checks)/o.duration.Seconds())
	lambda := res.OfferedRate(0)
	t := sync + rtt
	return row{
		store: o.store, nodes: nodes, sync: sync, limit: o.limit, window: o.window,
		offered: o.rate, maxAdm: maxAdm,
		overPct:   100 * (float64(maxAdm) - o.limit) / o.limit,
		boundPct:  100 * lambda * t.Seconds() / o.limit,
		nearLimit: o.nearLimit, errors: nerr,
	}, nil
}

// maxAdmitted is the most hits of one key admitted in one window: whole
// fixed windows, or any span of the window's length for sliding limits.
func maxAdmitted(res *integration.Result, o *options) int {
	if !o.sliding {
		return res.MaxPerWindow(o.window)
	}
	best := 0
	byKey := map[int][]time.Time{}
	for _, d := range res.Decisions {
		if d.Allowed {
			byKey[d.Key] = append(byKey[d.Key], d.At)
		}
	}
	for _, ts := range byKey {
		slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
		j := 0
		for i := range ts {
			for ts[i].Sub(ts[j]) >= o.window {
				j++
			}
			best = max(best, i-j+1)
		}
	}
	return best
}

func writeCSV(path string, rows []row) error {
	var b strings.Builder
	b.WriteString(header + "\n")
	for _, r := range rows {
		b.WriteString(r.csv() + "\n")
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
