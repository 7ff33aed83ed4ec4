package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ratesync/ratesync/integration"
	"github.com/ratesync/ratesync/ratelimiting"
)

const (
	header     = "store,nodes,sync_rate,limit,window,offered_per_s,max_admitted_per_window,over_admission_pct,min_admitted_pct,store_calls_per_100,bound_pct"
	rateHeader = "store,algorithm,nodes,sync_rate,limit,window,burst,offered_per_s,duration,admitted,long_run_rate,max_admitted_in_window,allowed_in_window,burst_pct,min_admitted_pct,store_calls_per_100"
	// precisionHeader is rateHeader with -precision.
	precisionHeader = "store,algorithm,precision,nodes,sync_rate,limit,window,burst,offered_per_s,duration,admitted,long_run_rate,max_admitted_in_window,allowed_in_window,burst_pct,min_admitted_pct,store_calls_per_100"
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
	minPct    float64 // min_admitted_pct
	calls     float64 // store_calls_per_100
	boundPct  float64
	nearLimit bool
	leased    bool
	errors    int
	// maxDecided is, for a fixed window, the most hits of one key admitted
	// in one whole window as the nodes counted them (decidedWindows).
	maxDecided int
}

// decidedWindow is a key's fixed window, by its end (Unix ms).
type decidedWindow struct {
	key string
	end int64
}

// decidedWindows counts a run's admitted hits of a fixed window limit per
// key and window as the nodes counted them: a hit asked just before a
// window's end may be decided in the next window, where the counts by the
// time of the asking (max_admitted_per_window) put it in the window before.
type decidedWindows struct {
	mu sync.Mutex
	n  map[decidedWindow]int
}

// add counts an admitted hit of key whose answer, read at about end, said
// its window ends then: the multiple of size nearest end.
func (w *decidedWindows) add(key string, end time.Time, size time.Duration) {
	ms := size.Milliseconds()
	e := (end.UnixMilli() + ms/2) / ms * ms
	w.mu.Lock()
	w.n[decidedWindow{key, e}]++
	w.mu.Unlock()
}

// max returns the most hits of one key counted in one window wholly
// inside [start, end].
func (w *decidedWindows) max(start, end time.Time, size time.Duration) int {
	best := 0
	for k, n := range w.n {
		if k.end-size.Milliseconds() >= start.UnixMilli() && k.end <= end.UnixMilli() {
			best = max(best, n)
		}
	}
	return best
}

