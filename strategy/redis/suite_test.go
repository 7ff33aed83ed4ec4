package redis_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ratesync/ratesync/internal/arith"

	"testing"

	"github.com/ratesync/ratesync/internal/strategytest"
	"github.com/ratesync/ratesync/internal/testenv"
	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/redis"
)

// The contract suite against a standalone server, each case under its own
// prefix.
func TestContract(t *testing.T) {
	strategytest.Run(t, func(t *testing.T) strategy.Strategy {
		s, _ := newStore(t, redis.Config{})
		return s
	})
}

// The suite again with one shard and tiny pages: whole-namespace reads page
// through HSCAN, HMGETs are chunked, every diff shares one script.
func TestContractSmallPages(t *testing.T) {
	strategytest.Run(t, func(t *testing.T) strategy.Strategy {
		s, _ := newStore(t, redis.Config{Shards: 1, ScanThreshold: 10, FieldsPerCommand: 7})
		return s
	})
}

// The suite against a Redis Cluster: every script stays in one slot, and
// pipelines split per node.
func TestContractCluster(t *testing.T) {
	cl := testenv.RedisCluster(t)
	c := cl.Client(t)
	strategytest.Run(t, func(t *testing.T) strategy.Strategy {
		return storeOn(t, c, testenv.Name("t"), redis.Config{})
	})
	t.Run("NOSCRIPT on every node", func(t *testing.T) {
		s := storeOn(t, c, testenv.Name("t"), redis.Config{})
		ctx := context.Background()
		start := arith.WindowStart(base, time.Minute)
		var diffs []strategy.Diff
		for i := range 200 {
			diffs = append(diffs, diff("ns", fmt.Sprintf("k%d", i), start, time.Minute, 1))
		}
		if err := c.ScriptFlush(ctx).Err(); err != nil { // on every node
			t.Fatal(err)
		}
		mustPush(t, s, strategy.Batch{Node: "n", Seq: 1, Diffs: diffs})
		mustPush(t, s, strategy.Batch{Node: "n", Seq: 1, Diffs: diffs})
		n := 0
		for c, err := range s.GetCounters(ctx, strategy.Query{Namespace: "ns", WindowSizes: []time.Duration{time.Minute}, Now: base}) {
			if err != nil || c.Count != 1 {
				t.Fatalf("counter %+v, %v: want count 1", c, err)
			}
			n++
		}
		if n != len(diffs) {
			t.Fatalf("%d counters, want %d", n, len(diffs))
		}
	})
}

// The suite through a Sentinel failover client.
func TestContractSentinel(t *testing.T) {
	sn := testenv.RedisSentinel(t)
	c := sn.Client(t)
	strategytest.Run(t, func(t *testing.T) strategy.Strategy {
		return storeOn(t, c, testenv.Name("t"), redis.Config{})
	})
}
