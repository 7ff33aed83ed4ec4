package shm

import (
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func always() bool { return true }

// A bucket table made for a namespace, then removed: a straggler's bucket
// made or dropped after the removal does not change the dict's total, and a
// table asked for once the namespace is going away is not registered.
func TestRemovedBucketTablesLeaveNoEntries(t *testing.T) {
	d, err := NewDict("test", 10)
	if err != nil {
		t.Fatal(err)
	}
	tb := d.Buckets("ns", 4, time.Second, true, t0, always)
	b := tb.Get("k", 1, t0)
	w, _, _ := tb.Level(b, t0)
	tb.Take(b, "k", w, 1, t0)
	d.RemoveNamespace("ns")
	if n := d.Stats().Entries; n != 0 {
		t.Fatalf("after RemoveNamespace: %d entries, want 0", n)
	}
	tb.Get("k2", 1, t0) // a call that raced the removal
	tb.Refund("k", 1)
	tb.Expire(t0 + int64(time.Hour/time.Millisecond))
	if n := d.Stats().Entries; n != 0 {
		t.Fatalf("after a straggler: %d entries, want 0", n)
	}
	late := d.Buckets("ns", 4, time.Second, true, t0, func() bool { return false })
	late.Get("k", 1, t0)
	if n, tabs := d.Stats().Entries, len(d.BucketTables("ns")); n != 0 || tabs != 0 {
		t.Fatalf("a table asked for by a namespace going away: %d entries, %d tables registered; want 0, 0", n, tabs)
	}
}

// A rate change between a take and its refund carries the level to a new
// bucket: the refund goes there.
func TestRefundFollowsAReplacedBucket(t *testing.T) {
	for _, local := range []bool{true, false} {
		d, _ := NewDict("test", 10)
		tb := d.Buckets("ns", 4, time.Second, local, t0, always)
		b := tb.Get("k", 10, t0)
		w, _, _ := tb.Level(b, t0)
		if _, ok := tb.Take(b, "k", w, 1, t0); !ok {
			t.Fatal("take")
		}
		nb := tb.Get("k", 20, t0)
		tb.Refund("k", 1)
		if _, lvl, _ := tb.Level(nb, t0); lvl != 0 {
			t.Fatalf("local %v: level after take, replace and refund = %v, want 0", local, lvl)
		}
		if c, _, _ := tb.pendingOf("k"); c != 0 {
			t.Fatalf("local %v: pending %v after the refund, want 0", local, c)
		}
	}
}

// A replace racing the removal of its table leaves the dict's total at 0.
func TestReplaceRacingRemovalKeepsTheCount(t *testing.T) {
	for range 500 {
		d, _ := NewDict("test", 1000)
		tb := d.Buckets("ns", 4, time.Second, true, t0, always)
		b := tb.Get("k", 1, t0)
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Go(func() { <-start; tb.replace("k", b, 2, t0) })
		wg.Go(func() { <-start; d.RemoveNamespace("ns") })
		close(start)
		wg.Wait()
		if n := d.Stats().Entries; n != 0 {
			t.Fatalf("%d entries after a replace raced the removal, want 0", n)
		}
	}
}

// Takes at two rates (replaces back and forth), refunds, installs and the
// syncer's takes of pending cost, at one instant: the syncer takes every
// cost kept, and a refunded one at most (a refund after the syncer took the
// cost leaves it counted), and the level shows what the store would hold.
func TestBucketCostIsConserved(t *testing.T) {
	d, _ := NewDict("test", 1<<20)
	tb := d.Buckets("ns", 4, time.Second, false, t0, always)
	var kept, refunded atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			rate := float64(1 + g%2)
			for i := range 5000 {
				for {
					b := tb.Get("k", rate, t0)
					w, _, alive := tb.Level(b, t0)
					if !alive {
						continue
					}
					if _, ok := tb.Take(b, "k", w, 1, t0); ok {
						break
					}
				}
				if i%5 == 0 {
					tb.Refund("k", 1)
					refunded.Add(1)
				} else {
					kept.Add(1)
				}
			}
		})
	}
	var taken float64
	stop := make(chan struct{})
	var sw sync.WaitGroup
	sw.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			tb.TakePending("", func(_ string, _ int64, cost, _ float64) { taken += cost })
			// The store's view is what was taken: install it plus pending.
			tb.Install("k", t0, func(cost float64, _ int64, _ float64) float64 { return (taken + cost) * 1000 })
		}
	})
	wg.Wait()
	close(stop)
	sw.Wait()
	tb.TakePending("", func(_ string, _ int64, cost, _ float64) { taken += cost })
	if taken < float64(kept.Load()) || taken > float64(kept.Load()+refunded.Load()) {
		t.Fatalf("the syncer took %v, the takes kept %d and refunded %d", taken, kept.Load(), refunded.Load())
	}
	tb.Install("k", t0, func(cost float64, _ int64, _ float64) float64 { return (taken + cost) * 1000 })
	b := tb.Get("k", 1, t0)
	if _, lvl, _ := tb.Level(b, t0); math.Abs(lvl-taken*1000) > 0 {
		t.Fatalf("level %v, want %v", lvl, taken*1000)
	}
	if n := d.Stats().Entries; n != 1 {
		t.Fatalf("%d entries, want 1", n)
	}
}
