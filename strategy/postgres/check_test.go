package postgres_test

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/arith"
	"github.com/ratesync/ratesync/internal/strategytest"
	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/postgres"
)

// Differential test of CheckAndCount's function (migrations/001_schema.sql)
// on what it handles run by run: checks whose Now
// straddle window boundaries (a row that is one check's previous window and
// another's current one), several sizes and namespaces in one batch (runs
// of previous and current windows alternating), current windows present
// then absent in one run (the locking switches from FOR UPDATE to ON
// CONFLICT at the first absent row), absent current windows created then
// dropped because every check on them was denied (cost above the limit) or
// counted nothing (cost 0), refunds, and replays. Results and the store must match the memory
// store's after every batch.
func TestCheckAndCountAgreesWithTheMemoryStore(t *testing.T) {
	s, _ := newStore(t, postgres.Config{})
	ref := newMemory()
	ctx := context.Background()
	sizes := []time.Duration{time.Second, time.Minute, 3 * time.Minute}
	keys := []string{"a", "b", "c", "nul\x00", "\xff", ""}
	namespaces := []string{"x", "y", "Y"}
	base := strategytest.Base.Add(3*time.Minute - 1500*time.Millisecond) // 1s, 1m and 3m boundaries ahead
	rng := newRand(7)
	same := func(what string) {
		t.Helper()
		for _, ns := range namespaces {
			for _, k := range [][]string{nil, keys} {
				q := strategy.Query{Namespace: ns, WindowSizes: sizes, Now: base.Add(1500 * time.Millisecond), Keys: k}
				if got, want := counters(t, s, q), counters(t, ref, q); fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("%s: namespace %q (keys %q):\n got %v\nwant %v", what, ns, k, got, want)
				}
			}
		}
	}
	for seq := uint64(1); seq <= 150; seq++ {
		if seq%10 == 1 { // some counts, refunds included (rows at 0 that no check created)
			var diffs []strategy.Diff
			for range 1 + rng.IntN(8) {
				size := sizes[rng.IntN(len(sizes))]
				now := base.Add(time.Duration(rng.IntN(3000)) * time.Millisecond)
				start := arith.WindowStart(now, size).Add(-time.Duration(rng.IntN(2)) * size)
				diffs = append(diffs, diff(namespaces[rng.IntN(len(namespaces))], keys[rng.IntN(len(keys))], start, size, float64(rng.IntN(5)-1)))
			}
			b := strategy.Batch{Node: "pusher", Seq: seq, Diffs: diffs}
			if err := s.PushDiffs(ctx, b); err != nil {
				t.Fatal(err)
			}
			_ = ref.PushDiffs(ctx, b)
		}
		var checks []strategy.Check
		for range 1 + rng.IntN(10) {
			c := strategy.Check{
				Namespace: namespaces[rng.IntN(len(namespaces))],
				Key:       keys[rng.IntN(len(keys))],
				Cost:      float64(rng.IntN(4)),
				Now:       base.Add(time.Duration(rng.IntN(3000)) * time.Millisecond),
			}
			if rng.IntN(6) == 0 {
				c.Cost = 50 // above every limit: denied, its absent current windows dropped again
			}
			for range rng.IntN(4) {
				c.Limits = append(c.Limits, strategy.CheckLimit{WindowSize: sizes[rng.IntN(len(sizes))], Limit: float64(1 + rng.IntN(12)), Fixed: rng.IntN(3) == 0})
			}
			checks = append(checks, c)
		}
		got, err := s.CheckAndCount(ctx, "checker", seq, checks)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := ref.CheckAndCount(ctx, "checker", seq, checks)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("batch %d %+v:\n got %v\nwant %v", seq, checks, got, want)
		}
		if seq%7 == 0 { // a replay: nothing counted, current totals
			got, err := s.CheckAndCount(ctx, "checker", seq, checks)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := ref.CheckAndCount(ctx, "checker", seq, checks)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("replay of batch %d:\n got %v\nwant %v", seq, got, want)
			}
		}
		same(fmt.Sprintf("after batch %d", seq))
	}
}

