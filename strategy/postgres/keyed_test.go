package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/arith"
	"github.com/ratesync/ratesync/internal/strategytest"
	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/postgres"
)

// Differential test of anchored windows, sliding logs and precision
// limits, beside buckets and plain windows: random pushes (window diffs,
// bucket, anchored and log diffs, some dated before the state they change
// or long expired, several of one log or window in a batch), random checks
// mixing every kind of limit (precision limits sharing their sub-windows
// with plain limits, a limit named twice, peeks of cost 0, clocks behind
// each other and windows that close or expire between checks, a batch
// spanning more than a window), costs such as 0.1 and 0.3 whose sums round
// (so that a log's sum must go through the same float steps in both
// stores), replays, and purges of keyed state. Every result and the
// counters read back must equal the memory store's, bit for bit. The
// dense case puts the checks of a batch within a few milliseconds, with
// windows of as few, so that a batch counts several hits of one
// millisecond in a log between trims of it.
func TestKeyedAgreesWithTheMemoryStore(t *testing.T) {
	t.Run("spread", func(t *testing.T) {
		keyedAgree(t, 21, 700, 120, []time.Duration{time.Millisecond, 200 * time.Millisecond, time.Second, 3 * time.Second})
	})
	t.Run("dense", func(t *testing.T) {
		keyedAgree(t, 22, 5, 3, []time.Duration{time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, time.Second})
	})
}

