package main

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/ratesync/ratesync/ratelimiting"
)

// spec is one run: an algorithm (with a precision for a sliding window), a
// node count and a sync rate, leased or not.
type spec struct {
	alg       ratelimiting.Algorithm
	precision time.Duration // 0: none
	nodes     int
	sync      time.Duration
	leased    bool
}

// groups returns the runs by algorithm, precision, node count, sync rate
// and lease (unleased first), in groups of -parallel runs made at once.
func (o *options) groups() [][]spec {
	var all []spec
	for _, a := range o.algorithms {
		precisions := []time.Duration{0}
		if a == ratelimiting.SlidingWindow && o.precisions != nil {
			precisions = o.precisions
		}
		for _, p := range precisions {
			for _, n := range o.nodes {
				for _, s := range o.syncs {
					if o.leases != leasesOn {
						all = append(all, spec{a, p, n, s, false})
					}
					if o.leases != leasesOff && s > 0 {
						all = append(all, spec{a, p, n, s, true})
					}
				}
			}
		}
	}
	var out [][]spec
	for g := range slices.Chunk(all, o.parallel) {
		out = append(out, g)
	}
	return out
}

// measureGroup runs the specs of g at once and returns their rows in g's
// order, or the first error.
func measureGroup(ctx context.Context, o *options, st *store, g []spec) ([]row, error) {
	rows := make([]row, len(g))
	errs := make([]error, len(g))
	var wg sync.WaitGroup
	for i, sp := range g {
		wg.Go(func() { rows[i], errs[i] = measure(ctx, o, st, sp) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return rows, nil
}

// order sorts rows as the sequential runs come: by algorithm (in -algorithm
// order), precision (in -precision order), node count, sync rate, then
// unleased before leased.
func (o *options) order(a, b row) int {
	return cmp.Or(
		cmp.Compare(slices.Index(o.algorithms, a.alg), slices.Index(o.algorithms, b.alg)),
		cmp.Compare(slices.Index(o.precisions, a.precision), slices.Index(o.precisions, b.precision)),
		cmp.Compare(a.nodes, b.nodes),
		cmp.Compare(a.sync, b.sync),
		cmp.Compare(btoi(a.leased), btoi(b.leased)),
	)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