func (r row) csv() string {
	store := r.store
	if r.nearLimit {
		store += "+near-limit"
	}
	if r.leased {
		store += "+leases"
	}
	if r.rates {
		alg := r.alg.String()
		if r.precCol {
			alg += "," + r.precision.String()
		}
		return fmt.Sprintf("%s,%s,%d,%s,%g,%s,%g,%.1f,%s,%d,%.4f,%d,%g,%.1f,%.1f,%.2f", store, alg, r.nodes, r.sync, r.limit, r.window, r.burst,
			r.offered, r.duration, r.admitted, r.longRun, r.maxAdm, r.allowed, r.overPct, r.minPct, r.calls)
	}
	return fmt.Sprintf("%s,%d,%s,%g,%s,%.1f,%d,%.1f,%.1f,%.2f,%.1f", store, r.nodes, r.sync, r.limit, r.window, r.offered, r.maxAdm, r.overPct, r.minPct, r.calls, r.boundPct)
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
	counted, err := countCalls(st.s)
	if err != nil {
		return row{}, err
	}
	lease := ""
	if sp.leased {
		lease = "-leased"
	}
	c, err := integration.NewCluster(integration.ClusterConfig{
		Nodes:       sp.nodes,
		Namespace:   fmt.Sprintf("acc-%s-%d-%d-%d%s-%d", sp.alg, sp.precision.Milliseconds(), sp.nodes, sp.sync.Milliseconds(), lease, time.Now().UnixNano()),
		SyncRate:    sp.sync,
		Strategy:    counted,
		WindowSizes: o.windowSizes(sp),
		NearLimit:   o.nearLimit,
	})
	if err != nil {
		return row{}, err
	}
	defer c.Close(context.Background())
	if sp.leased {
		if err := leaseAll(c); err != nil {
			return row{}, err
		}
	}
	if err := warmUp(ctx, c, o.limitOf(sp)); err != nil {
		return row{}, err
	}
	spread, over, nodeOf := o.arrivals(sp.nodes)
	decided := &decidedWindows{n: map[decidedWindow]int{}}
	limits := []ratelimiting.Limit{o.limitOf(sp)}
	// Start on a window boundary so that every window is whole, the first
	// one included; count the store calls from there.
	start := time.UnixMilli((time.Now().UnixMilli()/o.window.Milliseconds() + 1) * o.window.Milliseconds())
	var calls0 uint64
	var leases0 leaseSum
	marked := make(chan struct{})
	mark := time.AfterFunc(time.Until(start), func() {
		calls0, leases0 = counted.calls(), leaseStats(c)
		close(marked)
	})
	res, err := integration.RunWith(ctx, over, integration.Load{
		Start: start,
		Rate:  o.rate, Poisson: o.poisson, Keys: o.keys, Zipf: o.zipf, Spread: spread,
		Duration: o.duration, Workers: o.workers, Seed: uint64(sp.nodes*1000) + uint64(sp.sync.Milliseconds()),
		Limits: limits,
	}, func(ctx context.Context, node int, key string, cost float64) (bool, error) {
		d, err := c.Nodes[nodeOf(node)].Allow(ctx, c.Namespace(), key, cost, limits...)
		if err == nil && d.Allowed && sp.alg == ratelimiting.FixedWindow && len(d.Limits) > 0 {
			decided.add(key, time.Now().Add(d.Limits[0].Reset), o.window)
		}
		return d.Allowed, err
	})
	if err != nil {
		mark.Stop()
		return row{}, err
	}
	<-marked
	calls := counted.calls() - calls0
	ls := leaseStats(c).minus(leases0)
	for i := range res.Decisions {
		res.Decisions[i].Node = nodeOf(res.Decisions[i].Node)
	}
	nerr, first := res.Errors()
	if nerr > 0 {
		fmt.Fprintf(os.Stderr, "accuracy: %d decisions failed, first: %v\n", nerr, first)
	}
	r := newRow(o, sp, res)
	if sp.alg == ratelimiting.FixedWindow {
		r.maxDecided = decided.max(res.Start, res.End, o.window)
	}
	logRun(o, c, sp, res, r, calls, ls)
	if sp.leased {
		calls = ls.StoreCalls
	}
	if len(res.Decisions) > 0 {
		r.calls = 100 * float64(calls) / float64(len(res.Decisions))
	}
	r.boundPct = 100 * res.OfferedRate(0) * (sp.sync + rtt).Seconds() / o.limit
	r.errors = nerr
	return r, nil
}

// leaseAll leases the cluster's namespace on every node: the same
// configuration with namespace.Config.Leases.
func leaseAll(c *integration.Cluster) error {
	for i, in := range c.Nodes {
		for _, cfg := range in.Namespaces() {
			if cfg.Name != c.Namespace() {
				continue
			}
			cfg.Leases = true
			if err := in.Update(cfg); err != nil {
				return fmt.Errorf("node %d: -leases: %w", i, err)
			}
		}
	}
	return nil
}

// leaseStats returns the cluster's lease figures, summed over its nodes.
func leaseStats(c *integration.Cluster) leaseSum {
	var s leaseSum
	for _, in := range c.Nodes {
		for _, st := range in.Stats() {
			if st.Config.Name != c.Namespace() {
				continue
			}
			l := st.Leases
			s.Grants += l.Grants
			s.Granted += l.Granted
			s.Returned += l.Returned
			s.Expired += l.Expired
			s.StoreCalls += l.StoreCalls
			s.Denials += l.Denials
			s.Local += l.Local
			s.Fallbacks += l.Fallbacks
		}
	}
	return s
}

// leaseSum is ratelimiting.LeaseStats summed over nodes.
type leaseSum ratelimiting.LeaseStats

// minus returns what s counts beyond b.
func (s leaseSum) minus(b leaseSum) leaseSum {
	return leaseSum{
		Grants: s.Grants - b.Grants, Granted: s.Granted - b.Granted, Returned: s.Returned - b.Returned, Expired: s.Expired - b.Expired,
		StoreCalls: s.StoreCalls - b.StoreCalls, Denials: s.Denials - b.Denials, Local: s.Local - b.Local, Fallbacks: s.Fallbacks - b.Fallbacks,
	}
}

