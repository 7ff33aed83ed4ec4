package ratelimiting_test

import (
	"context"
	"errors"

	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/strategytest"
	"github.com/ratesync/ratesync/ratelimiting"
	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/memory"
)

func TestTokenBucket(t *testing.T) {
	clk := newClock(t0)
	in := newInstance(t, clk)
	mustNew(t, in, local("ns", time.Minute))
	tb := ratelimiting.Limit{Limit: 3, Window: time.Second, Algorithm: ratelimiting.TokenBucket}
	for i := range 3 {
		d := allow(t, in, "ns", "k", 1, tb)
		if !d.Allowed || d.Limits[0].Remaining != float64(2-i) {
			t.Fatalf("hit %d of a full bucket: %+v, want allowed, %d remaining", i, d, 2-i)
		}
	}
	d := allow(t, in, "ns", "k", 1, tb)
	st := d.Limits[0]
	// One token takes 1000/3 ms: the fourth hit waits 334 ms; the bucket is
	// full again after 1000 ms.
	if d.Allowed || d.RetryAfter != 334*time.Millisecond || st.Rate != 3 || st.Remaining != 0 || st.Reset != time.Second {
		t.Fatalf("empty bucket: %+v", d)
	}
	clk.Advance(333 * time.Millisecond)
	if d := allow(t, in, "ns", "k", 1, tb); d.Allowed || d.RetryAfter != time.Millisecond {
		t.Fatalf("1 ms before a token: %+v, want denied, retry after 1ms", d)
	}
	clk.Advance(time.Millisecond)
	if d := allow(t, in, "ns", "k", 1, tb); !d.Allowed {
		t.Fatalf("at RetryAfter: %+v, want allowed", d)
	}
	// A clock going backwards refills nothing.
	clk.Advance(-300 * time.Millisecond)
	if d := allow(t, in, "ns", "k", 0, tb); d.Limits[0].Remaining != 0 {
		t.Fatalf("after the clock went back: %+v, want no token", d)
	}
}

func TestBucketBurstAndLeakyBucket(t *testing.T) {
	clk := newClock(t0)
	in := newInstance(t, clk)
	mustNew(t, in, local("ns", time.Minute))
	for _, a := range []ratelimiting.Algorithm{ratelimiting.TokenBucket, ratelimiting.LeakyBucket} {
		l := ratelimiting.Limit{Limit: 1, Window: time.Minute, Algorithm: a, Burst: 5}
		key := a.String()
		for i := range 5 {
			if d := allow(t, in, "ns", key, 1, l); !d.Allowed {
				t.Fatalf("%s: hit %d within the burst denied: %+v", a, i, d)
			}
		}
		if d := allow(t, in, "ns", key, 1, l); d.Allowed || d.RetryAfter != time.Minute || d.Limits[0].Reset != 5*time.Minute {
			t.Fatalf("%s: past the burst: %+v, want retry after 1m, reset 5m", a, d)
		}
	}
}

func TestBucketRateChangeKeepsTheLevel(t *testing.T) {
	clk := newClock(t0)
	in := newInstance(t, clk)
	mustNew(t, in, local("ns", time.Minute))
	l := ratelimiting.Limit{Limit: 10, Window: time.Second, Algorithm: ratelimiting.TokenBucket}
	allow(t, in, "ns", "k", 10, l)
	l.Limit, l.Burst = 20, 10 // twice the rate, the same capacity
	d := allow(t, in, "ns", "k", 0, l)
	if d.Limits[0].Remaining != 0 || d.RetryAfter != 0 || !d.Allowed {
		t.Fatalf("peek after a rate change: %+v, want an empty bucket", d)
	}
	clk.Advance(50 * time.Millisecond) // 20 per second: one token per 50 ms
	if d := allow(t, in, "ns", "k", 1, l); !d.Allowed {
		t.Fatalf("after one token at the new rate: %+v", d)
	}
}

func TestBucketsAndWindowsAllOrNothing(t *testing.T) {
	clk := newClock(t0)
	in := newInstance(t, clk)
	mustNew(t, in, local("ns", time.Minute))
	win := ratelimiting.Limit{Limit: 2, Window: time.Minute}
	tb := ratelimiting.Limit{Limit: 1, Window: time.Hour, Algorithm: ratelimiting.TokenBucket, Burst: 3}
	allow(t, in, "ns", "k", 1, win, tb)
	allow(t, in, "ns", "k", 1, win, tb)
	d := allow(t, in, "ns", "k", 1, win, tb)
	if d.Allowed || d.Limits[0].Allowed || !d.Limits[1].Allowed || d.Limits[1].Remaining != 1 {
		t.Fatalf("window denies: %+v, want the bucket untouched with 1 token", d)
	}
	// The bucket denies: the window is not counted.
	if d := allow(t, in, "ns", "k2", 3, tb); !d.Allowed {
		t.Fatal(d)
	}
	d = allow(t, in, "ns", "k2", 1, win, tb)
	if d.Allowed || !d.Limits[0].Allowed || d.Limits[0].Rate != 0 {
		t.Fatalf("bucket denies: %+v, want the window uncounted", d)
	}
}

