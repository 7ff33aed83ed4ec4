package bench

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesync/ratesync/internal/testenv"
	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
	"github.com/ratesync/ratesync/strategy/redis"
)

// callers is how many goroutines decide at once in
// BenchmarkSynchronousRedisCost, as a node serving 32 connections.
const callers = 32

// BenchmarkSynchronousRedisCost measures what one synchronous decision
// costs Redis: callers goroutines call Instance.Allow (one sliding window
// limit of 1 minute, never reached) on a synchronous namespace, whose
// worker coalesces them into one check.lua call per batch, on a Redis
// server of the benchmark's own, over 1 key and over 10,000 keys. Every
// key is decided once before the run, and the instance's clock is frozen,
// so that the run measures a window whose counters exist (as in a minute
// of steady traffic), never a window turning. Reported per decision: the
// server's CPU time (INFO cpu: user + system, the server's whole work:
// network, parsing, scripts), its commands, those inside scripts included
// (INFO commandstats), the busiest of them one by one (cmd-NAME), and the
// decisions per EVALSHA; ns/op and allocs/op are per decision of this
// process (the node: callers, worker, client). The baseline, in the same
// run after the timer stops: up to 20,000 decisions as envoy ratelimit's
// Redis backend makes them, one pipelined INCRBY and EXPIRE per decision
// from callers goroutines; x-baseline-cpu is its server CPU per decision
// over ours. A third case runs 10,000 keys on a store of one shard
// (redis.Config.Shards 1): a batch is one group.
func BenchmarkSynchronousRedisCost(b *testing.B) {
	for _, c := range []struct{ keys, shards int }{{1, 0}, {10_000, 0}, {10_000, 1}} {
		nkeys := c.keys
		name := fmt.Sprintf("keys=%d", nkeys)
		if c.shards > 0 {
			name += fmt.Sprintf("/shards=%d", c.shards)
		}
		b.Run(name, func(b *testing.B) {
			r := testenv.PrivateRedis(b)
			opt, err := goredis.ParseURL(r.URL)
			if err != nil {
				b.Fatal(err)
			}
			opt.PoolSize = callers
			cl := goredis.NewClient(opt)
			b.Cleanup(func() { _ = cl.Close() })
			info := r.Client(b)
			s, err := redis.New(cl, redis.Config{Prefix: r.Prefix, Shards: c.shards})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			in := newInstance(b, "cost", frozen(time.Now()), ratelimiting.WithSyncTimeout(0, hitTimeout))
			mustNew(b, in, namespace.Config{Name: "sync", SyncRate: namespace.Synchronous, Strategy: s,
				WindowSizes: []time.Duration{time.Minute}, Clock: namespace.NodeClock})
			limit := ratelimiting.Limit{Limit: 1e15, Window: time.Minute}
			keys := keysN("key-", nkeys)
			allow := func(key string) error {
				d, err := in.Allow(ctx, "sync", key, 1, limit)
				if err == nil && !d.Allowed {
					err = fmt.Errorf("key %s denied: the limit is never reached here", key)
				}
				return err
			}
			if _, err := drive(nkeys, callers, func(_, i int) error { return allow(keys[i%nkeys]) }); err != nil {
				b.Fatal(err)
			}
			var next atomic.Int64
			b.Run("allow", func(b *testing.B) {
				before := redisCost(b, info)
				b.SetParallelism((callers + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := allow(keys[next.Add(997)%int64(nkeys)]); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.StopTimer()
				ours := redisCost(b, info).since(before)
				st := syncStats(b, in, "sync")
				if st.LocalHits != 0 || st.PushErrors != 0 {
					b.Fatalf("the store failed (%d local hits, %d errors: %v): not a measurement of the store path", st.LocalHits, st.PushErrors, st.LastError)
				}
				base, nb := redisCost(b, info), min(b.N, 20_000)
				if _, err := drive(nb, callers, func(_, i int) error {
					key := keys[next.Add(997)%int64(nkeys)]
					p := cl.Pipeline()
					p.IncrBy(ctx, r.Prefix+":base:"+key, 1)
					p.Expire(ctx, r.Prefix+":base:"+key, time.Minute)
					_, err := p.Exec(ctx)
					return err
				}); err != nil {
					b.Fatal(err)
				}
				baseline := redisCost(b, info).since(base)
				n := float64(b.N)
				b.ReportMetric(ours.cpu/n*1e6, "redis-cpu-us/decision")
				b.ReportMetric(float64(ours.calls())/n, "redis-cmds/decision")
				b.ReportMetric(n/float64(max(ours.cmds["evalsha"].calls, 1)), "decisions/evalsha")
				b.ReportMetric(float64(ours.cmds["evalsha"].usec)/n, "evalsha-us/decision")
				b.ReportMetric(baseline.cpu/float64(nb)*1e6, "baseline-redis-cpu-us/decision")
				b.ReportMetric(baseline.cpu/float64(nb)/(ours.cpu/n), "x-baseline-cpu")
				type named struct {
					name  string
					calls int64
				}
				var top []named
				for name, cs := range ours.cmds {
					if name != "evalsha" && cs.calls > 0 {
						top = append(top, named{name, cs.calls})
					}
				}
				sort.Slice(top, func(i, j int) bool { return top[i].calls > top[j].calls })
				for _, t := range top[:min(len(top), 6)] {
					b.ReportMetric(float64(t.calls)/n, "cmd-"+t.name+"/decision")
				}
			})
		})
	}
}

// serverCost is what a Redis server reports of its work so far.
type serverCost struct {
	cpu  float64 // s, user + system
	cmds map[string]cmdStat
}

// redisCost reads c's server's CPU time and command stats (INFO itself,
// which only this harness sends, left out).
func redisCost(tb testing.TB, c *goredis.Client) serverCost {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	cpu, ok := redisCPU(c)
	if !ok {
		tb.Fatal("INFO cpu: no used_cpu_user and used_cpu_sys")
	}
	cmds := parseCommandStats(s)
	delete(cmds, "info")
	return serverCost{cpu: cpu, cmds: cmds}
}

// since returns the work done between before and sc.
func (sc serverCost) since(before serverCost) serverCost {
	d := serverCost{cpu: sc.cpu - before.cpu, cmds: map[string]cmdStat{}}
	for name, cs := range sc.cmds {
		b := before.cmds[name]
		d.cmds[name] = cmdStat{calls: cs.calls - b.calls, usec: cs.usec - b.usec}
	}
	return d
}

// calls returns the commands of sc, those inside scripts included.
func (sc serverCost) calls() int64 {
	var n int64
	for _, cs := range sc.cmds {
		n += cs.calls
	}
	return n
}
