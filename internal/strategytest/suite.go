// Package strategytest is the contract suite every strategy passes (the same
// table of cases for memory, Redis and PostgreSQL) and a fault-injecting
// wrapper for tests of the syncer. Test-only: nothing outside _test.go files
// and tools imports it.
package strategytest

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/arith"
	"github.com/ratesync/ratesync/strategy"
)

// Base is the instant the suite's windows are aligned on: 2040-01-01, past
// the 32-bit time_t overflow of 2038.
var Base = time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC)

// Keys are keys every strategy must store and return byte-exact.
var Keys = []string{
	"k", "k|1", "k|1|2", "", " ", "it's", `say "hi"`, "50%", "?", "$1", "a\\b", "a_b%c",
	"😀 emoji", "ключ", "nul\x00byte", "\xff\xfe not utf-8", "tab\tnew\nline", "--", "/*x*/",
	strings.Repeat("x", 1024),
}

// NewFunc returns a fresh store for one test; it registers its cleanup.
type NewFunc func(t *testing.T) strategy.Strategy

type suiteCase struct {
	name string
	run  func(t *testing.T, s strategy.Strategy)
}

// racePasses makes nodes goroutines send perNode calls of two copies of c
// each, on lanes of their own (named after c's namespace), at once, and returns how many checks passed.
func racePasses(t *testing.T, ck strategy.Checker, nodes, perNode int, c strategy.Check) int {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	passed := 0
	for n := range nodes {
		wg.Go(func() {
			for seq := uint64(1); seq <= uint64(perNode); seq++ {
				res, err := ck.CheckAndCount(context.Background(), fmt.Sprintf("%s-node-%d", c.Namespace, n), seq, []strategy.Check{c, c})
				if err != nil {
					t.Errorf("CheckAndCount: %v", err)
					return
				}
				for _, r := range res {
					if r.Allowed {
						mu.Lock()
						passed++
						mu.Unlock()
					}
				}
			}
		})
	}
	wg.Wait()
	return passed
}

// Run runs the contract suite against the stores newStore makes, one per
// case.
func Run(t *testing.T, newStore NewFunc) {
	for _, c := range slices.Concat(cases, bucketCases, keyedCases, retryCases) {
		t.Run(c.name, func(t *testing.T) {
			c.run(t, newStore(t))
		})
	}
}

func diff(ns, key string, start time.Time, size time.Duration, v float64) strategy.Diff {
	return strategy.Diff{Namespace: ns, Key: key, WindowStart: start, WindowSize: size, Value: v}
}

type ckey struct {
	key   string
	start int64
	size  time.Duration
}

// Collect reads q fully into a map keyed by (key, start ms, size).
func collect(t *testing.T, s strategy.Strategy, q strategy.Query) map[ckey]float64 {
	t.Helper()
	out := make(map[ckey]float64)
	for c, err := range s.GetCounters(context.Background(), q) {
		if err != nil {
			t.Fatalf("GetCounters: %v", err)
		}
		k := ckey{c.Key, c.WindowStart.UnixMilli(), c.WindowSize}
		if _, dup := out[k]; dup {
			t.Fatalf("GetCounters yielded %+v twice", k)
		}
		out[k] = c.Count
	}
	return out
}

func push(t *testing.T, s strategy.Strategy, b strategy.Batch) {
	t.Helper()
	if err := s.PushDiffs(context.Background(), b); err != nil {
		t.Fatalf("PushDiffs(%s, %d): %v", b.Node, b.Seq, err)
	}
}

