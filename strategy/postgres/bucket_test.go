package postgres_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/arith"
	"github.com/ratesync/ratesync/internal/strategytest"
	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/postgres"
)

func bucketDiff(ns, key string, kind uint8, window time.Duration, at int64, cost, rate float64) strategy.BucketDiff {
	return strategy.BucketDiff{Namespace: ns, Key: key, Kind: kind, Window: window, At: at, Cost: cost, Rate: rate}
}

// bucketsOf returns the buckets of refs in ns as s holds them, printed.
func bucketsOf(t *testing.T, s strategy.BucketStore, ns string, refs []strategy.BucketRef) string {
	t.Helper()
	got, err := s.GetBuckets(context.Background(), ns, refs)
	if err != nil {
		t.Fatalf("GetBuckets: %v", err)
	}
	return fmt.Sprint(got)
}

// Differential test of the bucket arithmetic: random pushes (several diffs
// of a bucket in one batch, diffs dated before a bucket's last change,
// fractional costs and rates, keys with NUL and invalid UTF-8) and random
// checks mixing bucket and window limits (a bucket named twice by one
// check, peeks of cost 0, Nows behind a bucket's date), with replays: the
// results and every bucket must equal the memory store's, bit for bit.
func TestBucketsAgreeWithTheMemoryStore(t *testing.T) {
	s, _ := newStore(t, postgres.Config{})
	ref := newMemory()
	ctx := context.Background()
	keys := []string{"a", "b", "nul\x00", "\xff", ""}
	kinds := []uint8{1, 4}
	windows := []time.Duration{time.Second, time.Minute}
	rates := []float64{1, 3, 0.7, 25}
	base := strategytest.Base.Add(7*time.Hour + 250*time.Millisecond)
	rng := newRand(11)
	at := func() time.Time { return base.Add(time.Duration(rng.IntN(4000)) * time.Millisecond) }
	var refs []strategy.BucketRef
	for _, k := range keys {
		for _, kind := range kinds {
			for _, w := range windows {
				refs = append(refs, strategy.BucketRef{Key: k, Kind: kind, Window: w})
			}
		}
	}
	for seq := uint64(1); seq <= 120; seq++ {
		if seq%3 == 1 {
			var b strategy.Batch
			b.Node, b.Seq = "pusher", seq
			for range 1 + rng.IntN(8) {
				r := refs[rng.IntN(len(refs))]
				b.Buckets = append(b.Buckets, bucketDiff("x", r.Key, r.Kind, r.Window, at().UnixMilli(), float64(1+rng.IntN(4))/2, rates[rng.IntN(len(rates))]))
				if rng.IntN(3) == 0 {
					b.Diffs = append(b.Diffs, diff("x", r.Key, arith.WindowStart(base, time.Minute), time.Minute, 1))
				}
			}
			got, err := s.PushAndCount(ctx, b)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := ref.PushAndCount(ctx, b)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("push %d: totals %v, want %v", seq, got, want)
			}
		}
		var checks []strategy.Check
		for range 1 + rng.IntN(6) {
			c := strategy.Check{Namespace: "x", Key: keys[rng.IntN(len(keys))], Cost: float64(rng.IntN(4)), Now: at()}
			for range rng.IntN(4) {
				l := strategy.CheckLimit{WindowSize: windows[rng.IntN(len(windows))], Limit: rates[rng.IntN(len(rates))] * 2}
				if rng.IntN(3) > 0 {
					l.Kind, l.Burst = kinds[rng.IntN(len(kinds))], float64(1+rng.IntN(12))
				} else {
					l.Fixed = rng.IntN(2) == 0
				}
				c.Limits = append(c.Limits, l)
			}
			if n := len(c.Limits); n > 0 && rng.IntN(5) == 0 {
				c.Limits = append(c.Limits, c.Limits[n-1]) // a limit named twice
			}
			checks = append(checks, c)
		}
		for range 1 + btoi(seq%7 == 0) { // then a replay
			got, err := s.CheckAndCount(ctx, "checker", seq, checks)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := ref.CheckAndCount(ctx, "checker", seq, checks)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("checks %d %+v:\n got %v\nwant %v", seq, checks, got, want)
			}
		}
		if got, want := bucketsOf(t, s, "x", refs), bucketsOf(t, ref, "x", refs); got != want {
			t.Fatalf("after batch %d:\n got %v\nwant %v", seq, got, want)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Several diffs of one bucket in one batch apply one after the other, in
// the batch's order, whatever the other buckets between them; a retry of
// the batch applies none of them again.
func TestSeveralDiffsOfOneBucketInOneBatch(t *testing.T) {
	s, _ := newStore(t, postgres.Config{})
	ref := newMemory()
	ctx := context.Background()
	t0 := strategytest.Base.Add(time.Hour).UnixMilli()
	a := func(at int64, cost float64) strategy.BucketDiff {
		return bucketDiff("ns", "a", 1, time.Second, at, cost, 1)
	}
	b := strategy.Batch{Node: "n", Seq: 1, Buckets: []strategy.BucketDiff{
		a(t0, 2), // 2000 at t0
		bucketDiff("ns", "b", 1, time.Second, t0, 1, 1), // another bucket between
		a(t0+500, 1), // 2000 - 500 + 1000 = 2500 at t0+500
		bucketDiff("ns", "a", 4, time.Second, t0, 7, 1), // same key, another kind
		a(t0+100, 1), // dated before: 3500 at t0+500
		bucketDiff("ns", "a", 1, time.Minute, t0, 1, 1), // same key and kind, another window
		a(t0+2000, 1), // 3500 - 1500 + 1000 = 3000 at t0+2000
		bucketDiff("ns", "a\x00", 1, time.Second, t0, 1, 1), // a key that sorts right after
	}, Diffs: []strategy.Diff{diff("ns", "a", arith.WindowStart(time.UnixMilli(t0), time.Minute), time.Minute, 1)}}
	for range 2 { // a retry applies nothing
		if _, err := s.PushAndCount(ctx, b); err != nil {
			t.Fatal(err)
		}
		_, _ = ref.PushAndCount(ctx, b)
	}
	refs := []strategy.BucketRef{{Key: "a", Kind: 1, Window: time.Second}, {Key: "b", Kind: 1, Window: time.Second},
		{Key: "a", Kind: 4, Window: time.Second}, {Key: "a", Kind: 1, Window: time.Minute}, {Key: "a\x00", Kind: 1, Window: time.Second}}
	got, err := s.GetBuckets(ctx, "ns", refs)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(refs) || got[0].Level != 3000 || got[0].At != t0+2000 {
		t.Fatalf("buckets %+v, want the first at level 3000 at %d", got, t0+2000)
	}
	if want := bucketsOf(t, ref, "ns", refs); fmt.Sprint(got) != want {
		t.Fatalf("buckets\n got %v\nwant %v", got, want)
	}
	if n := mustWindow(t, s, "ns", "a", arith.WindowStart(time.UnixMilli(t0), time.Minute), time.Minute); n != 1 {
		t.Fatalf("the batch's window diff counted %v, want 1", n)
	}
}

// Purge deletes the namespace's empty buckets as of now, at the rate they
// last drained at (exactly empty included, a rate whose product with the
// time elapsed leaves the double range too), in batches that resume after
// the last bucket deleted; it keeps buckets with a level, buckets dated
// after now, other namespaces' buckets, and buckets a writer holds (until
// a later purge).
func TestPurgeDropsEmptyBuckets(t *testing.T) {
	s, pool := newStore(t, postgres.Config{PurgeBatch: 2})
	ref := newMemory()
	ctx := context.Background()
	t0 := strategytest.Base.Add(2 * time.Hour).UnixMilli()
	now := time.UnixMilli(t0 + 1000)
	var diffs []strategy.BucketDiff
	var refs []strategy.BucketRef
	add := func(ns, key string, at int64, cost, rate float64) {
		diffs = append(diffs, bucketDiff(ns, key, 1, time.Second, at, cost, rate))
		if ns == "ns" {
			refs = append(refs, strategy.BucketRef{Key: key, Kind: 1, Window: time.Second})
		}
	}
	for i := range 9 { // empty and full buckets, interleaved
		add("ns", fmt.Sprintf("e%d", i), t0, 1, 1)    // 1000 - 1000: exactly empty at now
		add("ns", fmt.Sprintf("e%dk", i), t0, 5, 1)   // 5000 - 1000: kept
		add("ns", fmt.Sprintf("e%dl", i), t0+1, 1, 1) // 1000 - 999: kept
	}
	add("ns", "huge-rate", t0-1e9, 1, 1e300) // drained long ago at a rate near the top of the range
	add("ns", "future", t0+5000, 1, 1)       // dated after now: holds its level
	add("ns", "held", t0, 1, 1)              // empty, but locked by a writer
	add("other", "e0", t0, 1, 1)             // empty, another namespace
	b := strategy.Batch{Node: "n", Seq: 1, Buckets: diffs}
	mustPush(t, s, b)
	_ = ref.PushDiffs(ctx, b)

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM public.ratesync_counters_buckets WHERE key = 'held'::bytea FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.Purge(pctx, "ns", nil, now); err != nil {
		t.Fatalf("Purge: %v", err)
	}
	names := func() string {
		t.Helper()
		var out []string
		got, err := s.GetBuckets(ctx, "ns", refs)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range got {
			if !strings.HasSuffix(b.Key, "k") && !strings.HasSuffix(b.Key, "l") {
				out = append(out, b.Key)
			}
		}
		return fmt.Sprintf("%d %v", len(got), out)
	}
	if got, want := names(), "20 [future held]"; got != want {
		t.Fatalf("after Purge: %s buckets left, want %s (18 with a level, the future one, the held one)", got, want)
	}
	if other := bucketsOf(t, s, "other", []strategy.BucketRef{{Key: "e0", Kind: 1, Window: time.Second}}); other == "[]" {
		t.Fatal("Purge of ns deleted a bucket of another namespace")
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(ctx, "ns", nil, now); err != nil {
		t.Fatalf("second Purge: %v", err)
	}
	_ = ref.Purge(ctx, "ns", nil, now)
	if got, want := names(), "19 [future]"; got != want {
		t.Fatalf("after the second Purge: %s, want %s", got, want)
	}
	if got, want := bucketsOf(t, s, "ns", refs), bucketsOf(t, ref, "ns", refs); got != want {
		t.Fatalf("after Purge:\n got %v\nwant %v", got, want)
	}
}

// Invalid bucket diffs, bucket limits and refs are refused with an error
// naming the field and its value, before any call to the database (the
// store's pool is closed: a call would fail otherwise).
func TestBucketInputIsValidated(t *testing.T) {
	s, pool := newStore(t, postgres.Config{})
	pool.Close()
	ctx := context.Background()
	ok := bucketDiff("ns", "k", 1, time.Second, 0, 1, 1)
	for _, c := range []struct {
		name string
		edit func(d *strategy.BucketDiff)
		want string
	}{
		{"kind 0", func(d *strategy.BucketDiff) { d.Kind = 0 }, "kind 0"},
		{"zero window", func(d *strategy.BucketDiff) { d.Window = 0 }, "window 0s"},
		{"negative window", func(d *strategy.BucketDiff) { d.Window = -time.Second }, "window -1s"},
		{"sub-ms window", func(d *strategy.BucketDiff) { d.Window = 1500 * time.Microsecond }, "window 1.5ms"},
		{"zero cost", func(d *strategy.BucketDiff) { d.Cost = 0 }, "cost 0"},
		{"negative anchored cost", func(d *strategy.BucketDiff) { d.Kind, d.Cost = strategy.KindAnchored, -1 }, "cost -1"},
		{"negative log cost", func(d *strategy.BucketDiff) { d.Kind, d.Cost = strategy.KindLog, -1 }, "cost -1"},
		{"NaN cost", func(d *strategy.BucketDiff) { d.Cost = math.NaN() }, "cost NaN"},
		{"infinite cost", func(d *strategy.BucketDiff) { d.Cost = math.Inf(1) }, "cost +Inf"},
		{"zero rate", func(d *strategy.BucketDiff) { d.Rate = 0 }, "rate 0"},
		{"NaN rate", func(d *strategy.BucketDiff) { d.Rate = math.NaN() }, "rate NaN"},
		{"infinite rate", func(d *strategy.BucketDiff) { d.Rate = math.Inf(1) }, "rate +Inf"},
		{"namespace with NUL", func(d *strategy.BucketDiff) { d.Namespace = "n\x00s" }, `namespace "n\x00s"`},
	} {
		t.Run("diff with "+c.name, func(t *testing.T) {
			d := ok
			c.edit(&d)
			b := strategy.Batch{Node: "n", Seq: 1, Diffs: []strategy.Diff{diff("ns", "k", strategytest.Base, time.Minute, 1)}, Buckets: []strategy.BucketDiff{ok, d}}
			_, err := s.PushAndCount(ctx, b)
			wantErr(t, err, c.want)
			wantErr(t, s.PushDiffs(ctx, b), c.want)
		})
	}
	lim := strategy.CheckLimit{Kind: 1, WindowSize: time.Second, Limit: 1, Burst: 1}
	for _, c := range []struct {
		name string
		edit func(l *strategy.CheckLimit)
		want string
	}{
		{"zero window", func(l *strategy.CheckLimit) { l.WindowSize = 0 }, "window size 0s"},
		{"sub-ms window", func(l *strategy.CheckLimit) { l.WindowSize = time.Microsecond }, "window size 1µs"},
		{"zero limit", func(l *strategy.CheckLimit) { l.Limit = 0 }, "limit 0"},
		{"infinite limit", func(l *strategy.CheckLimit) { l.Limit = math.Inf(1) }, "limit +Inf"},
		{"zero burst", func(l *strategy.CheckLimit) { l.Burst = 0 }, "burst 0"},
		{"negative burst", func(l *strategy.CheckLimit) { l.Burst = -2 }, "burst -2"},
		{"NaN burst", func(l *strategy.CheckLimit) { l.Burst = math.NaN() }, "burst NaN"},
		{"infinite burst", func(l *strategy.CheckLimit) { l.Burst = math.Inf(1) }, "burst +Inf"},
	} {
		t.Run("limit with "+c.name, func(t *testing.T) {
			l := lim
			c.edit(&l)
			_, err := s.CheckAndCount(ctx, "n", 1, []strategy.Check{{Namespace: "ns", Key: "k", Cost: 1, Now: strategytest.Base, Limits: []strategy.CheckLimit{lim, l}}})
			wantErr(t, err, c.want, "Limits[1]")
		})
	}
	_, err := s.CheckAndCount(ctx, "n", 1, []strategy.Check{{Namespace: "ns", Key: "k", Cost: -1, Now: strategytest.Base, Limits: []strategy.CheckLimit{lim}}})
	wantErr(t, err, "cost -1")
	for _, r := range []strategy.BucketRef{{Key: "k", Kind: 0, Window: time.Second}, {Key: "k", Kind: 1, Window: time.Nanosecond}} {
		_, err := s.GetBuckets(ctx, "ns", []strategy.BucketRef{{Key: "ok", Kind: 1, Window: time.Second}, r})
		wantErr(t, err, "refs[1]", fmt.Sprintf("%q", r.Key))
	}
	_, err = s.GetBuckets(ctx, "bad\xff", nil)
	wantErr(t, err, `namespace "bad\xff"`)
}

// wantErr fails t unless err is a postgres: error holding each of want, and
// no database call was made.
func wantErr(t *testing.T, err error, want ...string) {
	t.Helper()
	if err == nil || !strings.HasPrefix(err.Error(), "postgres: ") || strings.Contains(err.Error(), "closed") {
		t.Fatalf("err = %v, want a postgres: error made before any database call", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("err = %v, want one that says %q", err, w)
		}
	}
}

// Concurrent pushes of bucket, anchored, log and window diffs on
// overlapping keys in different orders, and checks with all four kinds of
// limits on the same keys, from many lanes: no deadlock (every writer
// locks the lane, then buckets, anchored windows, logs, then counters,
// each in one order), every diff and every passing check added once.
func TestConcurrentBucketPushesAndChecksNeverDeadlock(t *testing.T) {
	s, _ := newStore(t, postgres.Config{})
	ctx := context.Background()
	now := strategytest.Base.Add(3 * time.Hour)
	at, size := now.UnixMilli(), time.Minute
	start := arith.WindowStart(now, size)
	const lanes, rounds, nkeys = 8, 15, 12
	key := func(k int) string { return fmt.Sprintf("k%02d", k) }
	var wg sync.WaitGroup
	errs := make(chan error, lanes*rounds)
	for l := range lanes {
		wg.Go(func() {
			rng := newRand(uint64(200 + l))
			node := fmt.Sprintf("lane-%d", l)
			for r := range rounds {
				seq := uint64(r + 1)
				if l%2 == 0 {
					b := strategy.Batch{Node: node, Seq: seq}
					for _, k := range rng.Perm(nkeys) {
						b.Buckets = append(b.Buckets, bucketDiff("ns", key(k), 1, time.Hour, at, 1, 1), bucketDiff("ns", key(k), 4, time.Hour, at, 1, 1),
							bucketDiff("ns", key(k), strategy.KindLog, time.Hour, at, 1, 1), bucketDiff("ns", key(k), strategy.KindAnchored, time.Hour, at, 1, 1))
						b.Diffs = append(b.Diffs, diff("ns", key(k), start, size, 1))
					}
					if err := s.PushDiffs(ctx, b); err != nil {
						errs <- err
					}
					continue
				}
				var checks []strategy.Check
				for _, k := range rng.Perm(nkeys)[:4] {
					checks = append(checks, strategy.Check{Namespace: "ns", Key: key(k), Cost: 1, Now: now, Limits: []strategy.CheckLimit{
						{Kind: 4, WindowSize: time.Hour, Limit: 1, Burst: 1e9}, {Kind: strategy.KindLog, WindowSize: time.Hour, Limit: 1e9}, {WindowSize: size, Limit: 1e9},
						{Kind: strategy.KindAnchored, WindowSize: time.Hour, Limit: 1e9}, {Kind: 1, WindowSize: time.Hour, Limit: 1, Burst: 1e9},
					}})
				}
				res, err := s.CheckAndCount(ctx, node, seq, checks)
				if err != nil {
					errs <- err
					continue
				}
				for _, r := range res {
					if !r.Allowed {
						errs <- fmt.Errorf("a check far from its limits was denied: %+v", r)
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var refs []strategy.BucketRef
	var count, anchored, logged float64
	for k := range nkeys {
		refs = append(refs, strategy.BucketRef{Key: key(k), Kind: 1, Window: time.Hour}, strategy.BucketRef{Key: key(k), Kind: 4, Window: time.Hour})
		count += mustWindow(t, s, "ns", key(k), start, size)
		res, err := s.CheckAndCount(ctx, "reader", uint64(k+1), []strategy.Check{{Namespace: "ns", Key: key(k), Now: now, Limits: []strategy.CheckLimit{
			{Kind: strategy.KindAnchored, WindowSize: time.Hour, Limit: 1e9}, {Kind: strategy.KindLog, WindowSize: time.Hour, Limit: 1e9},
		}}})
		if err != nil {
			t.Fatal(err)
		}
		anchored += res[0].Buckets[0].Level
		logged += res[0].Buckets[1].Level
	}
	got, err := s.GetBuckets(ctx, "ns", refs)
	if err != nil {
		t.Fatal(err)
	}
	var level float64
	for _, b := range got {
		level += b.Level
	}
	adds := float64(lanes/2*rounds*nkeys + lanes/2*rounds*4) // per kind: one per diff and per passing check
	if want := 2 * adds * 3_600_000; level != want || count != adds || anchored != adds || logged != adds {
		t.Fatalf("buckets hold %v, windows %v, anchored windows %v, logs %v; want %v, %v, %v and %v", level, count, anchored, logged, want, adds, adds, adds)
	}
}
