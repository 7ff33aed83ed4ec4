package redis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/arith"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesync/ratesync/internal/testenv"
	"github.com/ratesync/ratesync/strategy"
)

var base = time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC)

// calls returns the commands Redis ran during run, from INFO
// commandstats (reset first), with "increments" for HINCRBY and
// HINCRBYFLOAT together.
func calls(t *testing.T, c *goredis.Client, run func() error) map[string]int {
	t.Helper()
	ctx := context.Background()
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := run(); err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	got := make(map[string]int)
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		n, _, _ := strings.Cut(rest, ",")
		got[strings.TrimPrefix(name, "cmdstat_")], _ = strconv.Atoi(n)
	}
	delete(got, "info")
	delete(got, "config|resetstat")
	got["increments"] = got["hincrby"] + got["hincrbyfloat"]
	return got
}

// CommandCalls is calls, for the package's external tests.
var CommandCalls = calls

// On a client of one server, the groups of a synchronous batch run in one
// script: a check call by the one lane record of its first group, a push
// by each group's own.
func TestGroupsShareAScript(t *testing.T) {
	r := testenv.PrivateRedis(t)
	c := r.Client(t)
	s, err := New(c, Config{Prefix: r.Prefix})
	if err != nil {
		t.Fatal(err)
	}
	if !s.merge.Load() {
		t.Fatal("merge off for a standalone client")
	}
	ctx := context.Background()
	size := time.Minute
	start := arith.WindowStart(base, size)
	const n = 64
	shards := map[int]bool{}
	checksOf := map[int]int{} // checks per shard
	var checks []strategy.Check
	var diffs []strategy.Diff
	for i := range n {
		key := fmt.Sprintf("k%d", i%48) // 16 keys twice: groups of both kinds
		shards[shardOf(key, s.cfg.Shards)] = true
		checksOf[shardOf(key, s.cfg.Shards)]++
		checks = append(checks, strategy.Check{Namespace: "ns", Key: key, Cost: 1, Now: base, Limits: []strategy.CheckLimit{{WindowSize: size, Limit: 1e9}}})
		diffs = append(diffs, strategy.Diff{Namespace: "ns", Key: key, WindowStart: start, WindowSize: size, Value: 1})
	}
	g, reads, writes, small := len(shards), 0, 0, 0
	for _, c := range checksOf {
		if c <= fastMax {
			reads, writes, small = reads+c, writes+c, small+1
		} else {
			reads, writes = reads+2, writes+1
		}
	}
	if small == 0 || small == g {
		t.Fatalf("%d groups of up to %d checks among %d: want groups of both kinds", small, fastMax, g)
	}
	got := calls(t, c, func() error { _, err := s.CheckAndCount(ctx, "n", 1, checks); return err })
	// A group of up to fastMax checks (the fast loop's) counts each check
	// first (HINCRBY) and reads its field in the previous window (HGET); a
	// larger group reads its two windows (HMGET) and writes the current one
	// (HSET). Every field is new, so each counted hash gets its TTL, once.
	got["reads"], got["writes"] = got["hget"]+got["hmget"], got["hset"]+got["increments"]
	for k, want := range map[string]int{"evalsha": 1, "get": 1, "set": 1, "pttl": g, "pexpire": g, "reads": reads, "writes": writes} {
		if got[k] != want {
			t.Errorf("check: %s: %d calls, want %d (all: %v)", k, got[k], want, got)
		}
	}
	got = calls(t, c, func() error {
		_, err := s.PushAndCount(ctx, strategy.Batch{Node: "n", Seq: 2, Diffs: diffs})
		return err
	})
	// Every field is there already: the hashes have their TTLs.
	for k, want := range map[string]int{"evalsha": 1, "get": g, "set": g, "pttl": 0, "pexpire": 0, "hget": 48, "increments": 48 + 16} {
		if got[k] != want {
			t.Errorf("push and count: %s: %d calls, want %d (all: %v)", k, got[k], want, got)
		}
	}
	// A replay applies no group again.
	res, err := s.CheckAndCount(ctx, "n", 2, checks)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		want := 4.0
		if i%48 >= 16 {
			want = 2
		}
		if r.Allowed || r.Totals[0].Current != want {
			t.Fatalf("replayed check %d: %+v, want not allowed, current %v", i, r, want)
		}
	}
	// Past mergeMax decisions, more scripts.
	var many []strategy.Check
	for i := range 2*mergeMax + 1 {
		many = append(many, strategy.Check{Namespace: "ns", Key: fmt.Sprintf("m%d", i), Cost: 1, Now: base, Limits: []strategy.CheckLimit{{WindowSize: size, Limit: 1e9}}})
	}
	got = calls(t, c, func() error { _, err := s.CheckAndCount(ctx, "n", 3, many); return err })
	if got["evalsha"] < 3 || got["evalsha"] > s.cfg.Shards {
		t.Errorf("%d checks: %d scripts, want 3 to %d", len(many), got["evalsha"], s.cfg.Shards)
	}
}

// A server that refuses scripts on keys of several slots (here a Cluster
// node reached by a plain client) turns merging off: the groups go one per
// script, and count once.
func TestCrossSlotTurnsMergingOff(t *testing.T) {
	cl := testenv.RedisCluster(t)
	c := goredis.NewClient(&goredis.Options{Addr: cl.Addrs[0]})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	here := func(key string) bool { // the slot of key is served by this node, not MOVED
		err := c.Exists(ctx, key).Err()
		if err != nil && !goredis.HasErrorPrefix(err, "MOVED") {
			t.Fatal(err)
		}
		return err == nil
	}
	var prefix string
	for prefix == "" || !here(prefix+":layout") {
		prefix = testenv.Name("t")
	}
	s, err := New(c, Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	seen := map[int]bool{}
	for i := 0; len(keys) < 3; i++ {
		key := fmt.Sprintf("k%d", i)
		sh := shardOf(key, s.cfg.Shards)
		if !seen[sh] && here(s.tag("ns", sh)) {
			seen[sh] = true
			keys = append(keys, key)
		}
	}
	size := time.Minute
	var checks []strategy.Check
	for _, k := range keys {
		checks = append(checks, strategy.Check{Namespace: "ns", Key: k, Cost: 1, Now: base, Limits: []strategy.CheckLimit{{WindowSize: size, Limit: 10}}})
	}
	for seq := uint64(1); seq <= 2; seq++ {
		res, err := s.CheckAndCount(ctx, "n", seq, checks)
		if err != nil {
			t.Fatalf("CheckAndCount %d: %v", seq, err)
		}
		for i, r := range res {
			if !r.Allowed || r.Totals[0].Current != float64(seq) {
				t.Fatalf("CheckAndCount %d: check %d: %+v, want allowed, current %d", seq, i, r, seq)
			}
		}
		if s.merge.Load() {
			t.Fatal("merging still on after CROSSSLOT")
		}
	}
}
