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

const (
	header     = "store,nodes,sync_rate,limit,window,offered_per_s,max_admitted_per_window,over_admission_pct,bound_pct"
	rateHeader = "store,algorithm,nodes,sync_rate,limit,window,burst,offered_per_s,duration,admitted,long_run_rate,max_admitted_in_window,allowed_in_window,burst_pct"
	// precisionHeader is rateHeader with -precision.
	precisionHeader = "store,algorithm,precision,nodes,sync_rate,limit,window,burst,offered_per_s,duration,admitted,long_run_rate,max_admitted_in_window,allowed_in_window,burst_pct"
)

// header returns the CSV header of the runs' rows.
func (o *options) header() string {
	switch {
	case o.precisions != nil:
		return precisionHeader
	case o.buckets():
		return rateHeader
	}
	return header
}

type row struct {
	store     string
	alg       ratelimiting.Algorithm
	precision time.Duration // a sliding window's sub-window, 0 for none
	rates     bool          // the long-run format (rateHeader)
	precCol   bool          // with the precision column (precisionHeader)
	nodes     int
	sync      time.Duration
	limit     float64
	window    time.Duration
	burst     float64 // a bucket's capacity; 0 for windows
	offered   float64
	duration  time.Duration
	admitted  int
	longRun   float64
	maxAdm    int
	allowed   float64 // allowed_in_window
	overPct   float64 // over_admission_pct, burst_pct
	boundPct  float64
	nearLimit bool
	errors    int
}

func (r row) csv() string {
	store := r.store
	if r.nearLimit {
		store += "+near-limit"
	}
	if r.rates {
		alg := r.alg.String()
		if r.precCol {
			alg += "," + r.precision.String()
		}
		return fmt.Sprintf("%s,%s,%d,%s,%g,%s,%g,%.1f,%s,%d,%.4f,%d,%g,%.1f", store, alg, r.nodes, r.sync, r.limit, r.window, r.burst,
			r.offered, r.duration, r.admitted, r.longRun, r.maxAdm, r.allowed, r.overPct)
	}
	return fmt.Sprintf("%s,%d,%s,%g,%s,%.1f,%d,%.1f,%.1f", store, r.nodes, r.sync, r.limit, r.window, r.offered, r.maxAdm, r.overPct, r.boundPct)
}

// limitOf returns the limit run sp checks.
func (o *options) limitOf(sp spec) ratelimiting.Limit {
	l := ratelimiting.Limit{Limit: o.limit, Window: o.window, Algorithm: sp.alg, Precision: sp.precision}
	if isBucket(sp.alg) {
		l.Burst = o.burst
	}
	return l
}

// windowSizes returns the window sizes of run sp's namespace: -window, and
// the precision's.
func (o *options) windowSizes(sp spec) []time.Duration {
	sizes := []time.Duration{o.window}
	if sp.precision > 0 && sp.precision != o.window {
		sizes = append(sizes, sp.precision)
	}
	return sizes
}

