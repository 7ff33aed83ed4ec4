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
func RunGolden(t *testing.T, store strategy.Strategy) { runGolden(t, store, namespace.Synchronous, 1) }

// RunGoldenTogether is RunGolden with each case run on keys keys at once:
// each step asks for every key concurrently, so that a synchronous
// namespace's syncer sends several of them in one check call (the store
// then decides several checks, of distinct keys, in one script or one
// function call), and every key's decision must be the table's.
func RunGoldenTogether(t *testing.T, store strategy.Strategy, keys int) {
	runGolden(t, store, namespace.Synchronous, keys)
}

// RunGoldenPeriodic runs the cases of the golden table without anchored
// windows or logs (which a periodic namespace refuses) through a periodic
// namespace on store, synced (pushed and read back) after each step: the
// node decides on its view, and the store applies its diffs, buckets'
// included (one hit per push, dated by its instant: exact), so that each
// decision after the first rests on the store's arithmetic of pushes.
func RunGoldenPeriodic(t *testing.T, store strategy.Strategy) { runGolden(t, store, time.Hour, 1) }

// Store is a store the golden suite runs on: it counts and decides.
type Store interface {
	strategy.Strategy
	strategy.Checker
}

// RunGoldenSuite runs every golden runner on a fresh store from newStore,
// each as a subtest: synchronous (RunGolden), eight keys at once
// (RunGoldenTogether), one check call per instant (RunGoldenCalls) and
// periodic (RunGoldenPeriodic). Every store's package runs it.
func RunGoldenSuite(t *testing.T, newStore func(t *testing.T) Store) {
	t.Run("synchronous", func(t *testing.T) { RunGolden(t, newStore(t)) })
	t.Run("together", func(t *testing.T) { RunGoldenTogether(t, newStore(t), 8) })
	t.Run("calls", func(t *testing.T) { RunGoldenCalls(t, newStore(t)) })
	t.Run("periodic", func(t *testing.T) { RunGoldenPeriodic(t, newStore(t)) })
}

// runGolden runs the golden table through a namespace of sync rate rate
// on store (local-only when store is nil), on keys keys at once.
func runGolden(t *testing.T, store strategy.Strategy, rate time.Duration, keys int) {
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
		keyed := slices.ContainsFunc(c.Limits, func(l GoldenLimit) bool { return l.Kind == "anchored" || l.Kind == "log" })
		if rate > 0 && keyed {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			var ms atomic.Int64
			ms.Store(c.StartMS)
			// Timeouts far beyond any store call of a busy test machine:
			// a call that timed out would be decided on the node instead.
			in := ratelimiting.NewInstance(t.Name(), ratelimiting.WithClock(func() time.Time { return time.UnixMilli(ms.Load()) }),
				ratelimiting.WithLogger(slog.New(slog.DiscardHandler)), ratelimiting.WithSyncTimeout(time.Minute, 30*time.Second))
			defer func() { _ = in.Close(context.Background()) }()
			ns := fmt.Sprintf("golden%d", i)
			cfg := namespace.Config{Name: ns, SyncRate: namespace.LocalOnly, WindowSizes: windows}
			if store != nil {
				cfg.SyncRate, cfg.Strategy, cfg.Clock = rate, store, namespace.NodeClock
			}
			if err := in.New(cfg); err != nil {
				t.Fatal(err)
			}
			var push func() error
			if rate > 0 {
				push = func() error { return in.Sync(context.Background(), ns) }
			}
			for _, msg := range runCase(in, &ms, ns, keys, c, push) {
				t.Error(msg)
			}
			if checker && rate == namespace.Synchronous {
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
// than one), calling push after each when it is set, and returns what
// differs, step by step.
func runCase(in *ratelimiting.Instance, ms *atomic.Int64, ns string, keys int, c GoldenCase, push func() error) []string {
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
		if push != nil {
			if err := push(); err != nil {
				return append(out, fmt.Sprintf("step %d: Sync: %v", i, err))
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

// RunGoldenCalls runs every case of the golden table through store's
// CheckAndCount itself, without a node: the steps of one instant go in one
// call, in order, so that the store decides several checks of one key in
// one call, each seeing the ones before. Each check must pass exactly when
// the table's step does; the rest of a decision (Remaining, Reset,
// RetryAfter) is the node's arithmetic on the state the store returns,
// which RunGolden checks.
func RunGoldenCalls(t *testing.T, store strategy.Checker) {
	g, err := LoadGolden()
	if err != nil {
		t.Fatal(err)
	}
	calls, checks := 0, 0
	for i, c := range g.Cases {
		t.Run(c.Name, func(t *testing.T) {
			limits := make([]strategy.CheckLimit, len(c.Limits))
			for j, gl := range c.Limits {
				l, err := gl.Model()
				if err != nil {
					t.Fatal(err)
				}
				limits[j] = checkLimit(l)
			}
			ns, node, seq := fmt.Sprintf("goldencalls%d", i), fmt.Sprintf("golden/%d", i), uint64(0)
			for lo := 0; lo < len(c.Steps); {
				hi := lo + 1
				for hi < len(c.Steps) && c.Steps[hi].T == c.Steps[lo].T {
					hi++
				}
				call := make([]strategy.Check, hi-lo)
				for j, s := range c.Steps[lo:hi] {
					call[j] = strategy.Check{Namespace: ns, Key: "k", Cost: s.Cost, Now: time.UnixMilli(c.StartMS + s.T)}
					for _, k := range s.Limits {
						call[j].Limits = append(call[j].Limits, limits[k])
					}
				}
				seq++
				res, err := store.CheckAndCount(context.Background(), node, seq, call)
				if err != nil {
					t.Fatalf("steps %d to %d: CheckAndCount: %v", lo, hi-1, err)
				}
				for j, r := range res {
					if s := c.Steps[lo+j]; r.Allowed != s.Allowed {
						t.Errorf("step %d (t %d ms, cost %v, limits %v, check %d of %d in a call): allowed %v, want %v",
							lo+j, s.T, s.Cost, s.Limits, j+1, len(call), r.Allowed, s.Allowed)
					}
				}
				calls, checks, lo = calls+1, checks+len(call), hi
			}
		})
	}
	t.Logf("%d checks in %d calls", checks, calls)
}

// checkLimit returns l as a store's check names it.
func checkLimit(l Limit) strategy.CheckLimit {
	cl := strategy.CheckLimit{WindowSize: l.Window, Limit: l.Limit}
	switch l.Kind {
	case Fixed:
		cl.Fixed = true
	case Precision:
		cl.Precision = l.Precision
	case Anchored:
		cl.Kind = strategy.KindAnchored
	case Log:
		cl.Kind = strategy.KindLog
	case Token, Leaky:
		cl.Kind, cl.Burst = uint8(algorithms[l.Kind]), l.burst()
	}
	return cl
}
