package strategytest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/arith"
	"github.com/ratesync/ratesync/strategy"
)

// Bucket kinds the suite uses; stores only keep them apart.
const (
	kindToken uint8 = 4
	kindLeaky uint8 = 5
)

func bucketStore(t *testing.T, s strategy.Strategy) (strategy.BucketStore, strategy.Checker) {
	t.Helper()
	bs, ok := s.(strategy.BucketStore)
	if !ok {
		t.Skip("strategy does not implement strategy.BucketStore")
	}
	ck, _ := s.(strategy.Checker)
	return bs, ck
}

func getBuckets(t *testing.T, bs strategy.BucketStore, ns string, refs ...strategy.BucketRef) map[strategy.BucketRef]strategy.BucketState {
	t.Helper()
	got, err := bs.GetBuckets(context.Background(), ns, refs)
	if err != nil {
		t.Fatalf("GetBuckets: %v", err)
	}
	out := make(map[strategy.BucketRef]strategy.BucketState, len(got))
	for _, b := range got {
		out[strategy.BucketRef{Key: b.Key, Kind: b.Kind, Window: b.Window}] = b
	}
	return out
}

func checkOne(t *testing.T, ck strategy.Checker, node string, seq uint64, c strategy.Check) strategy.CheckResult {
	t.Helper()
	res, err := ck.CheckAndCount(context.Background(), node, seq, []strategy.Check{c})
	if err != nil {
		t.Fatalf("CheckAndCount: %v", err)
	}
	if len(res) != 1 {
		t.Fatalf("CheckAndCount: %d results for 1 check", len(res))
	}
	return res[0]
}

