package ratelimiting_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/memory"
)

// One node, a frozen clock, syncs in a loop while 8 goroutines take from a
// bucket: a sync's read-back never erases a cost taken meanwhile, so the
// node admits exactly the capacity, and the store holds every admission.
func TestSyncsRacingDecisionsNeverOverAdmit(t *testing.T) {
	for round := range 5 {
		clk := newClock(t0)
		in := newInstance(t, clk)
		store := memory.New()
		mustNew(t, in, synced("ns", time.Hour, store, time.Minute))
		const capacity = 2000
		l := ratelimiting.Limit{Limit: capacity, Window: time.Hour, Algorithm: ratelimiting.TokenBucket}
		var admitted atomic.Int64
		stop := make(chan struct{})
		var syncs sync.WaitGroup
		syncs.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					_ = in.Sync(context.Background(), "ns")
				}
			}
		})
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 1000 {
					if st, err := in.AllowOne(context.Background(), "ns", "k", 1, l); err == nil && st.Allowed {
						admitted.Add(1)
					}
				}
			})
		}
		wg.Wait()
		close(stop)
		syncs.Wait()
		if err := in.Sync(context.Background(), "ns"); err != nil {
			t.Fatal(err)
		}
		got, _ := store.GetBuckets(context.Background(), "ns", []strategy.BucketRef{{Key: "k", Kind: uint8(ratelimiting.TokenBucket), Window: time.Hour}})
		if n := admitted.Load(); n != capacity || len(got) != 1 || got[0].Level != float64(n)*3_600_000 {
			t.Fatalf("round %d: admitted %d of a capacity of %d; store %+v", round, n, capacity, got)
		}
	}
}

// Decisions racing Remove leave nothing counted in a shared dict.
func TestDecisionsRacingRemoveLeaveNoEntries(t *testing.T) {
	in := newInstance(t, newClock(t0))
	cfg := func(name string) namespace.Config {
		c := local(name, time.Hour)
		c.Dict = "shared"
		return c
	}
	mustNew(t, in, cfg("keeper"))
	limits := []ratelimiting.Limit{
		{Limit: 1e9, Window: time.Hour, Algorithm: ratelimiting.TokenBucket},
		{Limit: 1e9, Window: time.Minute, Algorithm: ratelimiting.LeakyBucket},
	}
	for range 100 {
		mustNew(t, in, cfg("a"))
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for j := range 50 {
					if _, err := in.Allow(context.Background(), "a", fmt.Sprint("k", j%3), 1, limits...); err != nil {
						return
					}
				}
			})
		}
		time.Sleep(20 * time.Microsecond)
		if err := in.Remove(context.Background(), "a"); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
	}
	if n := in.Stats()[0].Dict.Entries; n != 0 {
		t.Fatalf("%d entries in a dict whose namespaces hold nothing", n)
	}
}

// AllowOne racing Remove in a dict kept full by another namespace answers
// ErrClosed or a decision; nothing panics.
func TestAllowOneRacingRemoveInAFullDict(t *testing.T) {
	in := newInstance(t, newClock(t0))
	cfg := func(name string) namespace.Config {
		c := local(name, time.Hour)
		c.Dict, c.DictCapacity = "shared", 64
		return c
	}
	mustNew(t, in, cfg("filler"))
	var stop atomic.Bool
	var fill sync.WaitGroup
	for g := range 2 {
		fill.Go(func() {
			for i := 0; !stop.Load(); i++ {
				_, _ = in.Increment(context.Background(), "filler", fmt.Sprint(g, "-", i), time.Hour, 1)
			}
		})
	}
	defer func() { stop.Store(true); fill.Wait() }()
	tb := ratelimiting.Limit{Limit: 1e9, Window: time.Hour, Algorithm: ratelimiting.TokenBucket}
	for range 200 {
		mustNew(t, in, cfg("a"))
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for range 50 {
					_, err := in.AllowOne(context.Background(), "a", "k", 1, tb)
					if err != nil && !errors.Is(err, ratelimiting.ErrClosed) && !errors.Is(err, ratelimiting.ErrNamespaceNotFound) {
						t.Error(err)
					}
					if err != nil {
						return
					}
				}
			})
		}
		time.Sleep(20 * time.Microsecond)
		_ = in.Remove(context.Background(), "a")
		wg.Wait()
	}
}

