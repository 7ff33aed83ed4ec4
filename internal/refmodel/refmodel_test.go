package refmodel

import (
	"crypto/sha256"
	"fmt"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// base is the start of a minute, in Unix ms.
var base = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()

// TestWorkedExamples checks the model against decisions worked out by
// hand from the semantics of each algorithm.
func TestWorkedExamples(t *testing.T) {
	type step struct {
		at        int64 // ms after base
		cost      float64
		allowed   bool
		rate      string // exact, as big.Rat parses it
		remaining float64
		reset     time.Duration
		retry     time.Duration
	}
	ms := time.Millisecond
	anchored := Limit{Kind: Anchored, Limit: 3, Window: time.Second}
	log := Limit{Kind: Log, Limit: 4, Window: time.Second}
	precision := Limit{Kind: Precision, Limit: 10, Window: 3 * time.Second, Precision: time.Second}
	tests := []struct {
		name  string
		limit Limit
		steps []step
	}{
		{"anchored window", anchored, []step{
			{123, 0, true, "0", 3, 0, 0},           // a peek opens no window
			{223, 1, true, "1", 2, time.Second, 0}, // [223, 1223)
			{623, 2, true, "3", 0, 600 * ms, 0},
			{623, 1, false, "3", 0, 600 * ms, 600 * ms},
			{1222, 1, false, "3", 0, ms, ms},
			{1223, 3, true, "3", 0, time.Second, 0}, // closed: a new window [1223, 2223)
			{2223, 0, true, "0", 3, 0, 0},
		}},
		{"sliding log", log, []step{
			{77, 1, true, "1", 3, time.Second, 0},
			{77, 1, true, "2", 2, time.Second, 0},
			{577, 1.5, true, "7/2", 0, time.Second, 0},
			{677, 1, false, "7/2", 0, 900 * ms, 400 * ms}, // the two hits at 77 stop weighing at 1077
			{677, 3, false, "7/2", 0, 900 * ms, 900 * ms}, // ... and the one at 577 at 1577
			{1076, 1, false, "7/2", 0, 501 * ms, ms},
			{1077, 2.5, true, "4", 0, time.Second, 0},
			{2077, 0, true, "0", 4, 0, 0},
		}},
		// Sub-windows of 1s holding 4, 2, 1 and 1; 249 ms into the last,
		// now - 3s is 249 ms into the first: 1 + 1 + 2 + 4 * 751/1000.
		{"precision", precision, []step{
			{40_000, 4, true, "4", 6, 4 * time.Second, 0}, // until now - 3s is 41s
			{41_000, 2, true, "6", 4, 4 * time.Second, 0},
			{42_000, 1, true, "7", 3, 4 * time.Second, 0},
			{43_000, 1, true, "8", 2, 4 * time.Second, 0},
			{43_249, 3, false, "7004/1000", 2, 3751 * ms, ms},
			{43_250, 3, true, "10", 0, 3750 * ms, 0},
			{46_999, 0, true, "4/1000", 9, ms, 0}, // only the sub-window of 43s, holding 4, weighted 1/1000
			{47_000, 0, true, "0", 10, 0, 0},
		}},
		// Kong's example: cur 10, prev 40, a 60 s window 30 s in.
		{"sliding", Limit{Kind: Sliding, Limit: 100, Window: time.Minute}, []step{
			{0, 40, true, "40", 60, 2 * time.Minute, 0},
			{60_000, 10, true, "50", 50, 2 * time.Minute, 0},
			{90_000, 0, true, "30", 70, 90 * time.Second, 0},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := New()
			for i, s := range tc.steps {
				d := m.Decide(base+s.at, s.cost, []Limit{tc.limit})
				st := d.Limits[0]
				rate, _ := new(big.Rat).SetString(s.rate)
				if d.Allowed != s.allowed || st.Allowed != s.allowed || st.Rate.Cmp(rate) != 0 || st.Remaining != s.remaining || st.Reset != s.reset || st.RetryAfter != s.retry || d.RetryAfter != s.retry {
					t.Fatalf("step %d (at %d, cost %v): allowed %v rate %v remaining %v reset %v retry %v, want %v %v %v %v %v",
						i, s.at, s.cost, st.Allowed, st.Rate.RatString(), st.Remaining, st.Reset, st.RetryAfter, s.allowed, rate.RatString(), s.remaining, s.reset, s.retry)
				}
			}
		})
	}
}

// TestSharedState checks what limits of one request share: the counters
// of one size (a Precision limit's sub-windows are the windows of its
// size), one anchored window or log per window whatever their limits, and
// the all-or-nothing count.
func TestSharedState(t *testing.T) {
	m := New()
	plain := Limit{Kind: Sliding, Limit: 100, Window: time.Second}
	sub := Limit{Kind: Precision, Limit: 100, Window: 4 * time.Second, Precision: time.Second}
	a3 := Limit{Kind: Anchored, Limit: 3, Window: time.Minute}
	a5 := Limit{Kind: Anchored, Limit: 5, Window: time.Minute}
	l2 := Limit{Kind: Log, Limit: 2, Window: time.Minute}
	m.Decide(base, 2, []Limit{plain, sub, a3, a5})
	d := m.Decide(base+1000, 2, []Limit{plain, sub, a3, a5})
	if d.Allowed || !d.Limits[0].Allowed || !d.Limits[1].Allowed || d.Limits[2].Allowed || !d.Limits[3].Allowed {
		t.Fatalf("3 of 3 with 2 more: %+v, want denied by the first anchored window only", d)
	}
	if d.Limits[3].Rate.Cmp(big.NewRat(2, 1)) != 0 || d.Limits[0].Rate.Cmp(big.NewRat(2, 1)) != 0 {
		t.Fatalf("a denied request was counted: %+v", d)
	}
	if d = m.Decide(base+1000, 1, []Limit{sub, a5, l2}); !d.Allowed || d.Limits[0].Rate.Cmp(big.NewRat(3, 1)) != 0 || d.Limits[1].Rate.Cmp(big.NewRat(3, 1)) != 0 {
		t.Fatalf("cost 1: %+v, want allowed, both at 3", d)
	}
	if d = m.Decide(base+1000, 0, []Limit{plain}); d.Limits[0].Rate.Cmp(big.NewRat(3, 1)) != 0 {
		t.Fatalf("the 1s window: %+v, want 3: the precision limit's hit, and the previous window's 2 at weight 1", d)
	}
}

// TestProbes checks that a probe moves the clock to the instant the
// previous decision named.
func TestProbes(t *testing.T) {
	prev := &Decision{RetryAfter: 40 * time.Millisecond, Limits: []State{{Reset: 0}, {Reset: 90 * time.Millisecond}, {Reset: 70 * time.Millisecond}}}
	for _, c := range []struct {
		p    Probe
		want time.Duration
	}{{NoProbe, 5 * time.Millisecond}, {AtRetry, 40 * time.Millisecond}, {BeforeRetry, 39 * time.Millisecond}, {AtReset, 70 * time.Millisecond}, {BeforeReset, 69 * time.Millisecond}} {
		if got := (Step{Advance: 5 * time.Millisecond, Probe: c.p}).Move(prev); got != c.want {
			t.Errorf("probe %d: %v, want %v", c.p, got, c.want)
		}
	}
	if got := (Step{Advance: 5 * time.Millisecond, Probe: AtRetry}).Move(&Decision{Allowed: true}); got != 5*time.Millisecond {
		t.Errorf("a probe of an allowed decision's retry: %v, want Advance", got)
	}
}

// TestTraceIsStable checks that Trace draws the traces it drew before
// Mix, so that the seeds of existing tests keep their traces: digests of
// two of them, taken before.
func TestTraceIsStable(t *testing.T) {
	for seed, want := range map[uint64]string{
		3:  "db10bf84b5ef469a874d8e09990fe32b5ace1071223e6152fa30e44bb7296d26",
		17: "67dcac68f73e3638d8d3279c2edd511587f70aefcb973e9cd252f3b9f98a7238",
	} {
		var b strings.Builder
		for _, s := range Trace(rand.New(rand.NewPCG(seed, 12)), 200) {
			if s.Probe != NoProbe || s.Limits[0].Precision != 0 {
				t.Fatalf("seed %d: a step of Trace with a probe or a precision: %+v", seed, s)
			}
			fmt.Fprintf(&b, "%v %v", s.Advance, s.Cost)
			for _, l := range s.Limits {
				fmt.Fprintf(&b, " %d %v %v %v", l.Kind, l.Limit, l.Window, l.Burst)
			}
			b.WriteString("\n")
		}
		if got := fmt.Sprintf("%x", sha256.Sum256([]byte(b.String()))); got != want {
			t.Errorf("seed %d: digest %s, want %s", seed, got, want)
		}
	}
}

// TestSubsets checks that a trace with Subsets draws, each step, a
// non-empty subset of its limits in their order, all of them in the first
// step, and no cost above one of them.
func TestSubsets(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	x := Mix{Kinds: []Kind{Sliding, Fixed, Token, Leaky, Anchored, Log, Precision}, Most: 4, Subsets: true}
	for range 50 {
		steps := x.Trace(r, 50)
		all := map[Limit]int{}
		for _, s := range steps {
			for _, l := range s.Limits {
				all[l]++
			}
		}
		for i, s := range steps {
			if len(s.Limits) == 0 {
				t.Fatalf("step %d has no limit", i)
			}
			for _, l := range s.Limits {
				if s.Cost > l.Limit || s.Cost > l.burst() {
					t.Fatalf("step %d: cost %v above %+v", i, s.Cost, l)
				}
			}
		}
		if len(all) > 4 || len(steps[0].Limits) < len(all) {
			t.Fatalf("%d limits across the steps, %d in the first, want at most 4, all in the first", len(all), len(steps[0].Limits))
		}
	}
}
