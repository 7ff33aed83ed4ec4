package main

import (
	"context"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratesync/ratesync/integration"
	"github.com/ratesync/ratesync/ratelimiting"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantRate float64
		wantAlgs []ratelimiting.Algorithm
		// wantPrecisions is nil unless -precision is given.
		wantPrecisions []time.Duration
		wantError      string
	}{
		{name: "windows keep -rate", args: nil, wantRate: 100, wantAlgs: []ratelimiting.Algorithm{ratelimiting.FixedWindow}},
		{name: "-sliding", args: []string{"-sliding"}, wantRate: 100, wantAlgs: []ratelimiting.Algorithm{ratelimiting.SlidingWindow}},
		{name: "a bucket is offered 10 times its rate", args: []string{"-algorithm", "token_bucket", "-limit", "100", "-window", "1s"}, wantRate: 1000, wantAlgs: []ratelimiting.Algorithm{ratelimiting.TokenBucket}},
		{name: "-rate wins over the bucket default", args: []string{"-algorithm", "leaky_bucket", "-rate", "50"}, wantRate: 50, wantAlgs: []ratelimiting.Algorithm{ratelimiting.LeakyBucket}},
		{name: "-load", args: []string{"-algorithm", "token_bucket,sliding", "-limit", "100", "-window", "5s", "-load", "3"}, wantRate: 60, wantAlgs: []ratelimiting.Algorithm{ratelimiting.TokenBucket, ratelimiting.SlidingWindow}},
		{name: "burst on a window", args: []string{"-burst", "5"}, wantError: "-burst 5"},
		{name: "an algorithm not run periodically", args: []string{"-algorithm", "sliding_log"}, wantError: `-algorithm "sliding_log"`},
		{name: "-sliding with another algorithm", args: []string{"-sliding", "-algorithm", "token_bucket"}, wantError: "give one"},
		{name: "-parallel 0", args: []string{"-parallel", "0"}, wantError: "-parallel 0"},
		{name: "-precision", args: []string{"-sliding", "-precision", "0,1s", "-window", "6s"}, wantRate: 100, wantAlgs: []ratelimiting.Algorithm{ratelimiting.SlidingWindow}, wantPrecisions: []time.Duration{0, time.Second}},
		{name: "-precision not dividing the window", args: []string{"-sliding", "-precision", "400ms", "-window", "1s"}, wantError: "must divide -window 1s"},
		{name: "-precision too fine", args: []string{"-sliding", "-precision", "10ms", "-window", "1s"}, wantError: "-precision 10ms: must be at least"},
		{name: "-precision without a sliding window", args: []string{"-algorithm", "token_bucket", "-precision", "1s"}, wantError: "only applies to sliding_window"},
		{name: "-leases", args: []string{"-leases", "-sync", "100ms,1s"}, wantRate: 100, wantAlgs: []ratelimiting.Algorithm{ratelimiting.FixedWindow}},
		{name: "-leases on buckets", args: []string{"-leases", "-algorithm", "token_bucket,leaky_bucket", "-limit", "10", "-window", "1s"}, wantRate: 100, wantAlgs: []ratelimiting.Algorithm{ratelimiting.TokenBucket, ratelimiting.LeakyBucket}},
		{name: "-leases with -sync 0", args: []string{"-leases", "-sync", "250ms,0"}, wantError: "-leases needs a periodic -sync"},
		{name: "-leases=true with -sync 0", args: []string{"-leases=true", "-sync", "0"}, wantError: "-leases"},
		{name: "-leases=both with -sync 0", args: []string{"-leases=both", "-sync", "0,250ms"}, wantRate: 100, wantAlgs: []ratelimiting.Algorithm{ratelimiting.FixedWindow}},
		{name: "-leases=maybe", args: []string{"-leases=maybe"}, wantError: "must be true, false or both"},
		{name: "-leases with -near-limit", args: []string{"-leases", "-near-limit"}, wantError: "-leases and -near-limit"},
		{name: "-spread skewed", args: []string{"-spread", "skewed"}, wantRate: 100, wantAlgs: []ratelimiting.Algorithm{ratelimiting.FixedWindow}},
		{name: "-spread sticky", args: []string{"-spread", "sticky"}, wantRate: 100, wantAlgs: []ratelimiting.Algorithm{ratelimiting.FixedWindow}},
		{name: "-spread lopsided", args: []string{"-spread", "lopsided"}, wantError: `-spread "lopsided"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parse(tt.args)
			if tt.wantError != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantError) {
					t.Fatalf("parse(%q) = %v, want an error containing %q", tt.args, err, tt.wantError)
				}
				return
			}
			if err != nil {
				t.Fatalf("parse(%q): %v", tt.args, err)
			}
			if o.rate != tt.wantRate || !slices.Equal(o.algorithms, tt.wantAlgs) || !slices.Equal(o.precisions, tt.wantPrecisions) {
				t.Fatalf("parse(%q): rate %v, algorithms %v, precisions %v; want %v, %v, %v", tt.args, o.rate, o.algorithms, o.precisions, tt.wantRate, tt.wantAlgs, tt.wantPrecisions)
			}
		})
	}
}

// result returns a run of d that admitted a hit of key 0 at each of the
// offsets at.
func result(d time.Duration, at ...time.Duration) *integration.Result {
	start := time.UnixMilli(1_000_000)
	res := &integration.Result{Start: start, End: start.Add(d)}
	for _, a := range at {
		res.Decisions = append(res.Decisions, integration.Decision{At: start.Add(a), Allowed: true})
	}
	res.Decisions = append(res.Decisions, integration.Decision{At: start.Add(d / 2)}) // denied
	return res
}

// TestBucketRow checks the figures of a bucket run: a bucket of 10 refilling
// 10 per second, over 2 s, that admitted 10 at once, then 10 per second,
// then 5 too many at the very end.
func TestBucketRow(t *testing.T) {
	o := &options{store: "memory", limit: 10, window: time.Second, duration: 2 * time.Second, rate: 100, algorithms: []ratelimiting.Algorithm{ratelimiting.TokenBucket}}
	var at []time.Duration
	for range 10 {
		at = append(at, 0)
	}
	for i := range 20 {
		at = append(at, time.Duration(i+1)*100*time.Millisecond-time.Millisecond)
	}
	for range 5 {
		at = append(at, 1999*time.Millisecond)
	}
	r := newRow(o, spec{alg: ratelimiting.TokenBucket, nodes: 2, sync: time.Second}, result(o.duration, at...))
	// 35 admitted: (35 - 10) / (10/s · 2 s) = 1.25. The most in a span
	// of 1 s: [0, 1 s) holds the 10 at once and 10 more (99 … 999 ms),
	// what the bucket allows there (10 + 10); [1 s, 2 s) holds 15.
	// The least in a window: [1 s, 2 s) admitted 15 of 16 offered, 150% of
	// the 10 the bucket refills in a window.
	if r.admitted != 35 || r.longRun != 1.25 || r.maxAdm != 20 || r.allowed != 20 || r.overPct != 0 || r.burst != 10 || r.minPct != 150 {
		t.Fatalf("row %+v: want 35 admitted, long-run 1.25, max 20 of 20 allowed, burst 10, least 150%%", r)
	}
	want := "memory,token_bucket,2,1s,10,1s,10,100.0,2s,35,1.2500,20,20,0.0,150.0,0.00"
	if got := r.csv(); got != want {
		t.Fatalf("csv %q, want %q", got, want)
	}
}

func TestWindowRow(t *testing.T) {
	o := &options{store: "memory", limit: 10, window: time.Second, duration: 2 * time.Second, rate: 100, algorithms: []ratelimiting.Algorithm{ratelimiting.TokenBucket, ratelimiting.SlidingWindow}}
	var at []time.Duration
	for i := range 25 {
		at = append(at, time.Duration(i)*80*time.Millisecond)
	}
	r := newRow(o, spec{alg: ratelimiting.SlidingWindow, nodes: 1}, result(o.duration, at...))
	// 25 over 2 s at 10 per second; no capacity to take off. 13 fall in
	// any span of 1 s ([0, 1 s) holds 0, 80, ..., 960 ms).
	if r.longRun != 1.25 || r.maxAdm != 13 || r.allowed != 10 || r.overPct != 30 || r.burst != 0 {
		t.Fatalf("row %+v: want long-run 1.25, max 13 of 10 allowed (+30%%), no burst", r)
	}
}

func TestMaxInSpanIsHalfOpen(t *testing.T) {
	res := result(2*time.Second, 0, 500*time.Millisecond, time.Second, time.Second)
	if got := maxInSpan(res, time.Second); got != 3 {
		t.Fatalf("maxInSpan = %d, want 3 ([500ms, 1.5s) holds 3; [0, 1s) only 2)", got)
	}
}

func TestGroups(t *testing.T) {
	o := &options{algorithms: []ratelimiting.Algorithm{ratelimiting.TokenBucket, ratelimiting.SlidingWindow}, nodes: []int{1, 2}, syncs: []time.Duration{0, time.Second}, parallel: 3}
	var sizes []int
	n := 0
	for _, g := range o.groups() {
		sizes = append(sizes, len(g))
		n += len(g)
	}
	if n != 8 || !slices.Equal(sizes, []int{3, 3, 2}) {
		t.Fatalf("groups of sizes %v, want 8 runs in groups of 3, 3, 2", sizes)
	}
}

// TestPrecisionRuns checks that -precision makes one run per precision of
// each sliding window (none for other algorithms), with the precision's
// size among the namespace's window sizes and a column of its own.
func TestPrecisionRuns(t *testing.T) {
	o, err := parse([]string{"-algorithm", "token_bucket,sliding_window", "-precision", "0,1s", "-window", "6s", "-limit", "600", "-nodes", "4", "-sync", "1s"})
	if err != nil {
		t.Fatal(err)
	}
	var got []spec
	for _, g := range o.groups() {
		got = append(got, g...)
	}
	want := []spec{
		{alg: ratelimiting.TokenBucket, nodes: 4, sync: time.Second},
		{alg: ratelimiting.SlidingWindow, nodes: 4, sync: time.Second},
		{alg: ratelimiting.SlidingWindow, precision: time.Second, nodes: 4, sync: time.Second},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("runs %+v, want %+v", got, want)
	}
	if sizes := o.windowSizes(want[2]); !slices.Equal(sizes, []time.Duration{6 * time.Second, time.Second}) {
		t.Fatalf("window sizes %v, want [6s 1s]", sizes)
	}
	if l := o.limitOf(want[2]); l.Window != 6*time.Second || l.Precision != time.Second {
		t.Fatalf("limit %+v, want window 6s, precision 1s", l)
	}
	if o.header() != precisionHeader {
		t.Fatalf("header %q, want %q", o.header(), precisionHeader)
	}
	r := newRow(o, want[2], result(o.duration))
	if got, want := r.csv(), "memory,sliding_window,1s,4,1s,600,6s,0,1000.0,12s,0,0.0000,0,600,-100.0,0.0,0.00"; got != want {
		t.Fatalf("csv %q, want %q", got, want)
	}
}

// TestMinAdmittedPct checks the least admitted in a whole window: against
// the limit, or the hits offered when fewer; windows not whole, or where
// the key was not offered, left out.
func TestMinAdmittedPct(t *testing.T) {
	start := time.UnixMilli(1_000_000)
	res := &integration.Result{Start: start, End: start.Add(3 * time.Second)}
	hit := func(key int, at time.Duration, allowed bool) {
		res.Decisions = append(res.Decisions, integration.Decision{Key: key, At: start.Add(at), Allowed: allowed})
	}
	for i := range 20 { // window 0: key 0 offered 20, 8 admitted (80% of 10)
		hit(0, time.Duration(i)*10*time.Millisecond, i < 8)
	}
	for i := range 20 { // window 1: key 0 offered 20, 10 admitted
		hit(0, time.Second+time.Duration(i)*10*time.Millisecond, i < 10)
	}
	for i := range 4 { // window 1: key 1 offered 4, 3 admitted (75% of 4)
		hit(1, time.Second+time.Duration(i)*10*time.Millisecond, i < 3)
	}
	hit(0, 3*time.Second+time.Millisecond, false) // after the run: no whole window
	if got := minAdmittedPct(res, time.Second, 10); got != 75 {
		t.Fatalf("minAdmittedPct = %v, want 75 (key 1 in window 1)", got)
	}
	if got := minAdmittedPct(&integration.Result{Start: start, End: start.Add(time.Second)}, time.Second, 10); !math.IsNaN(got) {
		t.Fatalf("minAdmittedPct of no decision = %v, want NaN", got)
	}
}

// TestSkewedArrivals checks that -spread skewed sends 90% of the arrivals
// to node 0 and the rest evenly to the others.
func TestSkewedArrivals(t *testing.T) {
	o := &options{spread: "skewed"}
	for _, nodes := range []int{1, 2, 4, 8} {
		spread, over, nodeOf := o.arrivals(nodes)
		if spread != integration.RoundRobin {
			t.Fatalf("%d nodes: spread %v, want round-robin over the targets", nodes, spread)
		}
		per := make([]int, nodes)
		const arrivals = 1000 * 9 * 7 // a multiple of every target count
		for i := range arrivals {
			per[nodeOf(i%over)]++
		}
		if nodes == 1 {
			if per[0] != arrivals {
				t.Fatalf("1 node: %v, want all on node 0", per)
			}
			continue
		}
		want := arrivals / 10 / (nodes - 1)
		if per[0] != arrivals*9/10 || slices.ContainsFunc(per[1:], func(n int) bool { return n != want }) {
			t.Fatalf("%d nodes: %v, want %d on node 0 and %d on each other", nodes, per, arrivals*9/10, want)
		}
	}
	if _, over, nodeOf := (&options{spread: "random"}).arrivals(3); over != 3 || nodeOf(2) != 2 {
		t.Fatalf("random: %d targets, target 2 to node %d; want 3 nodes as they are", over, nodeOf(2))
	}
}

// csvRows runs the tool with args and returns its rows by column name.
func csvRows(t *testing.T, args ...string) []map[string]string {
	t.Helper()
	var out strings.Builder
	if err := run(context.Background(), args, &out); err != nil {
		t.Fatalf("run %q: %v", args, err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	head := strings.Split(lines[0], ",")
	var rows []map[string]string
	for _, l := range lines[1:] {
		f := strings.Split(l, ",")
		if len(f) != len(head) {
			t.Fatalf("row %q has %d fields, the header %d", l, len(f), len(head))
		}
		r := map[string]string{}
		for i, h := range head {
			r[h] = f[i]
		}
		rows = append(rows, r)
	}
	return rows
}

func num(t *testing.T, r map[string]string, col string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(r[col], 64)
	if err != nil {
		t.Fatalf("row %v: column %s: %v", r, col, err)
	}
	return v
}

// TestLeasedRuns runs leased namespaces on the memory store under 5 times
// the limit, 90% of it on one node: every row carries the least admitted
// and the store calls, and no leased run admits more than its limit allows
// in a window.
func TestLeasedRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("runs nodes for seconds")
	}
	common := []string{"-nodes", "3", "-sync", "100ms", "-limit", "20", "-window", "500ms", "-duration", "1500ms", "-load", "5", "-spread", "skewed", "-workers", "8"}
	t.Run("windows", func(t *testing.T) {
		rows := csvRows(t, append([]string{"-leases=both", "-sync", "0,100ms", "-parallel", "3"}, common[4:]...)...)
		if len(rows) != 3 {
			t.Fatalf("%d rows, want 3 (synchronous, periodic, leased)", len(rows))
		}
		for _, r := range rows {
			num(t, r, "min_admitted_pct")
			if calls := num(t, r, "store_calls_per_100"); !(calls > 0) {
				t.Errorf("row %v: no store call", r)
			}
		}
		leased := rows[2]
		if leased["store"] != "memory+leases" || leased["sync_rate"] != "100ms" {
			t.Fatalf("third row %v, want the leased run at 100ms", leased)
		}
		if m := num(t, leased, "max_admitted_per_window"); m > 20 {
			t.Errorf("leased fixed window admitted %v in a window, over the limit 20: %v", m, leased)
		}
	})
	t.Run("buckets", func(t *testing.T) {
		rows := csvRows(t, append([]string{"-leases", "-algorithm", "fixed_window,sliding_window,token_bucket,leaky_bucket", "-parallel", "4"}, common...)...)
		if len(rows) != 4 {
			t.Fatalf("%d rows, want 4", len(rows))
		}
		for _, r := range rows {
			if r["store"] != "memory+leases" {
				t.Errorf("row %v: not leased", r)
			}
			if min := num(t, r, "min_admitted_pct"); !(min > 0) {
				t.Errorf("row %v: a window admitted nothing", r)
			}
			num(t, r, "store_calls_per_100")
			if r["algorithm"] == "sliding_window" {
				continue // its largest span is Kong's approximation's, over the limit even when exact
			}
			if m, a := num(t, r, "max_admitted_in_window"), num(t, r, "allowed_in_window"); m > a {
				t.Errorf("leased %s admitted %v in a window, over the %v allowed: %v", r["algorithm"], m, a, r)
			}
		}
	})
}

// TestLeasedFixedWindowAsDecided checks a leased fixed window's largest
// count as the nodes counted the hits: never over the limit.
func TestLeasedFixedWindowAsDecided(t *testing.T) {
	if testing.Short() {
		t.Skip("runs nodes for seconds")
	}
	o, err := parse([]string{"-leases", "-nodes", "4", "-sync", "100ms", "-limit", "20", "-window", "500ms", "-duration", "1s", "-load", "10", "-spread", "skewed", "-workers", "8"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := openStore(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	r, err := measure(context.Background(), o, st, spec{alg: ratelimiting.FixedWindow, nodes: 4, sync: 100 * time.Millisecond, leased: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.maxDecided != 20 || r.errors != 0 {
		t.Fatalf("row %+v: want 20 admitted in the fullest window as decided, no error", r)
	}
}

// TestLeaseSVG checks that leased window runs get the chart of the three
// figures, leased lines marked.
func TestLeaseSVG(t *testing.T) {
	o := &options{store: "memory", limit: 100, window: time.Second, rate: 1000, spread: "skewed", duration: 5 * time.Second, algorithms: []ratelimiting.Algorithm{ratelimiting.FixedWindow}}
	var rows []row
	for _, n := range []int{1, 2} {
		rows = append(rows, row{alg: ratelimiting.FixedWindow, nodes: n, sync: 0, minPct: 100, calls: 90})
		for _, s := range []time.Duration{100 * time.Millisecond, time.Second} {
			rows = append(rows, row{alg: ratelimiting.FixedWindow, nodes: n, sync: s, overPct: 40, minPct: 120, calls: 1.5},
				row{alg: ratelimiting.FixedWindow, nodes: n, sync: s, leased: true, minPct: 100, calls: 2})
		}
	}
	path := t.TempDir() + "/leases.svg"
	if err := writeSVG(path, rows, o); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	svg := string(b)
	for _, want := range []string{"least admitted in a window", "store calls per 100 decisions", ">leased</text>", `stroke-opacity="0.45"`} {
		if !strings.Contains(svg, want) {
			t.Errorf("chart without %q", want)
		}
	}
}

func TestLateness(t *testing.T) {
	at := time.UnixMilli(1_000_000)
	res := &integration.Result{Decisions: []integration.Decision{
		{Due: at, At: at.Add(time.Millisecond)},
		{Due: at, At: at.Add(300 * time.Millisecond)},
		{Due: at.Add(time.Second), At: at.Add(time.Second)},
	}}
	if got := lateness(res); got != 300*time.Millisecond {
		t.Fatalf("lateness = %v, want 300ms", got)
	}
}