// keyedAgree runs the differential test with checks jitter ms apart
// around a clock that moves up to step ms a batch, and keyed limits of
// keyedWindows.
func keyedAgree(t *testing.T, seed uint64, jitter, step int, keyedWindows []time.Duration) {
	s, _ := newStore(t, postgres.Config{PurgeBatch: 3})
	ref := newMemory()
	ctx := context.Background()
	keys := []string{"a", "b", "nul\x00", "\xff", ""}
	subs := []time.Duration{100 * time.Millisecond, 250 * time.Millisecond}
	plain := []time.Duration{250 * time.Millisecond, time.Second}
	costs := []float64{0, 0.1, 0.25, 0.3, 0.5, 1, 2}
	limits := []float64{0.7, 1, 2.5, 3, 10}
	rng := newRand(seed)
	base := strategytest.Base.Add(11*time.Hour + 123*time.Millisecond)
	pick := func(n int) int { return rng.IntN(n) }
	instant := func(now time.Time) time.Time {
		return now.Add(time.Duration(pick(jitter)-jitter*3/7) * time.Millisecond)
	}
	limit := func() strategy.CheckLimit {
		switch pick(6) {
		case 0:
			return strategy.CheckLimit{WindowSize: plain[pick(len(plain))], Limit: limits[pick(len(limits))], Fixed: pick(3) == 0}
		case 1:
			p := subs[pick(len(subs))]
			return strategy.CheckLimit{WindowSize: p * time.Duration(2+pick(3)), Limit: limits[pick(len(limits))], Precision: p}
		case 2:
			return strategy.CheckLimit{Kind: []uint8{1, 4}[pick(2)], WindowSize: keyedWindows[1+pick(3)], Limit: limits[pick(len(limits))], Burst: limits[pick(len(limits))]}
		case 3:
			return strategy.CheckLimit{Kind: strategy.KindAnchored, WindowSize: keyedWindows[pick(len(keyedWindows))], Limit: limits[pick(len(limits))]}
		}
		return strategy.CheckLimit{Kind: strategy.KindLog, WindowSize: keyedWindows[pick(len(keyedWindows))], Limit: limits[pick(len(limits))]}
	}
	var refs []strategy.BucketRef
	for _, k := range keys {
		for _, kind := range []uint8{1, 4} {
			for _, w := range keyedWindows {
				refs = append(refs, strategy.BucketRef{Key: k, Kind: kind, Window: w})
			}
		}
	}
	sizes := append(append([]time.Duration{}, subs...), plain...)
	depths := []int{5, 5, 2, 2}
	now := base
	for seq := uint64(1); seq <= 300; seq++ {
		now = now.Add(time.Duration(pick(step)) * time.Millisecond)
		if seq%4 == 1 {
			b := strategy.Batch{Node: "pusher", Seq: seq}
			for range 1 + pick(8) {
				k := keys[pick(len(keys))]
				at := instant(now)
				if pick(8) == 0 {
					at = at.Add(-5 * time.Second) // long expired
				}
				c := costs[1+pick(len(costs)-1)]
				switch pick(3) {
				case 0:
					// Dyadic: a push sums the diffs of one counter before
					// adding them, exact for such values only.
					size := sizes[pick(len(sizes))]
					b.Diffs = append(b.Diffs, diff("x", k, arith.WindowStart(at, size), size, []float64{0.25, 0.5, 1, 2}[pick(4)]))
				default:
					kind := []uint8{1, 4, strategy.KindAnchored, strategy.KindLog, strategy.KindLog}[pick(5)]
					b.Buckets = append(b.Buckets, bucketDiff("x", k, kind, keyedWindows[1+pick(3)], at.UnixMilli(), c, limits[pick(len(limits))]))
				}
			}
			// PushDiffs: PushAndCount's totals of a window named twice are
			// exact for whole counts only (see its doc); its state is the same.
			mustPush(t, s, b)
			_ = ref.PushDiffs(ctx, b)
		}
		if seq%50 == 0 {
			for _, st := range []strategy.Strategy{s, ref} {
				if err := st.Purge(ctx, "x", nil, now); err != nil {
					t.Fatal(err)
				}
			}
		}
		var checks []strategy.Check
		for range 1 + pick(6) {
			c := strategy.Check{Namespace: "x", Key: keys[pick(len(keys))], Cost: costs[pick(len(costs))], Now: instant(now)}
			if pick(10) == 0 {
				c.Now = c.Now.Add(4 * time.Second) // a batch spanning more than a window
			}
			for range pick(4) {
				c.Limits = append(c.Limits, limit())
			}
			if n := len(c.Limits); n > 0 && pick(5) == 0 {
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
				t.Fatalf("checks %d %+v:\n got %+v\nwant %+v", seq, checks, got, want)
			}
		}
		q := strategy.Query{Namespace: "x", WindowSizes: sizes, Now: now, Windows: depths}
		if got, want := counters(t, s, q), counters(t, ref, q); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("after batch %d:\n got %v\nwant %v", seq, got, want)
		}
		if got, want := bucketsOf(t, s, "x", refs), bucketsOf(t, ref, "x", refs); got != want {
			t.Fatalf("buckets after batch %d:\n got %v\nwant %v", seq, got, want)
		}
	}
}

// logCheck is one check of a log of limit lim and window w on key k of
// namespace "logs".
func logCheck(k string, now time.Time, cost, lim float64, w time.Duration) []strategy.Check {
	return []strategy.Check{{Namespace: "logs", Key: k, Cost: cost, Now: now,
		Limits: []strategy.CheckLimit{{Kind: strategy.KindLog, WindowSize: w, Limit: lim}}}}
}

