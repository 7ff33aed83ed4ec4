package redis

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratesync/ratesync/strategy"
)

// show writes an ARGV as the server gets it: pointers written as their
// values, strings quoted.
func show(args []any) string {
	parts := make([]string, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case *string:
			a = *v
		case *int64:
			a = *v
		}
		if s, ok := a.(string); ok {
			parts[i] = fmt.Sprintf("%q", s)
		} else {
			parts[i] = fmt.Sprint(a)
		}
	}
	return strings.Join(parts, " ")
}

// The ARGV of each kind of group, and of a check call, as push.lua and
// check.lua read them (see their header comments). A change here is a change of the wire format:
// the scripts must change with it.
func TestArgvLayout(t *testing.T) {
	cfg, err := Config{Shards: 1}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	s := &Store{cfg: cfg, laneTTL: cfg.LaneTTL.Milliseconds()}
	old := time.UnixMilli(0).UTC() // push: windows long gone, so every TTL is the margin, 5000
	diffs := []strategy.Diff{
		{Namespace: "ns", Key: "a", WindowStart: old.Add(60 * time.Second), WindowSize: time.Minute, Value: 1},
		{Namespace: "ns", Key: "b", WindowStart: old, WindowSize: time.Second, Value: 0.5},
		{Namespace: "ns", Key: "a", WindowStart: old.Add(60 * time.Second), WindowSize: time.Minute, Value: 2},
	}
	buckets := []strategy.BucketDiff{
		{Namespace: "ns", Key: "a", Kind: 4, Window: time.Second, At: 1234, Cost: 2, Rate: 3},
		{Namespace: "ns", Key: "b", Kind: 5, Window: time.Minute, At: 1235, Cost: 0.5, Rate: 0.25},
		{Namespace: "ns", Key: "a", Kind: 4, Window: time.Second, At: 1236, Cost: 1, Rate: 3}, // the first's bucket
		{Namespace: "ns", Key: "b", Kind: strategy.KindLog, Window: time.Second, At: 1237, Cost: 1, Rate: 5},
		{Namespace: "ns", Key: "a", Kind: strategy.KindAnchored, Window: time.Second, At: 1238, Cost: 2, Rate: 4},
	}
	seq := any(seqArg(7))
	for _, c := range []struct {
		count bool
		want  string
	}{
		// mode, m, k (the lane, 2 hashes, 2 buckets, a log's entries and
		// sum, an anchored window), d, TTLs (each with "0": no diff reads
		// its hash over a longer span), then the keyed diffs: type, key
		// number, at, cost, window, rate; then runs by hash: h, n, n
		// (field, value).
		{false, `"00000000000000000007" 86400000 48 "0" 2 8 5 5000 "0" 5000 "0" ` +
			`"b" 3 1234 "2" 1000 "3" "b" 4 1235 "0.5" 60000 "0.25" "b" 3 1236 "1" 1000 "3" ` +
			`"l" 5 1237 "1" 1000 "5" "a" 7 1238 "2" 1000 "4" ` +
			`1 2 "a" "1" "a" "2" 2 1 "b" "0.5"`},
		// mode ("1": field a repeats), m, k (the lane, 2 hashes, their 2
		// previous windows, then the keyed keys), d, TTLs, keyed diffs,
		// then runs in batch order: h, previous window's h, n, n (field,
		// value).
		{true, `"00000000000000000007" 86400000 53 "1" 2 10 5 5000 "0" 5000 "0" ` +
			`"b" 5 1234 "2" 1000 "3" "b" 6 1235 "0.5" 60000 "0.25" "b" 5 1236 "1" 1000 "3" ` +
			`"l" 7 1237 "1" 1000 "5" "a" 9 1238 "2" 1000 "4" ` +
			`1 3 1 "a" "1" 2 4 1 "b" "0.5" 1 3 1 "a" "2"`},
	} {
		ba := newBatchArgs(strategy.Batch{Diffs: diffs, Buckets: buckets})
		gs := s.groups(diffs, buckets, c.count)
		if len(gs) != 1 {
			t.Fatalf("%d groups, want 1", len(gs))
		}
		s.encodePush(gs[0], "n", seq, ba, c.count, time.Now().UnixMilli())
		if got := show(gs[0].args); got != c.want {
			t.Errorf("push, count %v:\n got  %s\n want %s", c.count, got, c.want)
		}
	}

	now := old.Add(90 * time.Second) // 30 s into the minute window; TTLs to 2 windows after each start, plus the margin
	checks := []strategy.Check{
		{Namespace: "ns", Key: "a", Cost: 1, Now: now, Limits: []strategy.CheckLimit{
			{Kind: 4, WindowSize: time.Second, Limit: 3, Burst: 5},
			{WindowSize: time.Minute, Limit: 10},
			{WindowSize: time.Second, Limit: 2, Fixed: true},
			{WindowSize: 3 * time.Second, Limit: 4, Precision: time.Second}, // the fixed limit's current window, and 3 before it
			{Kind: strategy.KindLog, WindowSize: time.Second, Limit: 6},
			{Kind: strategy.KindAnchored, WindowSize: time.Minute, Limit: 7},
		}},
		{Namespace: "ns", Key: "b", Cost: 0.5, Now: now, Limits: []strategy.CheckLimit{{WindowSize: time.Minute, Limit: 10}}},
	}
	cc := s.encodeChecks("n", 7, checks)
	if len(cc.gs) != 1 {
		t.Fatalf("%d groups, want 1", len(cc.gs))
	}
	// The windows of the call: 6, each with its TTL (0 for the windows no
	// check counts in; the 1 s window the longest of its limits': until 3
	// s after its end, and "1": the precision limit reads it over 3 s);
	// the plans: 2, their numbers (shown here decoded, in brackets), each
	// plan's: cost, now, L, B, then L window limits: d, the numbers of its
	// d windows (current first), size, elapsed or -1 (fixed), limit; then
	// B keyed limits: type (1 bucket, 2 anchored, 3 log), window, limit
	// (rate), a bucket's burst or 0; then each plan's strings: cost, its
	// keyed limits' limits. Then the groups' heads: 'g' (general: a check
	// has several limits), 2 checks, 10 keys (6 hashes, 1 bucket, a log's
	// entries and sum, an anchored window); the checks' plans; then each
	// check: field, the key number of each keyed limit.
	args := slices.Clone(cc.args)
	at := 3 + 2*len(cc.wins) + 1
	blob := args[at].(string)
	nums := make([]string, len(blob)/8)
	for k := range nums {
		nums[k] = fmt.Sprint(math.Float64frombits(binary.BigEndian.Uint64([]byte(blob[8*k:]))))
	}
	args[at] = "[" + strings.Join(nums, " ") + "]"
	want := `"00000000000000000007" 86400000 6 95000 "0" 0 "0" 9000 "1" 0 "0" 0 "0" 0 "0" ` +
		`2 "[1 90000 3 3 2 1 2 60000 30000 10 2 3 4 1000 -1 2 4 3 4 5 6 1000 0 4 ` +
		`1 1000 3 5 3 1000 6 0 2 60000 7 0 ` +
		`0.5 90000 1 0 2 1 2 60000 30000 10]" ` +
		`"1" "3" "6" "7" "0.5" ` +
		`"g\x00\x02\x00\n" "\x01\x02" ` +
		`"a" 7 8 10 "b"`
	if got := show(args); got != want {
		t.Errorf("check:\n got  %s\n want %s", got, want)
	}
}