func window(t *testing.T, s strategy.Strategy, ns, key string, start time.Time, size time.Duration) float64 {
	t.Helper()
	v, err := s.GetWindow(context.Background(), ns, key, start, size)
	if err != nil {
		t.Fatalf("GetWindow(%q): %v", key, err)
	}
	return v
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func wantCounts(t *testing.T, got, want map[ckey]float64) {
	t.Helper()
	for k, w := range want {
		if g, ok := got[k]; !ok || !near(g, w) {
			t.Errorf("counter %q start %d size %v = %v (present %v), want %v", k.key, k.start, k.size, g, ok, w)
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected counter %q start %d size %v = %v", k.key, k.start, k.size, g)
		}
	}
}

var cases = []suiteCase{
	{"current and previous windows of each size", func(t *testing.T, s strategy.Strategy) {
		now := Base.Add(90 * time.Second) // 1m windows: current 60s, previous 0s
		sec, min := time.Second, time.Minute
		cur1s, cur1m := arith.WindowStart(now, sec), arith.WindowStart(now, min)
		push(t, s, strategy.Batch{Node: "n1", Seq: 1, Diffs: []strategy.Diff{
			diff("ns", "a", cur1s, sec, 1),
			diff("ns", "a", cur1s.Add(-sec), sec, 2),
			diff("ns", "a", cur1s.Add(-2*sec), sec, 4), // older than previous
			diff("ns", "a", cur1s.Add(sec), sec, 8),    // future
			diff("ns", "b", cur1m, min, 16),
			diff("ns", "b", cur1m.Add(-min), min, 32),
			diff("ns", "c", cur1m, 2*min, 64), // size not asked
		}})
		got := collect(t, s, strategy.Query{Namespace: "ns", WindowSizes: []time.Duration{sec, min}, Now: now})
		wantCounts(t, got, map[ckey]float64{
			{"a", cur1s.UnixMilli(), sec}:           1,
			{"a", cur1s.Add(-sec).UnixMilli(), sec}: 2,
			{"b", cur1m.UnixMilli(), min}:           16,
			{"b", cur1m.Add(-min).UnixMilli(), min}: 32,
		})
	}},
	{"keys filter", func(t *testing.T, s strategy.Strategy) {
		size := time.Minute
		start := arith.WindowStart(Base, size)
		var diffs []strategy.Diff
		for _, k := range []string{"a", "b", "c", "d"} {
			diffs = append(diffs, diff("ns", k, start, size, 1), diff("ns", k, start.Add(-size), size, 2))
		}
		push(t, s, strategy.Batch{Node: "n1", Seq: 1, Diffs: diffs})
		got := collect(t, s, strategy.Query{Namespace: "ns", WindowSizes: []time.Duration{size}, Now: Base, Keys: []string{"a", "c", "zz"}})
		wantCounts(t, got, map[ckey]float64{
			{"a", start.UnixMilli(), size}: 1, {"a", start.Add(-size).UnixMilli(), size}: 2,
			{"c", start.UnixMilli(), size}: 1, {"c", start.Add(-size).UnixMilli(), size}: 2,
		})
		if got := collect(t, s, strategy.Query{Namespace: "ns", WindowSizes: []time.Duration{size}, Now: Base, Keys: []string{}}); len(got) != 0 {
			t.Errorf("empty non-nil Keys returned %d counters, want 0", len(got))
		}
	}},
	{"at most once per node and seq", func(t *testing.T, s strategy.Strategy) {
		size := time.Minute
		start := arith.WindowStart(Base, size)
		b := func(node string, seq uint64, v float64) strategy.Batch {
			return strategy.Batch{Node: node, Seq: seq, Diffs: []strategy.Diff{diff("ns", "k", start, size, v)}}
		}
		push(t, s, b("n1", 1, 1))
		push(t, s, b("n1", 1, 1))   // retry of a batch that landed
		push(t, s, b("n1", 2, 10))  // next batch
		push(t, s, b("n1", 1, 100)) // stale
		push(t, s, b("n1", 2, 100)) // stale
		push(t, s, b("n2", 1, 1000))
		push(t, s, b("n2", 5, 10000)) // gaps are fine
		if got := window(t, s, "ns", "k", start, size); !near(got, 11011) {
			t.Fatalf("count = %v, want 11011 (each (node, seq) once)", got)
		}
	}},
	{"fractional and negative values", func(t *testing.T, s strategy.Strategy) {
		size := time.Second
		start := arith.WindowStart(Base, size)
		push(t, s, strategy.Batch{Node: "n", Seq: 1, Diffs: []strategy.Diff{
			diff("ns", "k", start, size, 0.5), diff("ns", "k", start, size, 0.25),
		}})
		push(t, s, strategy.Batch{Node: "n", Seq: 2, Diffs: []strategy.Diff{diff("ns", "k", start, size, -0.125)}})
		if got := window(t, s, "ns", "k", start, size); !near(got, 0.625) {
			t.Fatalf("count = %v, want 0.625", got)
		}
	}},
	{"get window of an absent counter is zero", func(t *testing.T, s strategy.Strategy) {
		if got := window(t, s, "ns", "nobody", Base, time.Minute); got != 0 {
			t.Fatalf("count = %v, want 0", got)
		}
	}},
	{"namespaces and sizes are isolated", func(t *testing.T, s strategy.Strategy) {
		size := time.Minute
		start := arith.WindowStart(Base, size)
		push(t, s, strategy.Batch{Node: "n", Seq: 1, Diffs: []strategy.Diff{
			diff("a", "k", start, size, 1), diff("b", "k", start, size, 2), diff("a", "k", start, 2*size, 4),
		}})
		for _, c := range []struct {
			ns   string
			size time.Duration
			want float64
		}{{"a", size, 1}, {"b", size, 2}, {"a", 2 * size, 4}, {"c", size, 0}} {
			if got := window(t, s, c.ns, "k", start, c.size); got != c.want {
				t.Errorf("namespace %q size %v: count = %v, want %v", c.ns, c.size, got, c.want)
			}
		}
		got := collect(t, s, strategy.Query{Namespace: "b", WindowSizes: []time.Duration{size}, Now: Base})
		wantCounts(t, got, map[ckey]float64{{"k", start.UnixMilli(), size}: 2})
	}},
	{"keys are stored byte-exact", func(t *testing.T, s strategy.Strategy) {
		size := time.Minute
		start := arith.WindowStart(Base, size)
		var diffs []strategy.Diff
		want := make(map[ckey]float64)
		for i, k := range Keys {
			diffs = append(diffs, diff("ns", k, start, size, float64(i+1)))
			want[ckey{k, start.UnixMilli(), size}] = float64(i + 1)
		}
		push(t, s, strategy.Batch{Node: "n", Seq: 1, Diffs: diffs})
		wantCounts(t, collect(t, s, strategy.Query{Namespace: "ns", WindowSizes: []time.Duration{size}, Now: Base}), want)
		wantCounts(t, collect(t, s, strategy.Query{Namespace: "ns", WindowSizes: []time.Duration{size}, Now: Base, Keys: Keys}), want)
		for i, k := range Keys {
			if got := window(t, s, "ns", k, start, size); got != float64(i+1) {
				t.Errorf("GetWindow(%q) = %v, want %d", k, got, i+1)
			}
		}
	}},
	{"a counter named twice in a batch adds both", func(t *testing.T, s strategy.Strategy) {
		size := time.Minute
		start := arith.WindowStart(Base, size)
		push(t, s, strategy.Batch{Node: "n", Seq: 1, Diffs: []strategy.Diff{
			diff("ns", "k", start, size, 1), diff("ns", "k", start, size, 2), diff("ns", "k", start, size, 4),
		}})
		if got := window(t, s, "ns", "k", start, size); got != 7 {
			t.Fatalf("count = %v, want 7", got)
		}
	}},
	{"purge drops windows older than the previous one", func(t *testing.T, s strategy.Strategy) {
		size := time.Minute
		now := Base.Add(10 * time.Minute)
		cur := arith.WindowStart(now, size)
		var diffs []strategy.Diff
		for i := range 6 {
			diffs = append(diffs, diff("ns", "k", cur.Add(-time.Duration(i)*size), size, 1))
		}
		diffs = append(diffs, diff("other", "k", cur.Add(-5*size), size, 1))
		push(t, s, strategy.Batch{Node: "n", Seq: 1, Diffs: diffs})
		if err := s.Purge(context.Background(), "ns", []time.Duration{size}, now); err != nil {
			t.Fatalf("Purge: %v", err)
		}
		for i := range 2 {
			if got := window(t, s, "ns", "k", cur.Add(-time.Duration(i)*size), size); got != 1 {
				t.Errorf("window %d back: count = %v after purge, want 1 (kept)", i, got)
			}
		}
		if got := window(t, s, "other", "k", cur.Add(-5*size), size); got != 1 {
			t.Errorf("other namespace: count = %v after purge, want 1 (untouched)", got)
		}
		got := collect(t, s, strategy.Query{Namespace: "ns", WindowSizes: []time.Duration{size}, Now: now})
		wantCounts(t, got, map[ckey]float64{{"k", cur.UnixMilli(), size}: 1, {"k", cur.Add(-size).UnixMilli(), size}: 1})
	}},
	{"large batch", func(t *testing.T, s strategy.Strategy) {
		size := time.Minute
		start := arith.WindowStart(Base, size)
		const n = 5000
		diffs := make([]strategy.Diff, n)
		for i := range diffs {
			diffs[i] = diff("ns", fmt.Sprintf("key-%05d", i), start, size, float64(i%7)+0.5)
		}
		push(t, s, strategy.Batch{Node: "n", Seq: 1, Diffs: diffs})
		got := collect(t, s, strategy.Query{Namespace: "ns", WindowSizes: []time.Duration{size}, Now: Base})
		if len(got) != n {
			t.Fatalf("GetCounters returned %d counters, want %d", len(got), n)
		}
		for i := range n {
			if v := got[ckey{fmt.Sprintf("key-%05d", i), start.UnixMilli(), size}]; v != float64(i%7)+0.5 {
				t.Fatalf("key-%05d = %v, want %v", i, v, float64(i%7)+0.5)
			}
		}
	}},
	{"concurrent nodes add up", func(t *testing.T, s strategy.Strategy) {
		size := time.Minute
		start := arith.WindowStart(Base, size)
		const nodes, batches = 8, 25
		var wg sync.WaitGroup
		errs := make(chan error, nodes*batches)
		for n := range nodes {
			wg.Go(func() {
				for seq := uint64(1); seq <= batches; seq++ {
					b := strategy.Batch{Node: fmt.Sprintf("node-%d", n), Seq: seq, Diffs: []strategy.Diff{
						diff("ns", "hot", start, size, 1), diff("ns", fmt.Sprintf("own-%d", n), start, size, 1),
					}}
					if err := s.PushDiffs(context.Background(), b); err != nil {
						errs <- err
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("PushDiffs: %v", err)
		}
		if got := window(t, s, "ns", "hot", start, size); got != nodes*batches {
			t.Fatalf("hot = %v, want %d", got, nodes*batches)
		}
		for n := range nodes {
			if got := window(t, s, "ns", fmt.Sprintf("own-%d", n), start, size); got != batches {
				t.Fatalf("own-%d = %v, want %d", n, got, batches)
			}
		}
	}},
	{"push and count returns totals as of each diff", func(t *testing.T, s strategy.Strategy) {
		pc, ok := s.(strategy.PushCounter)
		if !ok {
			t.Skip("strategy does not implement strategy.PushCounter")
		}
		size := time.Minute
		start := arith.WindowStart(Base, size)
		push(t, s, strategy.Batch{Node: "n", Seq: 1, Diffs: []strategy.Diff{diff("ns", "k", start.Add(-size), size, 5)}})
		b := strategy.Batch{Node: "n", Seq: 2, Diffs: []strategy.Diff{
			diff("ns", "k", start, size, 1), diff("ns", "j", start, size, 1), diff("ns", "k", start, size, 2),
		}}
		got, err := pc.PushAndCount(context.Background(), b)
		if err != nil {
			t.Fatalf("PushAndCount: %v", err)
		}
		want := []strategy.Totals{{Current: 1, Previous: 5}, {Current: 1}, {Current: 3, Previous: 5}}
		if !slices.Equal(got, want) {
			t.Fatalf("totals = %+v, want %+v", got, want)
		}
		again, err := pc.PushAndCount(context.Background(), b) // a retry: nothing applied twice
		if err != nil {
			t.Fatalf("PushAndCount retry: %v", err)
		}
		if want := []strategy.Totals{{Current: 3, Previous: 5}, {Current: 1}, {Current: 3, Previous: 5}}; !slices.Equal(again, want) {
			t.Fatalf("retry totals = %+v, want %+v (current, not re-applied)", again, want)
		}
		if got := window(t, s, "ns", "k", start, size); got != 3 {
			t.Fatalf("count = %v, want 3", got)
		}
	}},
	{"check and count decides and counts atomically", func(t *testing.T, s strategy.Strategy) {
		ck, ok := s.(strategy.Checker)
		if !ok {
			t.Skip("strategy does not implement strategy.Checker")
		}
		min, sec := time.Minute, time.Second
		now := Base.Add(15 * time.Second) // sliding weight of the previous minute: 0.75
		cur := arith.WindowStart(now, min)
		push(t, s, strategy.Batch{Node: "seed", Seq: 1, Diffs: []strategy.Diff{diff("ns", "k", cur.Add(-min), min, 8)}})
		limits := []strategy.CheckLimit{{WindowSize: min, Limit: 10}, {WindowSize: min, Limit: 3, Fixed: true}, {WindowSize: sec, Limit: 100}}
		check := func(cost float64) strategy.Check {
			return strategy.Check{Namespace: "ns", Key: "k", Cost: cost, Now: now, Limits: limits}
		}
		// rate 6 (8 * .75) + 2 <= 10 and 0 + 2 <= 3: passes; then 8 + 2 > 10: denied;
		// then 8 + 1 <= 10 but fixed 2 + 1 <= 3: passes; then fixed 3 + 1 > 3: denied.
		got, err := ck.CheckAndCount(context.Background(), "n", 1, []strategy.Check{check(2), check(2), check(1), check(0.5)})
		if err != nil {
			t.Fatalf("CheckAndCount: %v", err)
		}
		wantAllowed := []bool{true, false, true, false}
		wantCur := []float64{2, 2, 3, 3}
		for i, r := range got {
			if r.Allowed != wantAllowed[i] {
				t.Errorf("check %d: allowed %v, want %v", i, r.Allowed, wantAllowed[i])
			}
			if len(r.Totals) != 3 || r.Totals[0].Current != wantCur[i] || r.Totals[0].Previous != 8 || r.Totals[1].Current != wantCur[i] || r.Totals[2].Current != wantCur[i] {
				t.Errorf("check %d: totals %+v, want current %v (minute counted once), previous 8", i, r.Totals, wantCur[i])
			}
		}
		if got := window(t, s, "ns", "k", cur, min); got != 3 {
			t.Fatalf("minute window = %v, want 3", got)
		}
		if got := window(t, s, "ns", "k", arith.WindowStart(now, sec), sec); got != 3 {
			t.Fatalf("second window = %v, want 3", got)
		}
		// A retry of the call: the decisions made then, nothing counted again.
		again, err := ck.CheckAndCount(context.Background(), "n", 1, []strategy.Check{check(2), check(2), check(1), check(0.5)})
		if err != nil {
			t.Fatalf("CheckAndCount replay: %v", err)
		}
		for i, r := range again {
			if r.Allowed != wantAllowed[i] || r.Totals[0].Current != 3 {
				t.Errorf("replayed (node, seq), check %d: %+v, want allowed %v as decided then, current 3 (nothing counted)", i, r, wantAllowed[i])
			}
		}
		if got := window(t, s, "ns", "k", cur, min); got != 3 {
			t.Fatalf("minute window = %v after the replay, want 3", got)
		}
	}},
	{"concurrent checks never exceed the limit", func(t *testing.T, s strategy.Strategy) {
		ck, ok := s.(strategy.Checker)
		if !ok {
			t.Skip("strategy does not implement strategy.Checker")
		}
		const nodes, perNode, limit = 8, 30, 100
		now := Base.Add(30 * time.Second)
		passed := racePasses(t, ck, nodes, perNode, strategy.Check{Namespace: "ns", Key: "hot", Cost: 1, Now: now, Limits: []strategy.CheckLimit{{WindowSize: time.Minute, Limit: limit}}})
		if passed != limit {
			t.Fatalf("%d checks passed, want exactly %d", passed, limit)
		}
		if got := window(t, s, "ns", "hot", arith.WindowStart(now, time.Minute), time.Minute); got != limit {
			t.Fatalf("count = %v, want %d", got, limit)
		}
	}},
	{"canceled context applies nothing", func(t *testing.T, s strategy.Strategy) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		size := time.Minute
		start := arith.WindowStart(Base, size)
		if err := s.PushDiffs(ctx, strategy.Batch{Node: "n", Seq: 1, Diffs: []strategy.Diff{diff("ns", "k", start, size, 1)}}); err == nil {
			t.Fatal("PushDiffs with a canceled context: no error")
		}
		if got := window(t, s, "ns", "k", start, size); got != 0 {
			t.Fatalf("count = %v after a canceled push, want 0", got)
		}
		for _, err := range s.GetCounters(ctx, strategy.Query{Namespace: "ns", WindowSizes: []time.Duration{size}, Now: Base}) {
			if err == nil {
				t.Fatal("GetCounters with a canceled context yielded no error")
			}
		}
	}},
	{"empty batch and early stop", func(t *testing.T, s strategy.Strategy) {
		push(t, s, strategy.Batch{Node: "n", Seq: 1})
		size := time.Minute
		start := arith.WindowStart(Base, size)
		push(t, s, strategy.Batch{Node: "n", Seq: 2, Diffs: []strategy.Diff{diff("ns", "a", start, size, 1), diff("ns", "b", start, size, 1)}})
		n := 0
		for _, err := range s.GetCounters(context.Background(), strategy.Query{Namespace: "ns", WindowSizes: []time.Duration{size}, Now: Base}) {
			if err != nil {
				t.Fatal(err)
			}
			n++
			break
		}
		if n != 1 {
			t.Fatalf("iterated %d counters before break, want 1", n)
		}
	}},
}
