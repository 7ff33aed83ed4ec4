package strategytest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/arith"
	"github.com/ratesync/ratesync/strategy"
)

// Cases of check calls retried with the same (node, seq).

// RetryCall is a call of checks on keys of their own (so on several shards
// of a sharded store), some allowed and some denied, on every kind of
// limit: windows (fixed and sliding), buckets, a sliding log and an
// anchored window, all at now.
func RetryCall(ns string, now time.Time) []strategy.Check {
	fixed := strategy.CheckLimit{WindowSize: time.Minute, Limit: 3, Fixed: true}
	sliding := strategy.CheckLimit{WindowSize: time.Minute, Limit: 10}
	c := func(key string, cost float64, limits ...strategy.CheckLimit) strategy.Check {
		return strategy.Check{Namespace: ns, Key: key, Cost: cost, Now: now, Limits: limits}
	}
	bucket := strategy.CheckLimit{Kind: kindToken, WindowSize: time.Second, Limit: 1, Burst: 2}
	log := strategy.CheckLimit{Kind: strategy.KindLog, WindowSize: time.Minute, Limit: 2}
	anchored := strategy.CheckLimit{Kind: strategy.KindAnchored, WindowSize: time.Minute, Limit: 1}
	return []strategy.Check{
		c("ra", 1, fixed),    // 0 + 1 <= 3
		c("ra", 3, fixed),    // 1 + 3 > 3
		c("rb", 1, bucket),   // level 0 + 1000 <= 2000
		c("rb", 2, bucket),   // 1000 + 2000 > 2000
		c("rc", 2, log),      // sum 0 + 2 <= 2
		c("rc", 1, log),      // 2 + 1 > 2: fits once the entry of 2 stops weighing
		c("rd", 1, anchored), // opens at now
		c("rd", 1, anchored), // 1 + 1 > 1
		c("re", 2, sliding, strategy.CheckLimit{Kind: kindToken, WindowSize: time.Second, Limit: 1, Burst: 5}),
		c("rf", 2, strategy.CheckLimit{WindowSize: time.Minute, Limit: 1}), // 0 + 2 > 1
		c("ra", 2, fixed), // 1 + 2 <= 3
	}
}

// RetryDecisions are the decisions of RetryCall on an empty store.
var RetryDecisions = []bool{true, false, true, false, true, false, true, false, true, false, true}

