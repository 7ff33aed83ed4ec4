package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Sentinel is a Redis master watched by one Redis Sentinel, started for one
// test: what goredis.NewFailoverClient needs.
type Sentinel struct {
	masterName string   // the name the sentinel knows the master by
	addrs      []string // host:port of the sentinels
}

// RedisSentinel starts a Redis master and a sentinel that monitors it
// (quorum 1, down after one second) from the local redis-server binary for
// t alone, and returns once the sentinel knows the master. Both are stopped
// when t ends. It skips t (or fails it under RATESYNC_REQUIRE_SERVERS=1)
// when there is no binary. There is no replica, so no failover.
func RedisSentinel(t testing.TB) *Sentinel {
	t.Helper()
	master := PrivateRedis(t)
	s := &Sentinel{masterName: "ratesync"}
	bin := redisBinary(t)
	srv, err := newRedisServer(bin, "sentinel", 0, func(root string, port int) ([]string, error) {
		conf := filepath.Join(root, "sentinel.conf")
		_, masterPort, _ := net.SplitHostPort(master.Addr)
		text := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\n"+
			"sentinel monitor %[3]s 127.0.0.1 %[4]s 1\n"+
			"sentinel down-after-milliseconds %[3]s 1000\n"+
			"sentinel failover-timeout %[3]s 5000\n",
			port, root, s.masterName, masterPort)
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			return nil, fmt.Errorf("write %s: %w", conf, err)
		}
		return []string{conf, "--sentinel"}, nil
	})
	if err != nil {
		t.Fatalf("testenv: Redis Sentinel: %v", err)
	}
	srv.closeAtCleanup(t)
	s.addrs = []string{srv.addr}
	sc := goredis.NewSentinelClient(&goredis.Options{Addr: srv.addr, MaxRetries: -1})
	defer sc.Close()
	err = pollUntil(30*time.Second, func(ctx context.Context) error {
		addr, err := sc.GetMasterAddrByName(ctx, s.masterName).Result()
		if err != nil {
			return err
		}
		if len(addr) != 2 || addr[0]+":"+addr[1] != master.Addr {
			return fmt.Errorf("sentinel names master %v, want %s", addr, master.Addr)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("testenv: Redis Sentinel on %s does not know master %s: %v", srv.addr, master.Addr, err)
	}
	return s
}

// Client returns a failover client of s, closed when the test ends.
func (s *Sentinel) Client(t testing.TB) *goredis.Client {
	t.Helper()
	c := goredis.NewFailoverClient(&goredis.FailoverOptions{MasterName: s.masterName, SentinelAddrs: s.addrs})
	t.Cleanup(func() { _ = c.Close() })
	return c
}