// Hits of one millisecond share one entry row, by checks (in one batch
// and in several) and by pushes alike; a check that counts nothing (a
// denial, a peek, a replay) on a new key leaves no row behind.
func TestLogHitsOfOneMillisecondShareAnEntry(t *testing.T) {
	s, pool := newStore(t, postgres.Config{})
	now := strategytest.Base.Add(time.Hour)
	c := logCheck("k", now, 1, 100, time.Minute)
	mustCheck(t, s, "n", 1, append(append(c, c...), c...))
	mustCheck(t, s, "n", 2, c)
	mustPush(t, s, strategy.Batch{Node: "p", Seq: 1, Buckets: []strategy.BucketDiff{
		bucketDiff("logs", "k", strategy.KindLog, time.Minute, now.UnixMilli(), 2, 100),
		bucketDiff("logs", "k", strategy.KindLog, time.Minute, now.UnixMilli(), 3, 100),
	}})
	if h, e := logRows(t, pool); h != 1 || e != 1 {
		t.Fatalf("%d headers and %d entries after 6 hits of one millisecond, want 1 and 1", h, e)
	}
	if r := mustCheck(t, s, "n", 3, logCheck("k", now, 0, 100, time.Minute))[0]; r.Buckets[0].Level != 9 || r.Buckets[0].At != now.UnixMilli() {
		t.Fatalf("peek: %+v, want a sum of 9 at %d", r, now.UnixMilli())
	}
	mustCheck(t, s, "n", 4, logCheck("new", now, 500, 100, time.Minute)) // denied
	mustCheck(t, s, "n", 5, logCheck("new2", now, 0, 100, time.Minute))  // a peek
	mustCheck(t, s, "n", 5, logCheck("new3", now, 1, 100, time.Minute))  // a replay
	if h, e := logRows(t, pool); h != 1 || e != 1 {
		t.Fatalf("%d headers and %d entries after checks that counted nothing on new keys, want 1 and 1", h, e)
	}
}

// A check trims the log it reads: the entries that stopped weighing are
// deleted, and the sum is what remains; a log emptied so keeps an empty
// header (until Purge), whose sum is exactly 0.
func TestLogTrimsOnUse(t *testing.T) {
	s, pool := newStore(t, postgres.Config{})
	t0 := strategytest.Base.Add(2 * time.Hour)
	var diffs []strategy.BucketDiff
	for i := range 50 {
		diffs = append(diffs, bucketDiff("logs", "k", strategy.KindLog, time.Second, t0.UnixMilli()+int64(i*10), 0.1, 100))
	}
	mustPush(t, s, strategy.Batch{Node: "p", Seq: 1, Buckets: diffs})
	if _, e := logRows(t, pool); e != 50 {
		t.Fatalf("%d entries, want 50", e)
	}
	// At t0+1000+245 the entries at t0 .. t0+240 (25 of them) stop weighing.
	r := mustCheck(t, s, "n", 1, logCheck("k", t0.Add(1245*time.Millisecond), 0, 100, time.Second))[0]
	if _, e := logRows(t, pool); e != 25 {
		t.Fatalf("%d entries after a check at t0+1245ms, want 25", e)
	}
	ref := &arith.Log{}
	for _, d := range diffs {
		ref.Add(d.At, d.Cost)
	}
	ref.Trim(t0.UnixMilli()+1245, 1000)
	if r.Buckets[0].Level != ref.Sum || r.Buckets[0].At != t0.UnixMilli()+490 {
		t.Fatalf("after the trim: %+v, want sum %v (arith.Log's), newest at t0+490", r.Buckets[0], ref.Sum)
	}
	r = mustCheck(t, s, "n", 2, logCheck("k", t0.Add(time.Hour), 0, 100, time.Second))[0]
	if h, e := logRows(t, pool); h != 1 || e != 0 {
		t.Fatalf("%d headers and %d entries after every entry expired, want 1 and 0", h, e)
	}
	var sum float64
	if err := pool.QueryRow(context.Background(), `SELECT sum FROM public.ratesync_counters_logs`).Scan(&sum); err != nil {
		t.Fatal(err)
	}
	if r.Buckets[0] != (strategy.BucketState{Key: "k", Kind: strategy.KindLog, Window: time.Second}) || sum != 0 {
		t.Fatalf("an emptied log: %+v, stored sum %v; want the zero state and 0", r.Buckets[0], sum)
	}
}