func TestConcurrentBucketTakesExactlyItsCapacity(t *testing.T) {
	clk := newClock(t0)
	in := newInstance(t, clk)
	mustNew(t, in, local("ns", time.Minute))
	l := ratelimiting.Limit{Limit: 1, Window: time.Hour, Algorithm: ratelimiting.LeakyBucket, Burst: 100}
	var passed atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				if d, err := in.Allow(context.Background(), "ns", "hot", 1, l); err == nil && d.Allowed {
					passed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if passed.Load() != 100 {
		t.Fatalf("%d passed, want exactly 100", passed.Load())
	}
}

func TestInvalidLimitsNameTheField(t *testing.T) {
	clk := newClock(t0)
	in := newInstance(t, clk)
	mustNew(t, in, local("ns", time.Minute))
	tb := ratelimiting.TokenBucket
	for _, c := range []struct {
		cost  float64
		l     []ratelimiting.Limit
		field string
	}{
		{1, []ratelimiting.Limit{{Limit: 1, Window: time.Minute, Algorithm: 9}}, "limits[0].algorithm"},
		{1, []ratelimiting.Limit{{Limit: 20_000, Window: time.Minute, Algorithm: ratelimiting.SlidingLog}}, "limits[0].limit"},
		{0.001, []ratelimiting.Limit{{Limit: 100, Window: time.Minute, Algorithm: ratelimiting.SlidingLog}}, "cost"},
		{1, []ratelimiting.Limit{{Limit: 1, Window: 0, Algorithm: ratelimiting.AnchoredWindow}}, "limits[0].window"},
		{1, []ratelimiting.Limit{{Limit: 1, Window: 2 * time.Minute, Algorithm: tb, Precision: time.Minute}}, "limits[0].precision"},
		{1, []ratelimiting.Limit{{Limit: 1, Window: 2 * time.Minute, Fixed: true, Precision: time.Minute}}, "limits[0].precision"},
		{1, []ratelimiting.Limit{{Limit: 1, Window: 90 * time.Second, Precision: time.Minute}}, "limits[0].precision"},
		{1, []ratelimiting.Limit{{Limit: 1, Window: 2 * time.Hour, Precision: time.Minute}}, "limits[0].precision"},
		{1, []ratelimiting.Limit{{Limit: 1, Window: time.Hour, Precision: 30 * time.Second}}, "limits[0].precision"},
		{1, []ratelimiting.Limit{{Limit: 1, Window: time.Minute, Algorithm: tb, Fixed: true}}, "limits[0].fixed"},
		{1, []ratelimiting.Limit{{Limit: 1, Window: time.Minute, Algorithm: tb, Burst: -1}}, "limits[0].burst"},
		{1, []ratelimiting.Limit{{Limit: 1, Window: time.Minute, Burst: 2}}, "limits[0].burst"},
		{3, []ratelimiting.Limit{{Limit: 5, Window: time.Minute, Algorithm: tb, Burst: 2}}, "cost"},
		{1, []ratelimiting.Limit{{Limit: 5, Window: time.Minute + time.Microsecond, Algorithm: tb}}, "limits[0].window"},
		{1, []ratelimiting.Limit{{Limit: 5, Window: time.Second, Algorithm: tb}, {Limit: 6, Window: time.Second, Algorithm: tb}}, "limits[1].limit"},
	} {
		_, err := in.Allow(context.Background(), "ns", "k", c.cost, c.l...)
		var ie *ratelimiting.InputError
		if !errors.As(err, &ie) || ie.Field != c.field || !errors.Is(err, ratelimiting.ErrInvalidInput) {
			t.Errorf("%+v: %v, want an InputError on %s", c.l, err, c.field)
		}
	}
	// Penalty counts denied requests: a bucket cannot.
	_, err := in.Check(context.Background(), ratelimiting.Request{Namespace: "ns", Key: "k", Cost: 1, Penalty: true, Limits: []ratelimiting.Limit{{Limit: 1, Window: time.Second, Algorithm: tb}}})
	if !errors.Is(err, ratelimiting.ErrInvalidInput) || !strings.Contains(err.Error(), "penalty") {
		t.Fatalf("penalty with a bucket: %v", err)
	}
}

// Four nodes, 32 callers each, deciding a bucket of 100 in the store: not
// one admission over the capacity.
func TestSynchronousBucketIsExactAcrossNodes(t *testing.T) {
	store := memory.New()
	clk := newClock(t0)
	var nodes []*ratelimiting.Instance
	for range 4 {
		in := newInstance(t, clk)
		mustNew(t, in, synced("ns", 0, store, time.Minute))
		nodes = append(nodes, in)
	}
	l := ratelimiting.Limit{Limit: 1, Window: time.Hour, Algorithm: ratelimiting.TokenBucket, Burst: 100}
	var passed atomic.Int64
	var wg sync.WaitGroup
	for _, in := range nodes {
		for range 32 {
			wg.Go(func() {
				for range 5 {
					if d, err := in.Allow(context.Background(), "ns", "hot", 1, l); err == nil && d.Allowed {
						passed.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	if passed.Load() != 100 {
		t.Fatalf("%d passed across 4 nodes, want exactly 100", passed.Load())
	}
}

// Periodic buckets keep their debt: two nodes that each spend a full bucket
// between syncs leave it in debt, and it denies (a peek too) until the debt
// has drained.
func TestPeriodicBucketKeepsDebt(t *testing.T) {
	store := memory.New()
	clk := newClock(t0)
	a, b := newInstance(t, clk), newInstance(t, clk)
	for _, in := range []*ratelimiting.Instance{a, b} {
		mustNew(t, in, synced("ns", time.Hour, store, time.Minute))
	}
	l := ratelimiting.Limit{Limit: 10, Window: time.Second, Algorithm: ratelimiting.TokenBucket}
	for i, in := range []*ratelimiting.Instance{a, b} {
		if d := allow(t, in, "ns", "k", 10, l); !d.Allowed {
			t.Fatalf("node %d: a full bucket denied 10: %+v", i, d)
		}
	}
	for _, in := range []*ratelimiting.Instance{a, b} {
		if err := in.Sync(context.Background(), "ns"); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Sync(context.Background(), "ns"); err != nil { // a reads b's push too
		t.Fatal(err)
	}
	// 20 taken from a bucket of 10: 10 in debt, 1 s to drain it, 100 ms more per token.
	for _, in := range []*ratelimiting.Instance{a, b} {
		d := allow(t, in, "ns", "k", 0, l)
		if d.Allowed || d.Limits[0].Rate != 20 || d.RetryAfter != time.Second {
			t.Fatalf("bucket in debt: %+v, want a peek denied, level 20, retry after 1s", d)
		}
	}
	clk.Advance(1100 * time.Millisecond)
	if d := allow(t, a, "ns", "k", 1, l); !d.Allowed {
		t.Fatalf("after the debt drained: %+v", d)
	}
	if d := allow(t, a, "ns", "k", 1, l); d.Allowed {
		t.Fatalf("one token only: %+v", d)
	}
}

// A periodic push of bucket diffs whose reply is lost is retried with the
// same identity: the store counts the cost once, and the node's view keeps
// it meanwhile.
func TestPeriodicBucketPushLostReplyCountsOnce(t *testing.T) {
	inner := memory.New()
	store := strategytest.NewFaulty(inner)
	clk := newClock(t0)
	in := newInstance(t, clk)
	mustNew(t, in, synced("ns", time.Hour, store, time.Minute))
	l := ratelimiting.Limit{Limit: 1, Window: time.Hour, Algorithm: ratelimiting.TokenBucket, Burst: 10}
	if d := allow(t, in, "ns", "k", 4, l); !d.Allowed {
		t.Fatal(d)
	}
	store.LoseReplies(1)
	if err := in.Sync(context.Background(), "ns"); err == nil {
		t.Fatal("Sync with a lost reply: no error")
	}
	if d := allow(t, in, "ns", "k", 0, l); d.Limits[0].Remaining != 6 {
		t.Fatalf("view after a lost reply: %+v, want 6 tokens", d.Limits[0])
	}
	if err := in.Sync(context.Background(), "ns"); err != nil {
		t.Fatal(err)
	}
	got, err := inner.GetBuckets(context.Background(), "ns", []strategy.BucketRef{{Key: "k", Kind: uint8(ratelimiting.TokenBucket), Window: time.Hour}})
	if err != nil || len(got) != 1 || got[0].Level != 4*3_600_000 {
		t.Fatalf("store after the retry: %+v, %v; want level %d (counted once)", got, err, 4*3_600_000)
	}
	if d := allow(t, in, "ns", "k", 0, l); d.Limits[0].Remaining != 6 {
		t.Fatalf("view after the retry: %+v, want 6 tokens", d.Limits[0])
	}
}
