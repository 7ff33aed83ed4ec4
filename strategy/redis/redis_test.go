package redis_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/arith"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesync/ratesync/internal/testenv"
	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/redis"
)

func TestNewRejectsBadConfig(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"}) // never dialed: validation comes first
	t.Cleanup(func() { _ = c.Close() })
	for _, tc := range []struct {
		name string
		cfg  redis.Config
		want string
	}{
		{"brace in prefix", redis.Config{Prefix: "a{b"}, `redis: Config.Prefix = "a{b": must not contain '{' or '}'`},
		{"negative shards", redis.Config{Shards: -1}, "redis: Config.Shards = -1: must be 0 (default 16) or 1 to 1024"},
		{"too many shards", redis.Config{Shards: 5000}, "redis: Config.Shards = 5000: must be 0 (default 16) or 1 to 1024"},
		{"sub-millisecond margin", redis.Config{TTLMargin: time.Microsecond}, "redis: Config.TTLMargin = 1µs: must be 0 (default 5s) or at least 1ms"},
		{"short lane TTL", redis.Config{LaneTTL: time.Millisecond}, "redis: Config.LaneTTL = 1ms: must be 0 (default 24h) or at least 1s"},
		{"negative timeout", redis.Config{Timeout: -time.Second}, "redis: Config.Timeout = -1s: must be 0 (default 5s) or positive"},
		{"negative scan threshold", redis.Config{ScanThreshold: -1}, "redis: Config.ScanThreshold = -1: must be 0 (default 1000) or positive"},
		{"negative fields per command", redis.Config{FieldsPerCommand: -1}, "redis: Config.FieldsPerCommand = -1: must be 0 (default 1000) or positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := redis.New(c, tc.cfg)
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("New(%+v) = %v, want an error starting %q", tc.cfg, err, tc.want)
			}
		})
	}
	if _, err := redis.New(nil, redis.Config{}); err == nil || !strings.HasPrefix(err.Error(), "redis: client = nil") {
		t.Fatalf("New(nil) = %v, want a nil client error", err)
	}
}

func TestNewRefusesAnotherShardCount(t *testing.T) {
	r := testenv.NewRedis(t)
	c := r.Client(t)
	storeOn(t, c, r.Prefix, redis.Config{Shards: 16})
	if _, err := redis.New(c, redis.Config{Prefix: r.Prefix, Shards: 16}); err != nil {
		t.Fatalf("New with the same Shards: %v", err)
	}
	_, err := redis.New(c, redis.Config{Prefix: r.Prefix, Shards: 8})
	if err == nil || !strings.Contains(err.Error(), "Config.Shards = 8") || !strings.Contains(err.Error(), `"v1 shards=16"`) {
		t.Fatalf("New with other Shards = %v, want an error naming Config.Shards and the recorded layout", err)
	}
}

