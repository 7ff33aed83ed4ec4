package main

import (
	"slices"
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
	if r.admitted != 35 || r.longRun != 1.25 || r.maxAdm != 20 || r.allowed != 20 || r.overPct != 0 || r.burst != 10 {
		t.Fatalf("row %+v: want 35 admitted, long-run 1.25, max 20 of 20 allowed, burst 10", r)
	}
	want := "memory,token_bucket,2,1s,10,1s,10,100.0,2s,35,1.2500,20,20,0.0"
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
	if got, want := r.csv(), "memory,sliding_window,1s,4,1s,600,6s,0,1000.0,12s,0,0.0000,0,600,-100.0"; got != want {
		t.Fatalf("csv %q, want %q", got, want)
	}
}