// Extreme buckets answer: one that cannot refill from empty within
// MaxWindowSize is refused, naming burst; one just within it gives a
// positive Reset and RetryAfter of the right size.
func TestExtremeBucketsAnswer(t *testing.T) {
	clk := newClock(t0)
	in := newInstance(t, clk)
	mustNew(t, in, local("ns", time.Minute))
	for _, l := range []ratelimiting.Limit{
		{Limit: 1e-9, Burst: 1e7, Window: time.Second, Algorithm: ratelimiting.TokenBucket},
		{Limit: 1, Burst: 1e7, Window: namespace.MaxWindowSize, Algorithm: ratelimiting.LeakyBucket},
	} {
		_, err := in.AllowOne(context.Background(), "ns", "k", 1, l)
		var ie *ratelimiting.InputError
		if !errors.As(err, &ie) || ie.Field != "limits[0].burst" {
			t.Fatalf("%+v: %v, want an InputError on limits[0].burst", l, err)
		}
	}
	l := ratelimiting.Limit{Limit: 1, Burst: 36000, Window: 24 * time.Hour, Algorithm: ratelimiting.TokenBucket} // 864,000 h to fill
	st, err := in.AllowOne(context.Background(), "ns", "k", 36000, l)
	if err != nil || !st.Allowed || st.Reset != 864000*time.Hour {
		t.Fatalf("a bucket emptied at once: %+v, %v; want allowed, reset 864000h", st, err)
	}
	if st, _ = in.AllowOne(context.Background(), "ns", "k", 36000, l); st.Allowed || st.RetryAfter != 864000*time.Hour {
		t.Fatalf("the same again: %+v; want denied, retry after 864000h", st)
	}
}

// A clock stepped back after a bucket's first hit: the denial and its
// limit agree, and RetryAfter is when the request passes.
func TestBucketClockSteppedBack(t *testing.T) {
	clk := newClock(t0)
	in := newInstance(t, clk)
	mustNew(t, in, local("ns", time.Minute))
	l := ratelimiting.Limit{Limit: 10, Window: time.Second, Algorithm: ratelimiting.TokenBucket}
	allow(t, in, "ns", "k", 8, l)
	clk.Advance(-500 * time.Millisecond)
	d := allow(t, in, "ns", "k", 5, l)
	if d.Allowed || d.Limits[0].Allowed || d.RetryAfter != d.Limits[0].RetryAfter || d.RetryAfter <= 0 {
		t.Fatalf("denied after the clock went back: %+v", d)
	}
	clk.Advance(d.RetryAfter - time.Millisecond)
	if d2 := allow(t, in, "ns", "k", 0, ratelimiting.Limit{Limit: 10, Window: time.Second, Algorithm: ratelimiting.TokenBucket}); d2.Limits[0].Remaining >= 5 {
		t.Fatalf("1 ms before RetryAfter: %+v, want fewer than 5 tokens", d2)
	}
	clk.Advance(time.Millisecond)
	if d3 := allow(t, in, "ns", "k", 5, l); !d3.Allowed {
		t.Fatalf("at RetryAfter: %+v", d3)
	}
}

// noBuckets decides checks but keeps no buckets.
type noBuckets struct {
	strategy.Strategy
	strategy.Checker
}

// A namespace moved to a store that keeps no buckets, holding buckets from
// before: its syncs do not fail for them, and the store stays up.
func TestUpdateToAStoreWithoutBuckets(t *testing.T) {
	in := newInstance(t, newClock(t0))
	mem := memory.New()
	mustNew(t, in, synced("ns", namespace.Synchronous, mem, time.Minute))
	l := ratelimiting.Limit{Limit: 10, Window: time.Hour, Algorithm: ratelimiting.TokenBucket}
	if _, err := in.AllowOne(context.Background(), "ns", "k", 1, l); err != nil {
		t.Fatal(err)
	}
	if err := in.Update(synced("ns", namespace.Synchronous, noBuckets{mem, mem}, time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := in.Sync(context.Background(), "ns"); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if st := in.Stats()[0].Sync; !st.StoreUp {
		t.Fatalf("store marked down for buckets held from before: %v", st.LastError)
	}
	if _, err := in.AllowOne(context.Background(), "ns", "k", 1, l); !errors.Is(err, ratelimiting.ErrInvalidInput) {
		t.Fatalf("a bucket on a store that keeps none: %v, want ErrInvalidInput", err)
	}
}
