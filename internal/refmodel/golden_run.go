package refmodel

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
	"github.com/ratesync/ratesync/strategy"
)

// RunGolden runs every case of the golden table, each in a subtest of its
// name on a fresh instance whose clock the case sets, and reports every
// step whose decision differs from the table's, with the case's name and
// the step's index, time, cost and limits. A step of one limit is asked
// with AllowOne every other time, else with Allow.
//
// With store nil the namespace is local-only: the node's own arithmetic.
// Otherwise it is synchronous on store, counting on the node's clock; when
// store decides (strategy.Checker), every step with a cost above 0, or
// with an anchored window or a log, must be its decision: one check call
// answered by it, and no hit counted on the node.
func RunGolden(t *testing.T, store strategy.Strategy) { runGolden(t, store, 1) }

// RunGoldenTogether is RunGolden with each case run on keys keys at once:
// each step asks for every key concurrently, so that a synchronous
// namespace's syncer sends several of them in one check call (the store
// then decides several checks, of distinct keys, in one script or one
// function call), and every key's decision must be the table's.
func RunGoldenTogether(t *testing.T, store strategy.Strategy, keys int) {
	runGolden(t, store, keys)
}

func runGolden(t *testing.T, store strategy.Strategy, keys int) {
	g, err := LoadGolden()
	if err != nil {
		t.Fatal(err)
	}
	windows := make([]time.Duration, len(g.WindowsMS))
	for i, w := range g.WindowsMS {
		windows[i] = time.Duration(w) * time.Millisecond
	}
	_, checker := store.(strategy.Checker)
	var calls, checks atomic.Uint64
	for i, c := range g.Cases {
		t.Run(c.Name, func(t *testing.T) {
			var ms atomic.Int64
			ms.Store(c.StartMS)
			in := ratelimiting.NewInstance(t.Name(), ratelimiting.WithClock(func() time.Time { return time.UnixMilli(ms.Load()) }),
				ratelimiting.WithLogger(slog.New(slog.DiscardHandler)))
			defer func() { _ = in.Close(context.Background()) }()
			ns := fmt.Sprintf("golden%d", i)
			cfg := namespace.Config{Name: ns, SyncRate: namespace.LocalOnly, WindowSizes: windows}
			if store != nil {
				cfg.SyncRate, cfg.Strategy, cfg.Clock = namespace.Synchronous, store, namespace.NodeClock
			}
			if err := in.New(cfg); err != nil {
				t.Fatal(err)
			}
			for _, msg := range runCase(in, &ms, ns, keys, c) {
				t.Error(msg)
			}
			if checker {
				n, want := inStore(t, in, ns, keys, c)
				calls.Add(n)
				checks.Add(want)
			}
		})
	}
	if keys > 1 && checker {
		t.Logf("%d checks in %d check calls", checks.Load(), calls.Load())
	}
}

// runCase runs the steps of c on keys keys (asked concurrently when more
// than one) and returns what differs, step by step.
func runCase(in *ratelimiting.Instance, ms *atomic.Int64, ns string, keys int, c GoldenCase) []string {
	limits := make([]Limit, len(c.Limits))
	for i, l := range c.Limits {
		var err error
		if limits[i], err = l.Model(); err != nil {
			return []string{err.Error()}
		}
	}
	var out []string
	got := make([]ratelimiting.Decision, keys)
	methods := make([]string, keys)
	errs := make([]error, keys)
	for i, s := range c.Steps {
		ms.Store(c.StartMS + s.T)
		want, err := s.Want(limits)
		if err != nil {
			return append(out, fmt.Sprintf("step %d: %v", i, err))
		}
		use := make([]Limit, len(s.Limits))
		for j, k := range s.Limits {
			use[j] = limits[k]
		}
		ls := Limits(use)
		var wg sync.WaitGroup
		for k := range keys {
			wg.Go(func() { got[k], methods[k], errs[k] = allow(in, ns, fmt.Sprint("k", k), s.Cost, ls, i%2 == 1) })
		}
		wg.Wait()
		for k := range keys {
			at := fmt.Sprintf("step %d (t %d ms, cost %v, limits %v, %s", i, s.T, s.Cost, s.Limits, methods[k])
			if keys > 1 {
				at += fmt.Sprintf(", key %d", k)
			}
			if errs[k] != nil {
				out = append(out, fmt.Sprintf("%s): %v", at, errs[k]))
			} else if diff := Same(got[k], want); diff != "" {
				out = append(out, fmt.Sprintf("%s): %s", at, diff))
			}
		}
	}
	return out
}

// inStore checks that the store decided every step of c on keys keys that
// it must, and returns the check calls it answered and the checks those
// held.
func inStore(t *testing.T, in *ratelimiting.Instance, ns string, keys int, c GoldenCase) (calls, checks uint64) {
	t.Helper()
	steps := uint64(0)
	for _, s := range c.Steps {
		keyed := slices.ContainsFunc(s.Limits, func(i int) bool { k := c.Limits[i].Kind; return k == "anchored" || k == "log" })
		if s.Cost > 0 || keyed {
			steps++
		}
	}
	for _, st := range in.Stats() {
		if st.Config.Name != ns {
			continue
		}
		// The keys of a step share calls, never those of two steps.
		if st.Sync.Checks < steps || st.Sync.Checks > steps*uint64(keys) || st.Sync.LocalHits != 0 || st.Sync.InDoubt != 0 {
			t.Errorf("the store answered %d check calls (%d hits counted on the node, %d in doubt), want %d steps of %d keys decided by the store (last error %v)",
				st.Sync.Checks, st.Sync.LocalHits, st.Sync.InDoubt, steps, keys, st.Sync.LastError)
		}
		return st.Sync.Checks, steps * uint64(keys)
	}
	t.Errorf("no stats for namespace %s", ns)
	return 0, 0
}
