package strategytest

import (
	"fmt"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/arith"
	"github.com/ratesync/ratesync/strategy"
)

// Cases of anchored windows, sliding logs and precision limits.

func checker(t *testing.T, s strategy.Strategy) strategy.Checker {
	t.Helper()
	ck, ok := s.(strategy.Checker)
	if !ok {
		t.Skip("strategy does not implement strategy.Checker")
	}
	if _, ok := s.(strategy.BucketStore); !ok {
		t.Skip("strategy does not implement strategy.BucketStore")
	}
	return ck
}

// stepper sends one check at a time on one lane.
type stepper struct {
	t    *testing.T
	ck   strategy.Checker
	node string
	seq  uint64
	c    strategy.Check
}

func (s *stepper) at(now time.Time, cost float64) strategy.CheckResult {
	s.t.Helper()
	s.seq++
	c := s.c
	c.Now, c.Cost = now, cost
	return checkOne(s.t, s.ck, s.node, s.seq, c)
}

var keyedCases = []suiteCase{
	{"an anchored window opens at the first counted hit and closes a window later", func(t *testing.T, s strategy.Strategy) {
		ck := checker(t, s)
		const w = 1000
		lim := strategy.CheckLimit{WindowSize: w * time.Millisecond, Limit: 3, Kind: strategy.KindAnchored}
		st := &stepper{t: t, ck: ck, node: "a", c: strategy.Check{Namespace: "anch", Key: "k", Limits: []strategy.CheckLimit{lim}}}
		t0 := Base.Add(123 * time.Millisecond) // not aligned on the window
		if r := st.at(t0, 0); !r.Allowed || r.Buckets[0].Level != 0 || r.Buckets[0].At != 0 {
			t.Fatalf("a peek on a new key: %+v, want allowed, no window", r)
		}
		if r := st.at(t0.Add(10*time.Millisecond), 1); !r.Allowed || r.Buckets[0].At != t0.UnixMilli()+10 || r.Buckets[0].Level != 1 {
			t.Fatalf("first hit: %+v, want the window opened at it with 1", r)
		}
		a := t0.Add(10 * time.Millisecond)
		st.at(a.Add(400*time.Millisecond), 1)
		if r := st.at(a.Add(999*time.Millisecond), 1.5); r.Allowed || r.Buckets[0].Level != 2 || r.Buckets[0].At != a.UnixMilli() {
			t.Fatalf("over the limit 1 ms before the window closes: %+v, want denied with 2 counted since %d", r, a.UnixMilli())
		}
		if r := st.at(a.Add(999*time.Millisecond), 1); !r.Allowed || r.Buckets[0].Level != 3 {
			t.Fatalf("the last unit 1 ms before the window closes: %+v, want allowed, 3", r)
		}
		if r := st.at(a.Add(w*time.Millisecond), 3); !r.Allowed || r.Buckets[0].At != a.UnixMilli()+w || r.Buckets[0].Level != 3 {
			t.Fatalf("at the window's end: %+v, want a new window at %d holding 3", r, a.UnixMilli()+w)
		}
		if r := st.at(a.Add(5*w*time.Millisecond), 0); !r.Allowed || r.Buckets[0].Level != 0 || r.Buckets[0].At != 0 {
			t.Fatalf("a peek long after: %+v, want no window", r)
		}
	}},
	{"a sliding log weighs each hit for exactly the window and tells when a denied request fits", func(t *testing.T, s strategy.Strategy) {
		ck := checker(t, s)
		const w = 1000
		lim := strategy.CheckLimit{WindowSize: w * time.Millisecond, Limit: 4, Kind: strategy.KindLog}
		st := &stepper{t: t, ck: ck, node: "l", c: strategy.Check{Namespace: "log", Key: "k", Limits: []strategy.CheckLimit{lim}}}
		t0 := Base.Add(77 * time.Millisecond)
		st.at(t0, 1)
		st.at(t0, 1) // merged with the first
		if r := st.at(t0.Add(500*time.Millisecond), 1.5); !r.Allowed || r.Buckets[0].Level != 3.5 || r.Buckets[0].At != t0.UnixMilli()+500 {
			t.Fatalf("third hit: %+v, want allowed, sum 3.5, newest at +500", r)
		}
		r := st.at(t0.Add(600*time.Millisecond), 1)
		if r.Allowed || r.Buckets[0].Level != 3.5 || r.Buckets[0].RetryAt != t0.UnixMilli()+w {
			t.Fatalf("over the limit: %+v, want denied, sum 3.5, retry at %d (the merged hits stop weighing)", r, t0.UnixMilli()+w)
		}
		r = st.at(t0.Add(600*time.Millisecond), 3)
		if r.Allowed || r.Buckets[0].RetryAt != t0.UnixMilli()+500+w {
			t.Fatalf("cost 3: %+v, want retry at %d (both entries gone)", r, t0.UnixMilli()+500+w)
		}
		if r := st.at(t0.Add((w-1)*time.Millisecond), 1); r.Allowed {
			t.Fatalf("1 ms before the first hits stop weighing: %+v, want denied", r)
		}
		if r := st.at(t0.Add(w*time.Millisecond), 2.5); !r.Allowed || r.Buckets[0].Level != 4 || r.Buckets[0].At != t0.UnixMilli()+w {
			t.Fatalf("when the first hits stop weighing: %+v, want allowed, sum 4", r)
		}
		if r := st.at(t0.Add(10*w*time.Millisecond), 0); !r.Allowed || r.Buckets[0].Level != 0 || r.Buckets[0].At != 0 {
			t.Fatalf("a peek long after: %+v, want an empty log", r)
		}
	}},
	{"anchored windows and logs are exact across racing nodes", func(t *testing.T, s strategy.Strategy) {
		ck := checker(t, s)
		for _, kind := range []uint8{strategy.KindAnchored, strategy.KindLog} {
			c := strategy.Check{Namespace: fmt.Sprintf("race%d", kind), Key: "k", Cost: 1, Now: Base.Add(5 * time.Second), Limits: []strategy.CheckLimit{
				{WindowSize: time.Minute, Limit: 25, Kind: kind},
			}}
			if got := racePasses(t, ck, 4, 10, c); got != 25 {
				t.Errorf("kind %d: %d of 80 racing checks passed, want exactly 25", kind, got)
			}
		}
	}},
	{"anchored windows, logs and buckets of one key and window are apart", func(t *testing.T, s strategy.Strategy) {
		ck := checker(t, s)
		now := Base.Add(9 * time.Second)
		limits := []strategy.CheckLimit{
			{WindowSize: time.Second, Limit: 2, Kind: strategy.KindAnchored},
			{WindowSize: time.Second, Limit: 2, Kind: strategy.KindLog},
			{WindowSize: time.Second, Limit: 2, Kind: kindToken, Burst: 2},
		}
		st := &stepper{t: t, ck: ck, node: "apart", c: strategy.Check{Namespace: "apart", Key: "k", Limits: limits}}
		r := st.at(now, 2)
		if !r.Allowed {
			t.Fatalf("first check: %+v, want allowed", r)
		}
		if r.Buckets[0].Level != 2 || r.Buckets[1].Level != 2 || r.Buckets[2].Level != 2000 {
			t.Fatalf("states %+v: want each limit to hold its own 2", r.Buckets)
		}
		// The log alone denies; nothing is counted anywhere.
		st.c.Limits = limits[1:2]
		if r := st.at(now.Add(time.Millisecond), 1); r.Allowed {
			t.Fatalf("the full log let a request pass: %+v", r)
		}
	}},
	{"anchored and log diffs are applied once, at their instant", func(t *testing.T, s strategy.Strategy) {
		ck := checker(t, s)
		t0 := Base.Add(30 * time.Second)
		b := strategy.Batch{Node: "late", Seq: 1, Buckets: []strategy.BucketDiff{
			{Namespace: "kd", Key: "k", Kind: strategy.KindAnchored, Window: time.Second, At: t0.UnixMilli(), Cost: 2, Rate: 5},
			{Namespace: "kd", Key: "k", Kind: strategy.KindLog, Window: time.Second, At: t0.UnixMilli() + 100, Cost: 2, Rate: 5},
			{Namespace: "kd", Key: "k", Kind: strategy.KindLog, Window: time.Second, At: t0.UnixMilli(), Cost: 1, Rate: 5},
		}}
		push(t, s, b)
		push(t, s, b) // the same (node, seq): applied once
		st := &stepper{t: t, ck: ck, node: "kd", c: strategy.Check{Namespace: "kd", Key: "k", Limits: []strategy.CheckLimit{
			{WindowSize: time.Second, Limit: 5, Kind: strategy.KindAnchored},
			{WindowSize: time.Second, Limit: 5, Kind: strategy.KindLog},
		}}}
		r := st.at(t0.Add(500*time.Millisecond), 0)
		if a, l := r.Buckets[0], r.Buckets[1]; a.At != t0.UnixMilli() || a.Level != 2 || l.Level != 3 || l.At != t0.UnixMilli()+100 {
			t.Fatalf("after the pushes: anchored %+v, log %+v; want the window opened at %d with 2, the log at 3 with its newest at +100", a, l, t0.UnixMilli())
		}
		// At t0+1000 the log's entry at t0 stops weighing and the anchored window closes.
		r = st.at(t0.Add(time.Second), 3)
		if !r.Allowed || r.Buckets[0].Level != 3 || r.Buckets[1].Level != 5 {
			t.Fatalf("a second later: %+v, want allowed: a new window of 3, the log at 2 + 3", r)
		}
	}},
	{"a late anchored diff of a window that closed before the open one counts nowhere", func(t *testing.T, s strategy.Strategy) {
		ck := checker(t, s)
		t0 := Base.Add(time.Hour)
		lim := strategy.CheckLimit{WindowSize: time.Minute, Limit: 10, Kind: strategy.KindAnchored}
		st := &stepper{t: t, ck: ck, node: "open", c: strategy.Check{Namespace: "late", Key: "k", Limits: []strategy.CheckLimit{lim}}}
		st.at(t0.Add(100*time.Second), 1) // opens [t0+100s, t0+160s)
		late := func(seq uint64, at time.Duration) {
			push(t, s, strategy.Batch{Node: "late", Seq: seq, Buckets: []strategy.BucketDiff{
				{Namespace: "late", Key: "k", Kind: strategy.KindAnchored, Window: time.Minute, At: t0.Add(at).UnixMilli(), Cost: 4, Rate: 1},
			}})
		}
		late(1, 0)              // its window closed at t0+60s
		late(2, 40*time.Second) // its window, [t0+40s, t0+100s), closed as the open one opened
		if r := st.at(t0.Add(110*time.Second), 0); r.Buckets[0].Level != 1 || r.Buckets[0].At != t0.Add(100*time.Second).UnixMilli() {
			t.Fatalf("after late diffs of closed windows: %+v, want the open window's 1 alone", r.Buckets[0])
		}
		late(3, 50*time.Second) // within a window of the open one's opening: counted there
		if r := st.at(t0.Add(110*time.Second), 0); r.Buckets[0].Level != 5 {
			t.Fatalf("after a late diff overlapping the open window: %+v, want 1 + 4", r.Buckets[0])
		}
	}},
	{"several anchored and log diffs of one key in one batch", func(t *testing.T, s strategy.Strategy) {
		ck := checker(t, s)
		t0 := Base.Add(2 * time.Hour)
		d := func(kind uint8, at time.Duration, cost float64) strategy.BucketDiff {
			return strategy.BucketDiff{Namespace: "many", Key: "k", Kind: kind, Window: time.Minute, At: t0.Add(at).UnixMilli(), Cost: cost, Rate: 1}
		}
		push(t, s, strategy.Batch{Node: "many", Seq: 1, Buckets: []strategy.BucketDiff{
			d(strategy.KindAnchored, 0, 1), d(strategy.KindAnchored, time.Second, 2), d(strategy.KindAnchored, 70*time.Second, 4),
			d(strategy.KindLog, 0, 1), d(strategy.KindLog, time.Second, 2), d(strategy.KindLog, 70*time.Second, 4),
		}})
		st := &stepper{t: t, ck: ck, node: "many", c: strategy.Check{Namespace: "many", Key: "k", Limits: []strategy.CheckLimit{
			{WindowSize: time.Minute, Limit: 10, Kind: strategy.KindAnchored}, {WindowSize: time.Minute, Limit: 10, Kind: strategy.KindLog},
		}}}
		// The anchored window that opened at t0 closed at t0+60s; the one at t0+70s holds 4.
		// The log's entries at t0 and t0+1s stopped weighing at t0+60s and t0+61s.
		r := st.at(t0.Add(75*time.Second), 0)
		if a, l := r.Buckets[0], r.Buckets[1]; a.At != t0.Add(70*time.Second).UnixMilli() || a.Level != 4 || l.Level != 4 {
			t.Fatalf("anchored %+v, log %+v: want a window opened at +70s holding 4, and a log of 4", a, l)
		}
	}},
	{"a precision limit slides over its sub-windows", func(t *testing.T, s strategy.Strategy) {
		ck := checker(t, s)
		const p = time.Second
		start := arith.WindowStart(Base, p).Add(40 * p)
		push(t, s, strategy.Batch{Node: "seedp", Seq: 1, Diffs: []strategy.Diff{
			diff("prec", "k", start.Add(-3*p), p, 4), diff("prec", "k", start.Add(-2*p), p, 2),
			diff("prec", "k", start.Add(-p), p, 1), diff("prec", "k", start, p, 1),
			diff("prec", "k", start.Add(-4*p), p, 100), // out of the span
		}})
		lim := strategy.CheckLimit{WindowSize: 3 * p, Limit: 10, Precision: p}
		st := &stepper{t: t, ck: ck, node: "p", c: strategy.Check{Namespace: "prec", Key: "k", Limits: []strategy.CheckLimit{lim}}}
		// 250 ms in: 1 + 1 + 2 + 4*0.75 = 7; a cost of 3 fits exactly, 1 ms earlier it does not.
		if r := st.at(start.Add(249*time.Millisecond), 3); r.Allowed {
			t.Fatalf("1 ms before it fits: %+v, want denied", r)
		}
		r := st.at(start.Add(250*time.Millisecond), 3)
		if !r.Allowed {
			t.Fatalf("an exact fit: %+v, want allowed", r)
		}
		if len(r.Windows) != 1 || len(r.Windows[0]) != 4 || r.Windows[0][0] != 4 || r.Windows[0][1] != 1 || r.Windows[0][2] != 2 || r.Windows[0][3] != 4 {
			t.Fatalf("windows %v: want [[4 1 2 4]]", r.Windows)
		}
		if r.Totals[0] != (strategy.Totals{Current: 4, Previous: 1}) {
			t.Fatalf("totals %+v: want the newest two sub-windows, 4 and 1", r.Totals[0])
		}
		if got := window(t, s, "prec", "k", start, p); got != 4 {
			t.Fatalf("the current sub-window holds %v, want 4", got)
		}
		// A plain limit of the sub-window size shares the counter.
		st.c.Limits = []strategy.CheckLimit{lim, {WindowSize: p, Limit: 100}}
		r = st.at(start.Add(999*time.Millisecond), 0.5)
		if !r.Allowed || r.Totals[1].Current != 4.5 || r.Windows[0][0] != 4.5 || r.Windows[1] != nil {
			t.Fatalf("with a plain limit of the same size: %+v, want one count of 4.5", r)
		}
		got := collect(t, s, strategy.Query{Namespace: "prec", WindowSizes: []time.Duration{p}, Now: start, Keys: []string{"k"}, Windows: []int{4}})
		want := map[ckey]float64{
			{"k", start.UnixMilli(), p}: 4.5, {"k", start.Add(-p).UnixMilli(), p}: 1,
			{"k", start.Add(-2 * p).UnixMilli(), p}: 2, {"k", start.Add(-3 * p).UnixMilli(), p}: 4,
		}
		wantCounts(t, got, want)
	}},
	{"precision limits are exact across racing nodes", func(t *testing.T, s strategy.Strategy) {
		ck := checker(t, s)
		c := strategy.Check{Namespace: "precrace", Key: "k", Cost: 1, Now: Base.Add(7 * time.Second), Limits: []strategy.CheckLimit{
			{WindowSize: time.Minute, Limit: 30, Precision: 10 * time.Second},
		}}
		if got := racePasses(t, ck, 4, 10, c); got != 30 {
			t.Errorf("%d of 80 racing checks passed, want exactly 30", got)
		}
	}},
}
