package testenv

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of three masters, without replicas, started
// for one test; each node's cluster bus listens on its port + 10000. Its
// fields are read-only.
type Cluster struct {
	Addrs []string // host:port of each master
}

// RedisCluster starts a Redis Cluster of three masters from the local
// redis-server binary for t alone, with all 16384 slots assigned, and
// returns once every node reports cluster_state:ok. The nodes are stopped
// when t ends. It skips t (or fails it under RATESYNC_REQUIRE_SERVERS=1)
// when there is no binary.
func RedisCluster(t testing.TB) *Cluster {
	t.Helper()
	bin := redisBinary(t)
	c := &Cluster{}
	for range 3 {
		srv, err := newRedisServer(bin, "cluster", 10000, func(root string, port int) ([]string, error) {
			args, _ := redisArgs(root, port)
			return append(args,
				"--cluster-enabled", "yes",
				"--cluster-config-file", filepath.Join(root, "nodes.conf"),
				"--cluster-node-timeout", "2000",
			), nil
		})
		if err != nil {
			t.Fatalf("testenv: Redis Cluster node: %v", err)
		}
		srv.closeAtCleanup(t)
		c.Addrs = append(c.Addrs, srv.addr)
	}
	if err := formCluster(c.Addrs); err != nil {
		t.Fatalf("testenv: Redis Cluster on %v: %v", c.Addrs, err)
	}
	return c
}

// Client returns a cluster client of c, closed when the test ends.
func (c *Cluster) Client(t testing.TB) *goredis.ClusterClient {
	t.Helper()
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: c.Addrs})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// formCluster splits the slots between the nodes at addrs, introduces them
// to each other and waits until all agree the cluster is up.
func formCluster(addrs []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clients := make([]*goredis.Client, len(addrs))
	for i, a := range addrs {
		clients[i] = goredis.NewClient(&goredis.Options{Addr: a, MaxRetries: -1})
		defer clients[i].Close()
	}
	const slots = 16384
	for i, cl := range clients {
		lo, hi := i*slots/len(addrs), (i+1)*slots/len(addrs)-1
		if err := cl.ClusterAddSlotsRange(ctx, lo, hi).Err(); err != nil {
			return fmt.Errorf("CLUSTER ADDSLOTS %d-%d on %s: %w", lo, hi, addrs[i], err)
		}
	}
	for _, a := range addrs[1:] {
		host, port, _ := strings.Cut(a, ":")
		if err := clients[0].ClusterMeet(ctx, host, port).Err(); err != nil {
			return fmt.Errorf("CLUSTER MEET %s from %s: %w", a, addrs[0], err)
		}
	}
	return pollUntil(30*time.Second, func(ctx context.Context) error {
		for i, cl := range clients {
			info, err := cl.ClusterInfo(ctx).Result()
			if err != nil {
				return fmt.Errorf("CLUSTER INFO on %s: %w", addrs[i], err)
			}
			for _, want := range []string{"cluster_state:ok", "cluster_slots_assigned:" + strconv.Itoa(slots), "cluster_known_nodes:" + strconv.Itoa(len(addrs))} {
				if !strings.Contains(info, want) {
					return errors.New("not formed yet: " + addrs[i] + " lacks " + want)
				}
			}
		}
		return nil
	})
}
