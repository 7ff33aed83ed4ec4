package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/memory"
)

// store is the strategy the nodes of every run share.
type store struct {
	s     strategy.Strategy
	close func()
}

// openStore opens the store of -store; with a bucket among the algorithms,
// one that keeps buckets (strategy.BucketStore).
func openStore(ctx context.Context, o *options) (*store, error) {
	st := &store{s: memory.New(), close: func() {}}
	if o.store != "memory" {
		var err error
		if st, err = openServerStore(ctx, o); err != nil {
			return nil, err
		}
	}
	if _, ok := st.s.(strategy.BucketStore); o.buckets() && !ok {
		st.close()
		return nil, fmt.Errorf("-store %s does not keep buckets (strategy.BucketStore): run buckets on another store", o.store)
	}
	return st, nil
}

// rtt returns the median duration of a few store reads.
func (s *store) rtt(ctx context.Context) (time.Duration, error) {
	var d []time.Duration
	for range 15 {
		t0 := time.Now()
		if _, err := s.s.GetWindow(ctx, "rtt-probe", "k", time.UnixMilli(0), time.Second); err != nil {
			return 0, fmt.Errorf("store round trip: %w", err)
		}
		d = append(d, time.Since(t0))
	}
	slices.Sort(d)
	return d[len(d)/2], nil
}