func TestInvalidInputIsRejected(t *testing.T) {
	s, _ := newStore(t, redis.Config{})
	ctx := context.Background()
	start := arith.WindowStart(base, time.Minute)
	for _, tc := range []struct {
		name string
		d    strategy.Diff
		want string
	}{
		{"NaN", diff("ns", "k", start, time.Minute, math.NaN()), `redis: batch 1 of node "n": diff 1 (key "k"): Value = NaN: must be finite`},
		{"Inf", diff("ns", "k", start, time.Minute, math.Inf(-1)), "Value = -Inf: must be finite"},
		{"zero size", diff("ns", "k", start, 0, 1), "window size 0s: must be > 0 and whole milliseconds"},
		{"sub-ms size", diff("ns", "k", start, 1500*time.Microsecond, 1), "window size 1.5ms: must be > 0 and whole milliseconds"},
		{"long key is cut", diff("ns", strings.Repeat("x", 1024), start, -time.Second, 1), "(1024 bytes)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := strategy.Batch{Node: "n", Seq: 1, Diffs: []strategy.Diff{diff("ns", "ok", start, time.Minute, 1), tc.d}}
			err := s.PushDiffs(ctx, b)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("PushDiffs = %v, want an error containing %q", err, tc.want)
			}
			if _, err := s.PushAndCount(ctx, b); err == nil {
				t.Fatal("PushAndCount: no error")
			}
		})
	}
	check := func(cost float64, l strategy.CheckLimit) []strategy.Check {
		return []strategy.Check{{Namespace: "ns", Key: "k", Cost: cost, Now: base, Limits: []strategy.CheckLimit{l}}}
	}
	for _, tc := range []struct {
		name   string
		checks []strategy.Check
		want   string
	}{
		{"negative cost", check(-1, strategy.CheckLimit{WindowSize: time.Second, Limit: 1}), `redis: check 0 (key "k"): Cost = -1: must be >= 0`},
		{"NaN cost", check(math.NaN(), strategy.CheckLimit{WindowSize: time.Second, Limit: 1}), "Cost = NaN: must be finite"},
		{"infinite limit", check(1, strategy.CheckLimit{WindowSize: time.Second, Limit: math.Inf(1)}), "limit 0: Limit = +Inf: must be finite"},
		{"bad size", check(1, strategy.CheckLimit{WindowSize: time.Nanosecond, Limit: 1}), "limit 0: window size 1ns"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.CheckAndCount(ctx, "n", 1, tc.checks)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CheckAndCount = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if _, err := s.GetWindow(ctx, "ns", "k", start, -time.Minute); err == nil {
		t.Error("GetWindow with a negative size: no error")
	}
	for _, err := range s.GetCounters(ctx, strategy.Query{Namespace: "ns", WindowSizes: []time.Duration{0}, Now: base}) {
		if err == nil {
			t.Error("GetCounters with a zero size yielded no error")
		}
	}
	if got := count(t, s, "ns", "k", start, time.Minute); got != 0 {
		t.Fatalf("count = %v after rejected pushes, want 0", got)
	}
}

// Seqs past 2^53, where doubles can no longer tell neighbours apart, compare
// exactly.
func TestSeqComparesExactlyPast2To53(t *testing.T) {
	s, _ := newStore(t, redis.Config{})
	start := arith.WindowStart(base, time.Minute)
	b := func(seq uint64, v float64) strategy.Batch {
		return strategy.Batch{Node: "n", Seq: seq, Diffs: []strategy.Diff{diff("ns", "k", start, time.Minute, v)}}
	}
	const p = uint64(1) << 53
	mustPush(t, s, b(p+1, 1))
	mustPush(t, s, b(p, 10))   // older, though float64(p) == float64(p+1)
	mustPush(t, s, b(p+1, 10)) // replay
	mustPush(t, s, b(p+2, 100))
	mustPush(t, s, b(math.MaxUint64-1, 1000))
	mustPush(t, s, b(math.MaxUint64-2, 10000)) // older
	mustPush(t, s, b(math.MaxUint64, 100000))
	mustPush(t, s, b(math.MaxUint64, 1000000)) // replay
	if got := count(t, s, "ns", "k", start, time.Minute); got != 101101 {
		t.Fatalf("count = %v, want 101101 (seqs p+1, p+2, max-1, max once each)", got)
	}
}

// Namespaces with braces, '%' and ':' keep to their own keys and slots.
func TestNamespacesDoNotCollide(t *testing.T) {
	s, _ := newStore(t, redis.Config{Shards: 2})
	start := arith.WindowStart(base, time.Minute)
	names := []string{"a", "a}", "{a", "{a}", "a%7D", "a%", "a:1", "a:1:2", "}", ""}
	var diffs []strategy.Diff
	for i, ns := range names {
		diffs = append(diffs, diff(ns, "k", start, time.Minute, float64(i+1)))
	}
	mustPush(t, s, strategy.Batch{Node: "n", Seq: 1, Diffs: diffs})
	for i, ns := range names {
		if got := count(t, s, ns, "k", start, time.Minute); got != float64(i+1) {
			t.Errorf("namespace %q: count = %v, want %d", ns, got, i+1)
		}
		n := 0
		for c, err := range s.GetCounters(context.Background(), strategy.Query{Namespace: ns, WindowSizes: []time.Duration{time.Minute}, Now: base}) {
			if err != nil {
				t.Fatal(err)
			}
			if n++; c.Count != float64(i+1) {
				t.Errorf("namespace %q: GetCounters count = %v, want %d", ns, c.Count, i+1)
			}
		}
		if n != 1 {
			t.Errorf("namespace %q: GetCounters yielded %d counters, want 1", ns, n)
		}
	}
}

// The keys a push writes: one hash per shard a window's keys fall in, with
// a TTL of two windows plus the margin, and one lane record per shard with
// LaneTTL.
func TestKeysAndExpiry(t *testing.T) {
	r := testenv.NewRedis(t)
	c := r.Client(t)
	s := storeOn(t, c, r.Prefix, redis.Config{Shards: 4, TTLMargin: 7 * time.Second, LaneTTL: time.Hour})
	ctx := context.Background()
	now := time.Now()
	size := time.Minute
	start := arith.WindowStart(now, size)
	var diffs []strategy.Diff
	for i := range 200 {
		diffs = append(diffs, diff("api", fmt.Sprintf("user:%d", i), start, size, 1))
	}
	mustPush(t, s, strategy.Batch{Node: "api|node-a", Seq: 7, Diffs: diffs})

	prefix := r.Prefix
	hashes := scanKeys(t, c, "{"+prefix+":api:*}:60000:*")
	if len(hashes) != 4 {
		t.Fatalf("hashes %q: want one per shard (4)", hashes)
	}
	fields := 0
	for _, h := range hashes {
		n, err := c.HLen(ctx, h).Result()
		if err != nil {
			t.Fatal(err)
		}
		fields += int(n)
		ttl, err := c.PTTL(ctx, h).Result()
		if err != nil {
			t.Fatal(err)
		}
		want := time.Until(start.Add(2*size + 7*time.Second))
		if ttl < want-5*time.Second || ttl > want+time.Second {
			t.Errorf("hash %s: TTL %v, want about %v (window start + 2 sizes + margin)", h, ttl, want)
		}
	}
	if fields != 200 {
		t.Errorf("hashes hold %d fields, want 200", fields)
	}
	lanes := scanKeys(t, c, "{"+prefix+":api:*}:lane:api|node-a")
	if len(lanes) != 4 {
		t.Fatalf("lane records %q: want one per shard", lanes)
	}
	for _, l := range lanes {
		v, err := c.Get(ctx, l).Result()
		if err != nil || v != "00000000000000000007" {
			t.Errorf("lane record %s = %q, %v; want seq 7 as 20 digits", l, v, err)
		}
		if ttl := c.PTTL(ctx, l).Val(); ttl < 59*time.Minute || ttl > time.Hour {
			t.Errorf("lane record %s: TTL %v, want about LaneTTL (1h)", l, ttl)
		}
	}
}

func scanKeys(t *testing.T, c *goredis.Client, match string) []string {
	t.Helper()
	var keys []string
	it := c.Scan(context.Background(), 0, match, 1000).Iterator()
	for it.Next(context.Background()) {
		keys = append(keys, it.Val())
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	return keys
}

// A batch across every shard is one round trip; so is a keyed read.
func TestOneRoundTripPerCall(t *testing.T) {
	s, c := newStore(t, redis.Config{})
	ops := countOps(t, c)
	start := arith.WindowStart(base, time.Minute)
	var diffs []strategy.Diff
	var keys []string
	for i := range 500 {
		k := fmt.Sprintf("key-%d", i)
		keys = append(keys, k)
		diffs = append(diffs, diff("ns", k, start, time.Minute, 1), diff("ns", k, start.Add(-time.Minute), time.Minute, 2))
	}
	ops.n.Store(0)
	mustPush(t, s, strategy.Batch{Node: "n", Seq: 1, Diffs: diffs})
	if n := ops.n.Load(); n != 1 {
		t.Errorf("PushDiffs of 1000 diffs over 16 shards: %d round trips, want 1", n)
	}
	ops.n.Store(0)
	if _, err := s.PushAndCount(context.Background(), strategy.Batch{Node: "n", Seq: 2, Diffs: diffs}); err != nil {
		t.Fatal(err)
	}
	if n := ops.n.Load(); n != 1 {
		t.Errorf("PushAndCount: %d round trips, want 1", n)
	}
	ops.n.Store(0)
	got := 0
	for _, err := range s.GetCounters(context.Background(), strategy.Query{Namespace: "ns", WindowSizes: []time.Duration{time.Minute}, Now: base, Keys: keys}) {
		if err != nil {
			t.Fatal(err)
		}
		got++
	}
	if n := ops.n.Load(); got != 1000 || n != 1 {
		t.Errorf("GetCounters with Keys: %d counters in %d round trips, want 1000 in 1", got, n)
	}
}

// Breaking out of GetCounters sends no further command.
func TestGetCountersStopsWhenYieldReturnsFalse(t *testing.T) {
	s, c := newStore(t, redis.Config{Shards: 1, ScanThreshold: 10, FieldsPerCommand: 10})
	start := arith.WindowStart(base, time.Minute)
	var diffs []strategy.Diff
	for i := range 1000 {
		diffs = append(diffs, diff("ns", fmt.Sprintf("key-%d", i), start, time.Minute, 1))
	}
	mustPush(t, s, strategy.Batch{Node: "n", Seq: 1, Diffs: diffs})
	ops := countOps(t, c)
	n := 0
	for _, err := range s.GetCounters(context.Background(), strategy.Query{Namespace: "ns", WindowSizes: []time.Duration{time.Minute}, Now: base}) {
		if err != nil {
			t.Fatal(err)
		}
		if n++; n == 3 {
			break
		}
	}
	if got := ops.n.Load(); got != 2 {
		t.Fatalf("%d round trips for 3 counters of a big hash, want 2 (HLEN, first HSCAN page)", got)
	}
}

// A script cache emptied (SCRIPT FLUSH, as after a restart or failover) is
// refilled on NOSCRIPT and the push is sent again: nothing lost, nothing
// counted twice. (A private server: SCRIPT FLUSH would disturb other users
// of a shared one.)
func TestNoScriptIsRecovered(t *testing.T) {
	r := testenv.PrivateRedis(t)
	c := r.Client(t)
	s := storeOn(t, c, r.Prefix, redis.Config{})
	ctx := context.Background()
	start := arith.WindowStart(base, time.Minute)
	var diffs []strategy.Diff
	for i := range 100 {
		diffs = append(diffs, diff("ns", fmt.Sprintf("k%d", i), start, time.Minute, 1))
	}
	flush := func() {
		t.Helper()
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	mustPush(t, s, strategy.Batch{Node: "n", Seq: 1, Diffs: diffs})
	flush()
	mustPush(t, s, strategy.Batch{Node: "n", Seq: 2, Diffs: diffs})
	mustPush(t, s, strategy.Batch{Node: "n", Seq: 2, Diffs: diffs}) // replay
	flush()
	totals, err := s.PushAndCount(ctx, strategy.Batch{Node: "n", Seq: 3, Diffs: diffs[:1]})
	if err != nil || len(totals) != 1 || totals[0].Current != 3 {
		t.Fatalf("PushAndCount after SCRIPT FLUSH = %+v, %v; want current 3", totals, err)
	}
	flush()
	res, err := s.CheckAndCount(ctx, "n", 4, []strategy.Check{{Namespace: "ns", Key: "k1", Cost: 1, Now: base, Limits: []strategy.CheckLimit{{WindowSize: time.Minute, Limit: 10}}}})
	if err != nil || !res[0].Allowed || res[0].Totals[0].Current != 3 {
		t.Fatalf("CheckAndCount after SCRIPT FLUSH = %+v, %v; want allowed, current 3", res, err)
	}
	for i := range 100 {
		want := 2.0
		if i <= 1 {
			want = 3
		}
		if got := count(t, s, "ns", fmt.Sprintf("k%d", i), start, time.Minute); got != want {
			t.Fatalf("k%d = %v, want %v", i, got, want)
		}
	}
}

// A check's totals and decision use the node's Now and the sliding weight
// at millisecond resolution, like the memory store.
func TestCheckUsesTheNodesClock(t *testing.T) {
	s, _ := newStore(t, redis.Config{})
	ctx := context.Background()
	size := 10 * time.Second
	cur := arith.WindowStart(base, size)
	mustPush(t, s, strategy.Batch{Node: "seed", Seq: 1, Diffs: []strategy.Diff{diff("ns", "k", cur.Add(-size), size, 10)}})
	for i, tc := range []struct {
		at      time.Duration // into the current window
		cost    float64
		allowed bool
	}{
		{1 * time.Millisecond, 1, false},    // 10 * 0.9999 + 0 + 1 > 10
		{1000 * time.Millisecond, 1, true},  // 10 * 0.9 + 0 + 1 <= 10
		{1001 * time.Millisecond, 1, false}, // 10 * 0.8999 + 1 + 1 > 10
		{5000 * time.Millisecond, 4, true},  // 10 * 0.5 + 1 + 4 <= 10
	} {
		res, err := s.CheckAndCount(ctx, "n", uint64(i+1), []strategy.Check{{Namespace: "ns", Key: "k", Cost: tc.cost, Now: cur.Add(tc.at), Limits: []strategy.CheckLimit{{WindowSize: size, Limit: 10}}}})
		if err != nil {
			t.Fatal(err)
		}
		if res[0].Allowed != tc.allowed || res[0].Totals[0].Previous != 10 {
			t.Errorf("check %d at +%v: %+v, want allowed %v, previous 10", i, tc.at, res[0], tc.allowed)
		}
	}
	if got := count(t, s, "ns", "k", cur, size); got != 5 {
		t.Fatalf("count = %v, want 5", got)
	}
}

// A Redis that cannot be reached does not stop New: the store works once
// the server is back, loading its scripts on first use.
func TestNewWhileRedisIsDown(t *testing.T) {
	r := testenv.PrivateRedis(t)
	c := r.Client(t)
	r.Stop(t)
	s, err := redis.New(c, redis.Config{Prefix: r.Prefix, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("New while Redis is down: %v", err)
	}
	start := arith.WindowStart(base, time.Minute)
	b := strategy.Batch{Node: "n", Seq: 1, Diffs: []strategy.Diff{diff("ns", "k", start, time.Minute, 1)}}
	if err := s.PushDiffs(context.Background(), b); err == nil {
		t.Fatal("PushDiffs while Redis is down: no error")
	}
	r.Start(t)
	mustPush(t, s, b)
	if got := count(t, s, "ns", "k", start, time.Minute); got != 1 {
		t.Fatalf("count = %v, want 1", got)
	}
}

// A stalled server does not hold callers past their context or
// Config.Timeout; a push abandoned so lands later, and its retry counts
// nothing again.
func TestCallsEndWithTheirContext(t *testing.T) {
	r := testenv.PrivateRedis(t)
	c := r.Client(t) // default options: the client does not watch contexts
	s := storeOn(t, c, r.Prefix, redis.Config{Timeout: 300 * time.Millisecond})
	start := arith.WindowStart(base, time.Minute)
	b := strategy.Batch{Node: "n", Seq: 1, Diffs: []strategy.Diff{diff("ns", "k", start, time.Minute, 1)}}
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	r.Pause(t)
	t.Cleanup(func() { r.Resume(t) })

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	err := s.PushDiffs(ctx, b)
	if err != context.DeadlineExceeded || time.Since(t0) > 2*time.Second {
		t.Fatalf("PushDiffs on a paused server = %v after %v, want context.DeadlineExceeded unchanged, promptly", err, time.Since(t0))
	}
	t0 = time.Now()
	_, err = s.GetWindow(context.Background(), "ns", "k", start, time.Minute)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "Config.Timeout 300ms") || time.Since(t0) > 2*time.Second {
		t.Fatalf("GetWindow without a deadline = %v after %v, want the Timeout's deadline error", err, time.Since(t0))
	}
	for _, err := range s.GetCounters(ctx, strategy.Query{Namespace: "ns", WindowSizes: []time.Duration{time.Minute}, Now: base}) {
		if err != context.DeadlineExceeded {
			t.Fatalf("GetCounters with an expired context yielded %v, want context.DeadlineExceeded", err)
		}
	}

	r.Resume(t)
	eventually(t, 20*time.Second, func() string { return "the abandoned push never landed" }, func() bool {
		v, err := s.GetWindow(context.Background(), "ns", "k", start, time.Minute)
		return err == nil && v == 1
	})
	mustPush(t, s, b) // the syncer's retry
	if got := count(t, s, "ns", "k", start, time.Minute); got != 1 {
		t.Fatalf("count = %v after the retry, want 1", got)
	}
}

// An increment Redis refuses (here a field overwritten with text) fails the
// push, but the rest of its shard group is applied and the seq recorded, as
// Redis cannot undo a script's writes: the retry counts nothing twice.
func TestFailedIncrementKeepsTheBatchOnce(t *testing.T) {
	r := testenv.NewRedis(t)
	c := r.Client(t)
	s := storeOn(t, c, r.Prefix, redis.Config{Shards: 1})
	ctx := context.Background()
	start := arith.WindowStart(base, time.Minute)
	mustPush(t, s, strategy.Batch{Node: "n", Seq: 1, Diffs: []strategy.Diff{diff("ns", "bad", start, time.Minute, 1)}})
	hashes := scanKeys(t, c, "{"+r.Prefix+":ns:0}:60000:*")
	if len(hashes) != 1 {
		t.Fatalf("hashes %q, want 1", hashes)
	}
	if err := c.HSet(ctx, hashes[0], "bad", "not a number").Err(); err != nil {
		t.Fatal(err)
	}
	b := strategy.Batch{Node: "n", Seq: 2, Diffs: []strategy.Diff{
		diff("ns", "a", start, time.Minute, 1), diff("ns", "bad", start, time.Minute, 1), diff("ns", "b", start, time.Minute, 1),
	}}
	err := s.PushDiffs(ctx, b)
	if err == nil || !strings.Contains(err.Error(), "RATESYNC write failed") {
		t.Fatalf("PushDiffs = %v, want the failed increment reported", err)
	}
	mustPush(t, s, b) // the retry: already applied
	for _, k := range []string{"a", "b"} {
		if got := count(t, s, "ns", k, start, time.Minute); got != 1 {
			t.Errorf("%s = %v, want 1", k, got)
		}
	}
}