var bucketCases = []suiteCase{
	{"a window check that fits exactly passes", func(t *testing.T, s strategy.Strategy) {
		ck, ok := s.(strategy.Checker)
		if !ok {
			t.Skip("strategy does not implement strategy.Checker")
		}
		// limit 25 per second, previous 25, current 10, 440 ms in: 10 + 25*0.56 + 1 = 25;
		// limit 7.25 per minute, previous 6.25, current 2.75, 26.4 s in: 2.75 + 6.25*0.56 + 1 = 7.25.
		for i, c := range []struct {
			size            time.Duration
			limit, prev, cu float64
			in              time.Duration
		}{
			{time.Second, 25, 25, 10, 440 * time.Millisecond},
			{time.Minute, 7.25, 6.25, 2.75, 26400 * time.Millisecond},
		} {
			ns := fmt.Sprintf("exact%d", i)
			start := arith.WindowStart(Base, c.size).Add(10 * c.size)
			push(t, s, strategy.Batch{Node: "seed" + ns, Seq: 1, Diffs: []strategy.Diff{
				diff(ns, "k", start.Add(-c.size), c.size, c.prev), diff(ns, "k", start, c.size, c.cu),
			}})
			// 1 ms earlier the previous window weighs more: the same request
			// is over the limit, and counts nothing.
			chk := strategy.Check{Namespace: ns, Key: "k", Cost: 1, Now: start.Add(c.in - time.Millisecond), Limits: []strategy.CheckLimit{{WindowSize: c.size, Limit: c.limit}}}
			if r := checkOne(t, ck, "n"+ns, 1, chk); r.Allowed {
				t.Errorf("case %d: a request 1 ms before it fits passed: %+v", i, r)
			}
			chk.Now = start.Add(c.in)
			if r := checkOne(t, ck, "n"+ns, 2, chk); !r.Allowed {
				t.Errorf("case %d: a request that fits exactly was denied: %+v", i, r)
			}
		}
	}},
	{"bucket checks decide exactly", func(t *testing.T, s strategy.Strategy) {
		_, ck := bucketStore(t, s)
		if ck == nil {
			t.Skip("strategy does not implement strategy.Checker")
		}
		// 3 per second, burst 3: three pass, the fourth waits ceil(1000/3) = 334 ms.
		t0 := Base.Add(time.Hour)
		lim := []strategy.CheckLimit{{Kind: kindToken, WindowSize: time.Second, Limit: 3, Burst: 3}}
		chk := func(at time.Time, cost float64) strategy.Check {
			return strategy.Check{Namespace: "ns", Key: "b", Cost: cost, Now: at, Limits: lim}
		}
		seq := uint64(0)
		next := func(at time.Time, cost float64) strategy.CheckResult {
			seq++
			return checkOne(t, ck, "n", seq, chk(at, cost))
		}
		for i := range 3 {
			if r := next(t0, 1); !r.Allowed {
				t.Fatalf("hit %d of a full bucket denied: %+v", i, r)
			}
		}
		r := next(t0, 1)
		if r.Allowed {
			t.Fatal("fourth hit of a bucket of 3 passed")
		}
		if len(r.Buckets) != 1 || r.Buckets[0].Level != 3000 || r.Buckets[0].At != t0.UnixMilli() || r.Buckets[0].Key != "b" || r.Buckets[0].Kind != kindToken || r.Buckets[0].Window != time.Second {
			t.Fatalf("bucket after 3 hits: %+v, want level 3000 at %d", r.Buckets, t0.UnixMilli())
		}
		if r := next(t0.Add(333*time.Millisecond), 1); r.Allowed {
			t.Fatal("hit at +333 ms passed; the bucket holds 1 token only at +334 ms")
		}
		if r := next(t0.Add(334*time.Millisecond), 1); !r.Allowed || r.Buckets[0].Level != 3000-334*3+1000 {
			t.Fatalf("hit at +334 ms: %+v, want allowed, level %d", r, 3000-334*3+1000)
		}
		// A clock behind the bucket drains nothing and a peek counts nothing.
		if r := next(t0, 0); !r.Allowed || r.Buckets[0].Level != 2998 || r.Buckets[0].At != t0.Add(334*time.Millisecond).UnixMilli() {
			t.Fatalf("peek with an earlier clock: %+v", r)
		}
	}},
	{"bucket and window limits decide together", func(t *testing.T, s strategy.Strategy) {
		bs, ck := bucketStore(t, s)
		if ck == nil {
			t.Skip("strategy does not implement strategy.Checker")
		}
		now := Base.Add(2 * time.Hour)
		ref := strategy.BucketRef{Key: "k", Kind: kindLeaky, Window: time.Minute}
		lim := []strategy.CheckLimit{
			{WindowSize: time.Minute, Limit: 2, Fixed: true},
			{Kind: kindLeaky, WindowSize: time.Minute, Limit: 1, Burst: 5},
			{Kind: kindLeaky, WindowSize: time.Minute, Limit: 1, Burst: 5}, // the same bucket: counted once
		}
		c := strategy.Check{Namespace: "ns", Key: "k", Cost: 1, Now: now, Limits: lim}
		for i, want := range []bool{true, true, false} {
			r := checkOne(t, ck, "n", uint64(i+1), c)
			if r.Allowed != want {
				t.Fatalf("check %d: allowed %v, want %v", i, r.Allowed, want)
			}
		}
		if b := getBuckets(t, bs, "ns", ref)[ref]; b.Level != 2*60000 {
			t.Fatalf("bucket level %v after two passes and a window denial, want %d (counted once per pass)", b.Level, 2*60000)
		}
		// The bucket denies: the window is not counted.
		c.Key, c.Cost = "k2", 6
		c.Limits = []strategy.CheckLimit{{WindowSize: time.Minute, Limit: 10, Fixed: true}, lim[1]}
		if r := checkOne(t, ck, "n", 4, c); r.Allowed {
			t.Fatal("cost 6 passed a bucket of 5")
		}
		if got := window(t, s, "ns", "k2", arith.WindowStart(now, time.Minute), time.Minute); got != 0 {
			t.Fatalf("window counted %v for a request the bucket denied", got)
		}
	}},
	{"bucket diffs keep debt and their date", func(t *testing.T, s strategy.Strategy) {
		bs, _ := bucketStore(t, s)
		t0 := Base.Add(3 * time.Hour).UnixMilli()
		ref := strategy.BucketRef{Key: "d", Kind: kindToken, Window: time.Second}
		bd := func(at int64, cost float64) strategy.BucketDiff {
			return strategy.BucketDiff{Namespace: "ns", Key: "d", Kind: kindToken, Window: time.Second, At: at, Cost: cost, Rate: 1}
		}
		push(t, s, strategy.Batch{Node: "a", Seq: 1, Buckets: []strategy.BucketDiff{bd(t0, 5)}})
		push(t, s, strategy.Batch{Node: "b", Seq: 1, Buckets: []strategy.BucketDiff{bd(t0-500, 1)}}) // dated before: applied at t0
		if b := getBuckets(t, bs, "ns", ref)[ref]; b.Level != 6000 || b.At != t0 {
			t.Fatalf("bucket %+v, want level 6000 at %d (no clamp at any capacity; a late diff applied at the last update)", b, t0)
		}
		push(t, s, strategy.Batch{Node: "a", Seq: 2, Buckets: []strategy.BucketDiff{bd(t0+2000, 1)}})
		push(t, s, strategy.Batch{Node: "a", Seq: 2, Buckets: []strategy.BucketDiff{bd(t0+2000, 1)}}) // a retry: applied once
		push(t, s, strategy.Batch{Node: "a", Seq: 1, Buckets: []strategy.BucketDiff{bd(t0+2000, 1)}}) // an older seq: ignored
		if b := getBuckets(t, bs, "ns", ref)[ref]; b.Level != 6000-2000+1000 || b.At != t0+2000 {
			t.Fatalf("bucket %+v, want level 5000 at %d, applied once", b, t0+2000)
		}
		// A bucket long drained starts from empty.
		push(t, s, strategy.Batch{Node: "a", Seq: 3, Buckets: []strategy.BucketDiff{bd(t0+3_600_000, 2)}})
		if b := getBuckets(t, bs, "ns", ref)[ref]; b.Level != 2000 || b.At != t0+3_600_000 {
			t.Fatalf("bucket %+v, want level 2000", b)
		}
		if err := s.Purge(context.Background(), "ns", []time.Duration{time.Second}, time.UnixMilli(t0+3_600_500)); err != nil {
			t.Fatalf("Purge: %v", err)
		}
		if b := getBuckets(t, bs, "ns", ref)[ref]; b.Level != 2000 {
			t.Fatalf("purge dropped a bucket that still holds a level: %+v", b)
		}
	}},
	{"negative bucket diffs give tokens back, never above capacity", func(t *testing.T, s strategy.Strategy) {
		bs, ck := bucketStore(t, s)
		t0 := Base.Add(5 * time.Hour).UnixMilli()
		ref := strategy.BucketRef{Key: "g", Kind: kindToken, Window: time.Second}
		bd := func(at int64, cost float64) strategy.BucketDiff {
			return strategy.BucketDiff{Namespace: "ns", Key: "g", Kind: kindToken, Window: time.Second, At: at, Cost: cost, Rate: 1}
		}
		level := func(now int64) float64 {
			b := getBuckets(t, bs, "ns", ref)[ref]
			return arith.Level(b.Level, b.At, 1, now)
		}
		push(t, s, strategy.Batch{Node: "g", Seq: 1, Buckets: []strategy.BucketDiff{bd(t0, 5)}})
		push(t, s, strategy.Batch{Node: "g", Seq: 2, Buckets: []strategy.BucketDiff{bd(t0, -2)}})
		if got := level(t0); got != 3000 {
			t.Fatalf("level %v after 5 taken and 2 given back, want 3000", got)
		}
		push(t, s, strategy.Batch{Node: "g", Seq: 3, Buckets: []strategy.BucketDiff{bd(t0+100, -10)}})
		if got := level(t0 + 100); got != 0 {
			t.Fatalf("level %v after more given back than taken, want 0 (full, never above)", got)
		}
		if ck == nil {
			return
		}
		c := strategy.Check{Namespace: "ns", Key: "g", Cost: 10, Now: time.UnixMilli(t0 + 100),
			Limits: []strategy.CheckLimit{{WindowSize: time.Second, Limit: 1, Kind: kindToken, Burst: 10}}}
		if r := checkOne(t, ck, "g2", 1, c); !r.Allowed {
			t.Fatalf("a full bucket of 10 refused 10: %+v", r)
		}
		c.Cost = 1
		if r := checkOne(t, ck, "g2", 2, c); r.Allowed {
			t.Fatalf("a bucket of capacity 10 admitted 11 at one instant: tokens given back went above capacity")
		}
	}},
	{"buckets are isolated and keys byte-exact", func(t *testing.T, s strategy.Strategy) {
		bs, _ := bucketStore(t, s)
		at := Base.Add(4 * time.Hour).UnixMilli()
		var diffs []strategy.BucketDiff
		var refs []strategy.BucketRef
		for i, k := range Keys {
			for j, kind := range []uint8{kindToken, kindLeaky} {
				for n, w := range []time.Duration{time.Second, time.Minute} {
					diffs = append(diffs, strategy.BucketDiff{Namespace: "iso", Key: k, Kind: kind, Window: w, At: at, Cost: float64(1 + i*4 + j*2 + n), Rate: 1})
					refs = append(refs, strategy.BucketRef{Key: k, Kind: kind, Window: w})
				}
			}
		}
		push(t, s, strategy.Batch{Node: "n", Seq: 1, Buckets: diffs})
		push(t, s, strategy.Batch{Node: "n", Seq: 2, Buckets: []strategy.BucketDiff{{Namespace: "other", Key: "k", Kind: kindToken, Window: time.Second, At: at, Cost: 99, Rate: 1}}})
		got := getBuckets(t, bs, "iso", append(refs, strategy.BucketRef{Key: "absent", Kind: kindToken, Window: time.Second})...)
		if len(got) != len(refs) {
			t.Fatalf("%d buckets, want %d (absent ones left out)", len(got), len(refs))
		}
		for _, d := range diffs {
			ref := strategy.BucketRef{Key: d.Key, Kind: d.Kind, Window: d.Window}
			if b := got[ref]; b.Level != d.Cost*float64(d.Window.Milliseconds()) || b.At != at {
				t.Errorf("bucket %q kind %d window %v: %+v, want level %v", d.Key, d.Kind, d.Window, b, d.Cost*float64(d.Window.Milliseconds()))
			}
		}
	}},
	{"bucket checks at most once per node and seq", func(t *testing.T, s strategy.Strategy) {
		bs, ck := bucketStore(t, s)
		if ck == nil {
			t.Skip("strategy does not implement strategy.Checker")
		}
		now := Base.Add(5 * time.Hour)
		ref := strategy.BucketRef{Key: "once", Kind: kindToken, Window: time.Minute}
		c := strategy.Check{Namespace: "ns", Key: "once", Cost: 2, Now: now, Limits: []strategy.CheckLimit{{Kind: kindToken, WindowSize: time.Minute, Limit: 10, Burst: 10}}}
		if r := checkOne(t, ck, "n", 7, c); !r.Allowed {
			t.Fatal("first check denied")
		}
		if r := checkOne(t, ck, "n", 7, c); !r.Allowed || r.Buckets[0].Level != 120000 {
			t.Fatalf("replayed (node, seq): %+v, want allowed as decided then, level 120000", r)
		}
		if b := getBuckets(t, bs, "ns", ref)[ref]; b.Level != 120000 {
			t.Fatalf("level %v, want 120000: the replay counted", b.Level)
		}
	}},
	{"concurrent bucket checks never exceed the burst", func(t *testing.T, s strategy.Strategy) {
		_, ck := bucketStore(t, s)
		if ck == nil {
			t.Skip("strategy does not implement strategy.Checker")
		}
		const nodes, perNode, burst = 8, 30, 100
		c := strategy.Check{Namespace: "ns", Key: "hot", Cost: 1, Now: Base.Add(6 * time.Hour), Limits: []strategy.CheckLimit{{Kind: kindToken, WindowSize: time.Hour, Limit: 1, Burst: burst}}}
		passed := racePasses(t, ck, nodes, perNode, c)
		if passed != burst {
			t.Fatalf("%d checks passed, want exactly %d", passed, burst)
		}
	}},
}
