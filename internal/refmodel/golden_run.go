package refmodel

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
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
func RunGolden(t *testing.T, store strategy.Strategy) {
	g, err := LoadGolden()
	if err != nil {
		t.Fatal(err)
	}
	windows := make([]time.Duration, len(g.WindowsMS))
	for i, w := range g.WindowsMS {
		windows[i] = time.Duration(w) * time.Millisecond
	}
	_, checker := store.(strategy.Checker)
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
			for _, msg := range runCase(in, &ms, ns, c) {
				t.Error(msg)
			}
			if checker {
				inStore(t, in, ns, c)
			}
		})
	}
}

// runCase runs the steps of c and returns what differs, step by step.
func runCase(in *ratelimiting.Instance, ms *atomic.Int64, ns string, c GoldenCase) []string {
	limits := make([]Limit, len(c.Limits))
	for i, l := range c.Limits {
		var err error
		if limits[i], err = l.Model(); err != nil {
			return []string{err.Error()}
		}
	}
	var out []string
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
		got, method, err := allow(in, ns, "k", s.Cost, Limits(use), i%2 == 1)
		if err != nil {
			out = append(out, fmt.Sprintf("step %d (t %d ms, cost %v, limits %v): %s: %v", i, s.T, s.Cost, s.Limits, method, err))
			continue
		}
		if diff := Same(got, want); diff != "" {
			out = append(out, fmt.Sprintf("step %d (t %d ms, cost %v, limits %v, %s): %s", i, s.T, s.Cost, s.Limits, method, diff))
		}
	}
	return out
}

// inStore checks that the store decided every step of c that it must.
func inStore(t *testing.T, in *ratelimiting.Instance, ns string, c GoldenCase) {
	t.Helper()
	want := uint64(0)
	for _, s := range c.Steps {
		keyed := slices.ContainsFunc(s.Limits, func(i int) bool { k := c.Limits[i].Kind; return k == "anchored" || k == "log" })
		if s.Cost > 0 || keyed {
			want++
		}
	}
	for _, st := range in.Stats() {
		if st.Config.Name != ns {
			continue
		}
		if st.Sync.Checks != want || st.Sync.LocalHits != 0 || st.Sync.InDoubt != 0 {
			t.Errorf("the store answered %d check calls (%d hits counted on the node, %d in doubt), want %d: every step with a cost or a keyed limit decided by the store (last error %v)",
				st.Sync.Checks, st.Sync.LocalHits, st.Sync.InDoubt, want, st.Sync.LastError)
		}
		return
	}
	t.Errorf("no stats for namespace %s", ns)
}