// Concurrent checks that create and drop placeholders (denied checks on
// absent current windows, some on keys nothing ever counts in), checks
// that pass, and pushes, on overlapping keys in several orders, with Now on
// both sides of a window boundary (a row is one caller's previous window
// and another's current one): no deadlock, no placeholder left, every
// passing check and every diff counted once.
func TestConcurrentChecksWithPlaceholdersNeverDeadlock(t *testing.T) {
	s, pool := newStore(t, postgres.Config{})
	ctx := context.Background()
	size := time.Second
	boundary := arith.WindowStart(strategytest.Base.Add(30*time.Second), size)
	nows := []time.Time{boundary.Add(-200 * time.Millisecond), boundary.Add(300 * time.Millisecond)}
	const lanes, rounds, nkeys = 8, 40, 12
	var (
		wg      sync.WaitGroup
		counted atomic.Int64 // diffs pushed plus costs of passing checks
	)
	errs := make(chan error, lanes*rounds)
	for l := range lanes {
		wg.Go(func() {
			rng := newRand(uint64(100 + l))
			node := fmt.Sprintf("lane-%d", l)
			for r := range rounds {
				seq := uint64(r + 1)
				now := nows[rng.IntN(len(nows))]
				if l%4 == 0 { // both windows, as a push after a turn does
					var diffs []strategy.Diff
					for _, k := range rng.Perm(nkeys)[:6] {
						for _, now := range nows {
							diffs = append(diffs, diff("ns", fmt.Sprintf("k%02d", k), arith.WindowStart(now, size), size, 1))
						}
					}
					if err := s.PushDiffs(ctx, strategy.Batch{Node: node, Seq: seq, Diffs: diffs}); err != nil {
						errs <- err
						continue
					}
					counted.Add(int64(len(diffs)))
					continue
				}
				var checks []strategy.Check
				check := func(key string, cost float64) {
					checks = append(checks, strategy.Check{Namespace: "ns", Key: key, Cost: cost, Now: now,
						Limits: []strategy.CheckLimit{{WindowSize: size, Limit: 50}, {WindowSize: time.Minute, Limit: 1e9}}})
				}
				for _, k := range rng.Perm(nkeys)[:6] {
					cost := 1.0
					if rng.IntN(2) == 0 {
						cost = 100 // denied
					}
					check(fmt.Sprintf("k%02d", k), cost)
				}
				for _, k := range rng.Perm(nkeys / 2)[:3] {
					check(fmt.Sprintf("denied-%02d", k), 100) // never counted: always a placeholder
				}
				res, err := s.CheckAndCount(ctx, node, seq, checks)
				if err != nil {
					errs <- err
					continue
				}
				for i, r := range res {
					if r.Allowed {
						if checks[i].Cost != 1 {
							errs <- fmt.Errorf("check of cost %v above its limit passed", checks[i].Cost)
						}
						counted.Add(1)
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
	var zeros int
	var total float64
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE count = 0), coalesce(sum(count) FILTER (WHERE window_size = $1), 0)
		FROM public.ratesync_counters`, size.Milliseconds()).Scan(&zeros, &total); err != nil {
		t.Fatal(err)
	}
	if zeros != 0 {
		t.Errorf("%d rows at 0 left: placeholders not dropped", zeros)
	}
	if want := float64(counted.Load()); total != want {
		t.Errorf("total of the 1s windows = %v, want %v (each diff and passing check once)", total, want)
	}
}

// Window checks decide exactly as arith.WindowFits, on cases at the
// boundary: exact fits (the request takes the last of the limit) and cases
// where the weighted sum cur + prev*weight + cost, rounded at each step,
// decides otherwise. Each case is its own key, counted by one push, and
// all are decided in one call.
func TestWindowChecksDecideAsWindowFits(t *testing.T) {
	s, _ := newStore(t, postgres.Config{})
	ctx := context.Background()
	rng := newRand(3)
	type tc struct {
		size, elapsed   int64
		cur, prev, cost float64
		limit           float64
	}
	var cases []tc
	for len(cases) < 200 {
		c := tc{size: []int64{1000, 3000, 60000, 7}[rng.IntN(4)], cur: float64(rng.IntN(40)), prev: float64(rng.IntN(40)), cost: float64(1 + rng.IntN(3))}
		c.elapsed = rng.Int64N(c.size)
		c.limit = ((c.cur+c.cost)*float64(c.size) + c.prev*float64(c.size-c.elapsed)) / float64(c.size)
		if rng.IntN(2) == 0 {
			c.limit = math.Nextafter(c.limit, 0)
		}
		fits := arith.WindowFits(c.cur, c.prev, c.cost, c.limit, c.size, c.elapsed, false)
		weighted := c.cur+c.prev*(float64(c.size-c.elapsed)/float64(c.size))+c.cost <= c.limit
		if c.limit > 0 && fits != weighted {
			cases = append(cases, c)
		}
	}
	base := strategytest.Base.Add(5 * time.Hour)
	var diffs []strategy.Diff
	var checks []strategy.Check
	for i, c := range cases {
		size := time.Duration(c.size) * time.Millisecond
		start := arith.WindowStart(base, size)
		key := fmt.Sprintf("w%03d", i)
		diffs = append(diffs, diff("ns", key, start, size, c.cur), diff("ns", key, start.Add(-size), size, c.prev))
		checks = append(checks, strategy.Check{Namespace: "ns", Key: key, Cost: c.cost, Now: start.Add(time.Duration(c.elapsed) * time.Millisecond),
			Limits: []strategy.CheckLimit{{WindowSize: size, Limit: c.limit}}})
	}
	mustPush(t, s, strategy.Batch{Node: "n", Seq: 1, Diffs: diffs})
	res, err := s.CheckAndCount(ctx, "n", 2, checks)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		if want := arith.WindowFits(c.cur, c.prev, c.cost, c.limit, c.size, c.elapsed, false); res[i].Allowed != want {
			t.Errorf("case %+v: allowed %v, want %v (WindowFits)", c, res[i].Allowed, want)
		}
	}
}
