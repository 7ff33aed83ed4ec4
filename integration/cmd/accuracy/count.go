package main

import (
	"context"
	"fmt"
	"iter"
	"sync/atomic"
	"time"

	"github.com/ratesync/ratesync/strategy"
)

// countedStore is a strategy that counts every call the nodes of one run
// make to the store it wraps: the run's store exchanges. It offers what
// the nodes may ask of the store (pushes, checks, buckets), and its time
// when the wrapped store tells time (clockedStore).
type countedStore struct {
	s      strategy.Strategy
	pc     strategy.PushCounter
	ck     strategy.Checker
	bs     strategy.BucketStore
	nCalls atomic.Uint64
}

// clockedStore is a countedStore of a store that tells time.
type clockedStore struct {
	*countedStore
	clock strategy.Clock
}

func (c *clockedStore) Time(ctx context.Context) (time.Time, error) {
	c.nCalls.Add(1)
	return c.clock.Time(ctx)
}

// storeCounter is the counting wrapper a run's nodes share.
type storeCounter interface {
	strategy.Strategy
	calls() uint64
}

// countCalls wraps s: s must push and count (strategy.PushCounter), check
// (strategy.Checker) and keep buckets (strategy.BucketStore), as the
// memory, Redis and PostgreSQL stores do; the wrapper tells time exactly
// when s does (strategy.Clock), so that the nodes count in the same clock
// as without it.
func countCalls(s strategy.Strategy) (storeCounter, error) {
	pc, ok1 := s.(strategy.PushCounter)
	ck, ok2 := s.(strategy.Checker)
	bs, ok3 := s.(strategy.BucketStore)
	if !ok1 || !ok2 || !ok3 {
		return nil, fmt.Errorf("store %T: counting its calls needs strategy.PushCounter, strategy.Checker and strategy.BucketStore", s)
	}
	c := &countedStore{s: s, pc: pc, ck: ck, bs: bs}
	if clock, ok := s.(strategy.Clock); ok {
		return &clockedStore{countedStore: c, clock: clock}, nil
	}
	return c, nil
}

func (c *countedStore) calls() uint64 { return c.nCalls.Load() }

func (c *countedStore) PushDiffs(ctx context.Context, b strategy.Batch) error {
	c.nCalls.Add(1)
	return c.s.PushDiffs(ctx, b)
}

func (c *countedStore) GetCounters(ctx context.Context, q strategy.Query) iter.Seq2[strategy.Counter, error] {
	c.nCalls.Add(1)
	return c.s.GetCounters(ctx, q)
}

func (c *countedStore) GetWindow(ctx context.Context, namespace, key string, windowStart time.Time, windowSize time.Duration) (float64, error) {
	c.nCalls.Add(1)
	return c.s.GetWindow(ctx, namespace, key, windowStart, windowSize)
}

func (c *countedStore) Purge(ctx context.Context, namespace string, windowSizes []time.Duration, now time.Time) error {
	c.nCalls.Add(1)
	return c.s.Purge(ctx, namespace, windowSizes, now)
}

func (c *countedStore) PushAndCount(ctx context.Context, b strategy.Batch) ([]strategy.Totals, error) {
	c.nCalls.Add(1)
	return c.pc.PushAndCount(ctx, b)
}

func (c *countedStore) CheckAndCount(ctx context.Context, node string, seq uint64, checks []strategy.Check) ([]strategy.CheckResult, error) {
	c.nCalls.Add(1)
	return c.ck.CheckAndCount(ctx, node, seq, checks)
}

func (c *countedStore) GetBuckets(ctx context.Context, namespace string, refs []strategy.BucketRef) ([]strategy.BucketState, error) {
	c.nCalls.Add(1)
	return c.bs.GetBuckets(ctx, namespace, refs)
}