// arrivals returns how a run's arrivals reach its nodes: the load's spread
// over a number of targets, and the node of each target. -spread skewed
// sends arrivals round-robin over 10·(nodes−1) targets, the first
// 9·(nodes−1) of them node 0 and one each of the other nodes: 90% of the
// arrivals go to node 0, the rest evenly to the others.
func (o *options) arrivals(nodes int) (integration.Spread, int, func(int) int) {
	if o.spread != "skewed" {
		spread, _ := integration.ParseSpread(o.spread) // validated
		return spread, nodes, func(i int) int { return i }
	}
	if nodes == 1 {
		return integration.RoundRobin, 1, func(int) int { return 0 }
	}
	hot := 9 * (nodes - 1)
	return integration.RoundRobin, 10 * (nodes - 1), func(i int) int { return max(0, i-hot+1) }
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
// first), per window from the run's start for buckets; the calls the nodes
// made to the store during the load (calls: every strategy call; pushes and
// checks: those the syncers counted), and for a leased run its lease
// figures.
func logRun(o *options, c *integration.Cluster, sp spec, res *integration.Result, r row, calls uint64, ls leaseSum) {
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
	mode := ""
	if sp.leased {
		mode = " leased"
	}
	decided := ""
	if sp.alg == ratelimiting.FixedWindow {
		decided = fmt.Sprintf(", most in a window as decided %d", r.maxDecided)
	}
	fmt.Fprintf(os.Stderr, "accuracy: %s, %d nodes, sync %v%s: admitted %d of %d (per window %s%s); store calls: %d (%.1f/s; %d pushes, %d checks in all)\n",
		alg, sp.nodes, sp.sync, mode, res.Admitted(), len(res.Decisions), strings.Join(counts, " "), decided, calls, float64(calls)/o.duration.Seconds(), pushes, checks)
	if late := lateness(res); late > o.window/10 {
		fmt.Fprintf(os.Stderr, "accuracy: %s, %d nodes, sync %v%s: decisions asked up to %v after their arrival: the store or this machine did not keep up with the offered load (admitted and long_run_rate count the late ones over -duration)\n",
			alg, sp.nodes, sp.sync, mode, late.Round(time.Millisecond))
	}
	if sp.leased {
		fmt.Fprintf(os.Stderr, "accuracy: %s, %d nodes, sync %v leased: %d grant requests, %d grants of %.0f units, %.0f returned, %.0f expired, %d denials, %d denied locally, %d fallbacks\n",
			alg, sp.nodes, sp.sync, ls.StoreCalls, ls.Grants, ls.Granted, ls.Returned, ls.Expired, ls.Denials, ls.Local, ls.Fallbacks)
	}
}

// lateness returns how long after its arrival's time the latest decision
// of res was asked.
func lateness(res *integration.Result) time.Duration {
	var late time.Duration
	for _, d := range res.Decisions {
		late = max(late, d.At.Sub(d.Due))
	}
	return late
}

// newRow computes a run's figures (see the command's doc).
func newRow(o *options, sp spec, res *integration.Result) row {
	l := o.limitOf(sp)
	r := row{
		store: o.store, alg: sp.alg, precision: sp.precision, rates: o.rates(), precCol: o.precisions != nil, nodes: sp.nodes, sync: sp.sync,
		limit: o.limit, window: o.window, offered: o.rate, duration: o.duration,
		admitted: res.Admitted(), allowed: o.limit, nearLimit: o.nearLimit, leased: sp.leased,
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
	r.minPct = minAdmittedPct(res, o.window, o.limit)
	return r
}

// minAdmittedPct returns the least a key was admitted in one whole
// epoch-aligned window of size (wholly inside the run), by the time the
// node was asked, as a percentage of what it could have been: limit, or
// the hits of the key offered in that window when fewer. Windows in which
// a key was not offered do not count; NaN when no window does.
func minAdmittedPct(res *integration.Result, size time.Duration, limit float64) float64 {
	type id struct {
		key   int
		start int64
	}
	offered, admitted := map[id]int{}, map[id]int{}
	ms := size.Milliseconds()
	for _, d := range res.Decisions {
		t := d.At.UnixMilli()
		w := id{d.Key, t - t%ms}
		if w.start < res.Start.UnixMilli() || w.start+ms > res.End.UnixMilli() {
			continue
		}
		offered[w]++
		if d.Allowed {
			admitted[w]++
		}
	}
	least := math.NaN()
	for w, n := range offered {
		pct := 100 * float64(admitted[w]) / math.Min(limit, float64(n))
		if math.IsNaN(least) || pct < least {
			least = pct
		}
	}
	return least
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