// measure makes one run and returns its row.
func measure(ctx context.Context, o *options, st *store, sp spec) (row, error) {
	rtt, err := st.rtt(ctx)
	if err != nil {
		return row{}, err
	}
	c, err := integration.NewCluster(integration.ClusterConfig{
		Nodes:       sp.nodes,
		Namespace:   fmt.Sprintf("acc-%s-%d-%d-%d-%d", sp.alg, sp.precision.Milliseconds(), sp.nodes, sp.sync.Milliseconds(), time.Now().UnixNano()),
		SyncRate:    sp.sync,
		Strategy:    st.s,
		WindowSizes: o.windowSizes(sp),
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
	if err := warmUp(ctx, c, o.limitOf(sp)); err != nil {
		return row{}, err
	}
	// Start on a window boundary so that every window is whole, the first
	// one included.
	res, err := integration.Run(ctx, c, integration.Load{
		Start: time.UnixMilli((time.Now().UnixMilli()/o.window.Milliseconds() + 1) * o.window.Milliseconds()),
		Rate:  o.rate, Poisson: o.poisson, Keys: o.keys, Zipf: o.zipf, Spread: spread,
		Duration: o.duration, Workers: o.workers, Seed: uint64(sp.nodes*1000) + uint64(sp.sync.Milliseconds()),
		Limits: []ratelimiting.Limit{o.limitOf(sp)},
	})
	if err != nil {
		return row{}, err
	}
	nerr, first := res.Errors()
	if nerr > 0 {
		fmt.Fprintf(os.Stderr, "accuracy: %d decisions failed, first: %v\n", nerr, first)
	}
	logRun(o, c, sp, res)
	r := newRow(o, sp, res)
	r.boundPct = 100 * res.OfferedRate(0) * (sp.sync + rtt).Seconds() / o.limit
	r.errors = nerr
	return r, nil
}

// warmUp makes every node decide once, a peek (cost 0) at a key the load
// does not use, so that no node's first decision of the run waits for the
// node's first store call.
func warmUp(ctx context.Context, c *integration.Cluster, l ratelimiting.Limit) error {
	for i, in := range c.Nodes {
		if _, err := in.Allow(ctx, c.Namespace(), "warm-up", 0, l); err != nil {
			return fmt.Errorf("node %d: warm-up: %w", i, err)
		}
	}
	return nil
}

// logRun prints what a run admitted per window, and its store calls, to
// standard error: per epoch-aligned window for window limits (by key, most
// first), per window from the run's start for buckets.
func logRun(o *options, c *integration.Cluster, sp spec, res *integration.Result) {
	var pushes, checks uint64
	for _, in := range c.Nodes {
		for _, st := range in.Stats() {
			pushes, checks = pushes+st.Sync.Pushes, checks+st.Sync.Checks
		}
	}
	var counts []string
	if isBucket(sp.alg) {
		for _, n := range admittedPer(res, o.window) {
			counts = append(counts, fmt.Sprint(n))
		}
	} else {
		for _, w := range res.PerWindow(o.window) {
			counts = append(counts, fmt.Sprint(w.Admitted))
		}
	}
	alg := sp.alg.String()
	if sp.precision > 0 {
		alg += " precision " + sp.precision.String()
	}
	fmt.Fprintf(os.Stderr, "accuracy: %s, %d nodes, sync %v: admitted %d of %d (per window %s); store calls: %d pushes, %d checks (%.1f/s)\n",
		alg, sp.nodes, sp.sync, res.Admitted(), len(res.Decisions), strings.Join(counts, " "), pushes, checks, float64(pushes+checks)/o.duration.Seconds())
}

// newRow computes a run's figures (see the command's doc).
func newRow(o *options, sp spec, res *integration.Result) row {
	l := o.limitOf(sp)
	r := row{
		store: o.store, alg: sp.alg, precision: sp.precision, rates: o.rates(), precCol: o.precisions != nil, nodes: sp.nodes, sync: sp.sync,
		limit: o.limit, window: o.window, offered: o.rate, duration: o.duration,
		admitted: res.Admitted(), allowed: o.limit, nearLimit: o.nearLimit,
	}
	rate := o.limit / o.window.Seconds() // r, hits per second
	var atOnce float64
	if isBucket(sp.alg) {
		r.burst = capacity(l)
		atOnce = r.burst
		r.allowed = r.burst + o.limit
	}
	r.longRun = (float64(r.admitted) - atOnce) / (rate * o.duration.Seconds())
	if sp.alg == ratelimiting.FixedWindow {
		r.maxAdm = res.MaxPerWindow(o.window)
	} else {
		r.maxAdm = maxInSpan(res, o.window)
	}
	r.overPct = 100 * (float64(r.maxAdm) - r.allowed) / r.allowed
	return r
}

// capacity returns a bucket limit's capacity b: Burst, or Limit when 0.
func capacity(l ratelimiting.Limit) float64 {
	if l.Burst == 0 {
		return l.Limit
	}
	return l.Burst
}

// maxInSpan is the most hits of one key admitted in any span [t, t+span),
// by the time the node was asked.
func maxInSpan(res *integration.Result, span time.Duration) int {
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
			for ts[i].Sub(ts[j]) >= span {
				j++
			}
			best = max(best, i-j+1)
		}
	}
	return best
}

// admittedPer returns the hits admitted in each span of size from the run's
// start, by the time the node was asked.
func admittedPer(res *integration.Result, size time.Duration) []int {
	out := make([]int, (res.End.Sub(res.Start)+size-1)/size)
	for _, d := range res.Decisions {
		if i := int(d.At.Sub(res.Start) / size); d.Allowed && i >= 0 && i < len(out) {
			out[i]++
		}
	}
	return out
}

func writeCSV(path, header string, rows []row) error {
	var b strings.Builder
	b.WriteString(header + "\n")
	for _, r := range rows {
		b.WriteString(r.csv() + "\n")
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