var retryCases = []suiteCase{
	{"a retried check call gets the decisions made then and counts nothing again", func(t *testing.T, s strategy.Strategy) {
		ck := checker(t, s)
		bs := s.(strategy.BucketStore)
		ctx := context.Background()
		now := Base.Add(8*time.Hour + 15*time.Second)
		ms := now.UnixMilli()
		min := time.Minute
		start := arith.WindowStart(now, min)
		call := RetryCall("ns", now)
		counts := func() string {
			refs := []strategy.BucketRef{{Key: "rb", Kind: kindToken, Window: time.Second}, {Key: "re", Kind: kindToken, Window: time.Second}}
			b := getBuckets(t, bs, "ns", refs...)
			return fmt.Sprintf("ra %v, re %v, rf %v, bucket rb %v at %d, bucket re %v at %d",
				window(t, s, "ns", "ra", start, min), window(t, s, "ns", "re", start, min), window(t, s, "ns", "rf", start, min),
				b[refs[0]].Level, b[refs[0]].At, b[refs[1]].Level, b[refs[1]].At)
		}
		wantCounts := fmt.Sprintf("ra 3, re 2, rf 0, bucket rb 1000 at %d, bucket re 2000 at %d", ms, ms)

		first, err := ck.CheckAndCount(ctx, "n", 1, call)
		if err != nil {
			t.Fatalf("CheckAndCount: %v", err)
		}
		for i, r := range first {
			if r.Allowed != RetryDecisions[i] {
				t.Fatalf("check %d: %+v, want allowed %v", i, r, RetryDecisions[i])
			}
		}
		if r := first[5].Buckets[0]; r.RetryAt != ms+60000 {
			t.Fatalf("denied log check: %+v, want retry at %d", r, ms+60000)
		}
		if got := counts(); got != wantCounts {
			t.Fatalf("after the call: %s, want %s", got, wantCounts)
		}

		// The retry: the same decisions, nothing counted again, the state
		// as it is now.
		retry, err := ck.CheckAndCount(ctx, "n", 1, call)
		if err != nil {
			t.Fatalf("CheckAndCount retry: %v", err)
		}
		for i, r := range retry {
			if r.Allowed != first[i].Allowed {
				t.Errorf("retried check %d: allowed %v, want %v as decided then", i, r.Allowed, first[i].Allowed)
			}
		}
		for _, i := range []int{0, 1, 10} {
			if r := retry[i]; r.Totals[0] != (strategy.Totals{Current: 3}) {
				t.Errorf("retried check %d: totals %+v, want current 3", i, r.Totals)
			}
		}
		if r := retry[8]; r.Totals[0] != (strategy.Totals{Current: 2}) || r.Buckets[1].Level != 2000 || r.Buckets[1].At != ms {
			t.Errorf("retried check 8: %+v, want current 2, bucket level 2000 at %d", r, ms)
		}
		if r := retry[9]; r.Totals[0] != (strategy.Totals{}) {
			t.Errorf("retried check 9: totals %+v, want 0", r.Totals)
		}
		for i, want := range map[int]strategy.BucketState{
			2: {Key: "rb", Kind: kindToken, Window: time.Second, At: ms, Level: 1000},
			3: {Key: "rb", Kind: kindToken, Window: time.Second, At: ms, Level: 1000},
			4: {Key: "rc", Kind: strategy.KindLog, Window: min, At: ms, Level: 2},                      // allowed: no RetryAt
			5: {Key: "rc", Kind: strategy.KindLog, Window: min, At: ms, Level: 2, RetryAt: ms + 60000}, // denied
			6: {Key: "rd", Kind: strategy.KindAnchored, Window: min, At: ms, Level: 1},
			7: {Key: "rd", Kind: strategy.KindAnchored, Window: min, At: ms, Level: 1},
		} {
			if got := retry[i].Buckets[0]; got != want {
				t.Errorf("retried check %d: state %+v, want %+v", i, got, want)
			}
		}
		if got := counts(); got != wantCounts {
			t.Fatalf("after the retry: %s, want %s (nothing counted again)", got, wantCounts)
		}

		// Again, with one more check than were decided: the same results,
		// and the one more is not allowed (no decision of it is kept).
		more := append(call[:len(call):len(call)], strategy.Check{Namespace: "ns", Key: "ra", Cost: 0, Now: now, Limits: []strategy.CheckLimit{{WindowSize: min, Limit: 10}}})
		again, err := ck.CheckAndCount(ctx, "n", 1, more)
		if err != nil {
			t.Fatalf("CheckAndCount retry: %v", err)
		}
		if got, want := fmt.Sprint(again[:len(call)]), fmt.Sprint(retry); got != want {
			t.Errorf("second retry:\n got %s\nwant %s", got, want)
		}
		if again[len(call)].Allowed {
			t.Errorf("a check beyond the call's: %+v, want not allowed", again[len(call)])
		}

		// A newer call on every key (cost 0: it counts nothing), then the
		// retry of seq 1: below the last seq, not allowed.
		var newer []strategy.Check
		for _, k := range []string{"ra", "rb", "rc", "rd", "re", "rf"} {
			newer = append(newer, strategy.Check{Namespace: "ns", Key: k, Cost: 0, Now: now, Limits: []strategy.CheckLimit{{WindowSize: min, Limit: 10}}})
		}
		res, err := ck.CheckAndCount(ctx, "n", 2, newer)
		if err != nil {
			t.Fatalf("CheckAndCount seq 2: %v", err)
		}
		for i, r := range res {
			if !r.Allowed {
				t.Fatalf("seq 2, check %d: %+v, want allowed", i, r)
			}
		}
		stale, err := ck.CheckAndCount(ctx, "n", 1, call)
		if err != nil {
			t.Fatalf("CheckAndCount of seq 1 after seq 2: %v", err)
		}
		for i, r := range stale {
			if r.Allowed {
				t.Errorf("seq 1 after seq 2, check %d: %+v, want not allowed", i, r)
			}
		}
		if r := stale[10]; r.Totals[0] != (strategy.Totals{Current: 3}) {
			t.Errorf("seq 1 after seq 2, check 10: totals %+v, want the current 3", r.Totals)
		}
		if r := stale[4].Buckets[0]; r.Level != 2 || r.RetryAt != ms+60000 {
			t.Errorf("seq 1 after seq 2, check 4: state %+v, want sum 2, retry at %d (denied)", r, ms+60000)
		}
		if got := counts(); got != wantCounts {
			t.Fatalf("after seq 1 again: %s, want %s (nothing counted)", got, wantCounts)
		}

		// A push takes seq 3 on every key's shard: a check call of seq 3
		// finds no decision of its own, and is not allowed.
		var diffs []strategy.Diff
		for _, k := range []string{"ra", "rb", "rc", "rd", "re", "rf"} {
			diffs = append(diffs, diff("ns", k, start, min, 1))
		}
		push(t, s, strategy.Batch{Node: "n", Seq: 3, Diffs: diffs})
		pushed := fmt.Sprintf("ra 4, re 3, rf 1, bucket rb 1000 at %d, bucket re 2000 at %d", ms, ms)
		res, err = ck.CheckAndCount(ctx, "n", 3, call)
		if err != nil {
			t.Fatalf("CheckAndCount of a pushed seq: %v", err)
		}
		for i, r := range res {
			if r.Allowed {
				t.Errorf("check %d of a pushed seq: %+v, want not allowed", i, r)
			}
		}
		if got := counts(); got != pushed {
			t.Fatalf("after a check call of a pushed seq: %s, want %s (nothing counted)", got, pushed)
		}
	}},
}
