package refmodel

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
	"github.com/ratesync/ratesync/strategy"
)

// LeasedSets are the limit sets RunLeased drives: every leasable
// algorithm alone, and several at once.
var LeasedSets = []struct {
	Name   string
	Limits []Limit
}{
	{"sliding", []Limit{{Kind: Sliding, Limit: 20, Window: time.Second}}},
	{"fixed", []Limit{{Kind: Fixed, Limit: 20, Window: time.Second}}},
	{"precision", []Limit{{Kind: Precision, Limit: 20, Window: time.Second, Precision: 250 * time.Millisecond}}},
	{"token", []Limit{{Kind: Token, Limit: 20, Window: time.Second, Burst: 10}}},
	{"leaky", []Limit{{Kind: Leaky, Limit: 20, Window: time.Second, Burst: 5}}},
	{"anchored", []Limit{{Kind: Anchored, Limit: 20, Window: time.Second}}},
	{"several", []Limit{
		{Kind: Sliding, Limit: 20, Window: time.Second},
		{Kind: Fixed, Limit: 50, Window: 5 * time.Second},
		{Kind: Token, Limit: 30, Window: time.Second, Burst: 15},
	}},
}

// LeasedNodes is how many nodes RunLeased runs.
const LeasedNodes = 3

// RunLeased runs random traces through LeasedNodes instances sharing store
// and one clock, in a leased namespace, one subtest per set of
// LeasedSets: at each step a random node decides a request of cost 1 or
// 2, offered at several times the limits' rate with idle gaps, and now and
// then a node syncs (which returns the quota it does not use), in phases
// of load from about half the limits' rate to about ten times it. The
// requests the nodes admitted, replayed in order through the exact model,
// must each be admitted there: the cluster never admitted what a single
// exact limiter would have refused. The nodes must also admit at least
// half of what the exact model admits of the same requests, and decide
// most requests without a store call.
func RunLeased(t *testing.T, store strategy.Strategy, seed uint64) {
	for _, set := range LeasedSets {
		t.Run(set.Name, func(t *testing.T) { runLeased(t, store, set.Name, set.Limits, seed) })
	}
}

func runLeased(t *testing.T, store strategy.Strategy, name string, limits []Limit, seed uint64) {
	var ms atomic.Int64
	ms.Store(1_800_000_000_000)
	clock := func() time.Time { return time.UnixMilli(ms.Load()) }
	cfg := namespace.Config{
		Name: "leased-" + name, SyncRate: 50 * time.Millisecond, Strategy: store, Leases: true, Clock: namespace.NodeClock,
		WindowSizes: []time.Duration{250 * time.Millisecond, time.Second, 5 * time.Second},
	}
	nodes := make([]*ratelimiting.Instance, LeasedNodes)
	for i := range nodes {
		nodes[i] = ratelimiting.NewInstance(fmt.Sprintf("%s-%d", t.Name(), i), ratelimiting.WithClock(clock),
			ratelimiting.WithNodeID(fmt.Sprintf("node%d", i)), ratelimiting.WithLogger(slog.New(slog.DiscardHandler)),
			ratelimiting.WithSyncTimeout(time.Minute, 30*time.Second))
		if err := nodes[i].New(cfg); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = nodes[i].Close(context.Background()) }()
	}
	type hit struct {
		at   int64
		cost float64
		node int
	}
	var admitted []hit
	alone := New() // the same requests through one exact limiter
	aloneAdmitted, decisions := 0, 0
	r := rand.New(rand.NewPCG(seed, uint64(len(name))))
	rl := Limits(limits)
	key := "k-" + name
	storeCalls := func() (calls uint64) {
		for _, in := range nodes {
			for _, st := range in.Stats() {
				if st.Config.Name == cfg.Name {
					calls += st.Leases.StoreCalls
				}
			}
		}
		return calls
	}
	var phaseCalls, phaseDecisions [3]uint64
	for step := range 4000 {
		phase := step / 250 % 3
		calls0 := storeCalls()
		switch {
		case r.IntN(400) == 0:
			ms.Add(int64(300 + r.IntN(1500))) // an idle gap
		default:
			// Phases of load: about 10x the limits' rate, about 2x, and
			// about half, so that grants sized for one meet the next.
			ms.Add(int64(r.IntN([3]int{4, 40, 160}[phase])))
		}
		now := ms.Load()
		if r.IntN(20) == 0 {
			if err := nodes[r.IntN(len(nodes))].Sync(context.Background(), cfg.Name); err != nil {
				t.Fatalf("step %d: sync: %v", step, err)
			}
		}
		node, cost := r.IntN(len(nodes)), float64(1+r.IntN(3)/2)
		d, method, err := allow(nodes[node], cfg.Name, key, cost, rl, step%2 == 1)
		if err != nil {
			t.Fatalf("step %d: %s: %v", step, method, err)
		}
		decisions++
		phaseDecisions[phase]++
		phaseCalls[phase] += storeCalls() - calls0
		if alone.Decide(now, cost, limits).Allowed {
			aloneAdmitted++
		}
		if d.Allowed {
			admitted = append(admitted, hit{now, cost, node})
		}
	}
	replay := New()
	got := 0
	for i, h := range admitted {
		if d := replay.Decide(h.at, h.cost, limits); !d.Allowed {
			t.Errorf("admission %d (node %d, cost %v, at %d) exceeds the limits: the exact model refuses it (RetryAfter %v)", i, h.node, h.cost, h.at, d.RetryAfter)
		}
		got++
	}
	var grants uint64
	for _, in := range nodes {
		for _, st := range in.Stats() {
			if st.Config.Name == cfg.Name {
				grants += st.Leases.Grants
			}
		}
	}
	t.Logf("admitted %d of %d requests (the exact model alone: %d); %d grants; store calls per 100 decisions at about 10x, 2x and 0.5x the limits' rate: %.1f, %.1f, %.1f",
		got, decisions, aloneAdmitted, grants, per100(phaseCalls[0], phaseDecisions[0]), per100(phaseCalls[1], phaseDecisions[1]), per100(phaseCalls[2], phaseDecisions[2]))
	if got*2 < aloneAdmitted {
		t.Errorf("admitted %d, less than half of the exact model's %d", got, aloneAdmitted)
	}
	if c := per100(phaseCalls[0], phaseDecisions[0]); c > 25 {
		t.Errorf("%.1f store calls per 100 decisions at 10x the limits' rate: leases should spare most", c)
	}
}

func per100(calls, decisions uint64) float64 {
	return float64(calls) * 100 / float64(max(decisions, 1))
}