// A hit on a log of 1,000 entries writes O(1) rows: the new entry, the
// one entry that stopped weighing (deleted), and the header. Every other
// entry row is untouched (its xmin, the transaction that wrote it, is
// older than the hit's, which the header's xmin gives).
func TestLogHitRewritesNoLog(t *testing.T) {
	s, pool := newStore(t, postgres.Config{})
	ctx := context.Background()
	const n = 1000
	t0 := strategytest.Base.Add(3 * time.Hour).UnixMilli()
	var diffs []strategy.BucketDiff
	for i := range n {
		diffs = append(diffs, bucketDiff("logs", "k", strategy.KindLog, time.Minute, t0+int64(i), 1, 1e6))
	}
	mustPush(t, s, strategy.Batch{Node: "p", Seq: 1, Buckets: diffs})
	hit := time.UnixMilli(t0 + 60_000) // the entry at t0 stops weighing
	if r := mustCheck(t, s, "n", 1, logCheck("k", hit, 1, 1e6, time.Minute))[0]; !r.Allowed || r.Buckets[0].Level != n {
		t.Fatalf("hit: %+v, want allowed with a sum of %d", r, n)
	}
	var written, total, oldest int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE e.xmin = h.xmin), count(*), min(e.at_ms)
		FROM public.ratesync_counters_logentries e, public.ratesync_counters_logs h`).Scan(&written, &total, &oldest); err != nil {
		t.Fatal(err)
	}
	if written != 1 || total != n || oldest != t0+1 {
		t.Fatalf("after a hit: %d entry rows written by it, %d in all, oldest at t0%+d; want 1, %d, t0+1", written, total, oldest-t0, n)
	}
}

// A log at 10,000 entries (one per millisecond, the bound of a log of
// limit 10,000 and cost 1) decides, trims, answers RetryAt from its oldest
// entry and its newest, and purges, as arith.Log does.
func TestLogAtItsBound(t *testing.T) {
	s, pool := newStore(t, postgres.Config{})
	mem := newMemory()
	ctx := context.Background()
	const n = 10_000
	w := time.Minute
	t0 := strategytest.Base.Add(4 * time.Hour).UnixMilli()
	var diffs []strategy.BucketDiff
	for i := range n {
		diffs = append(diffs, bucketDiff("logs", "k", strategy.KindLog, w, t0+int64(i*5), 1, n))
	}
	b := strategy.Batch{Node: "p", Seq: 1, Buckets: diffs}
	mustPush(t, s, b)
	_ = mem.PushDiffs(ctx, b)
	if h, e := logRows(t, pool); h != 1 || e != n {
		t.Fatalf("%d headers and %d entries, want 1 and %d", h, e, n)
	}
	steps := []struct {
		at   int64
		cost float64
	}{
		{t0 + 50_000, 1},     // full: denied, retry when the oldest entry stops weighing
		{t0 + 50_000, n},     // retry when every entry has stopped weighing (a walk of them all)
		{t0 + 60_000, 1},     // the oldest stopped weighing: allowed
		{t0 + 85_000, 3_000}, // 5,000 more entries trimmed at once
		{t0 + 85_000, 5_000}, // denied
	}
	for i, st := range steps {
		c := logCheck("k", time.UnixMilli(st.at), st.cost, n, w)
		got := mustCheck(t, s, "n", uint64(i+1), c)
		want, _ := mem.CheckAndCount(ctx, "n", uint64(i+1), c)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("step %d %+v:\n got %+v\nwant %+v", i, st, got, want)
		}
	}
	if _, e := logRows(t, pool); e != n-5_001+2 {
		t.Fatalf("%d entries after the steps, want %d", e, n-5_001+2)
	}
	if err := s.Purge(ctx, "logs", nil, time.UnixMilli(t0+85_000+w.Milliseconds())); err != nil {
		t.Fatal(err)
	}
	if h, e := logRows(t, pool); h != 0 || e != 0 {
		t.Fatalf("%d headers and %d entries after Purge once every entry expired, want none", h, e)
	}
}
