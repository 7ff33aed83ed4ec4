package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesync/ratesync/namespace"
)

// Pushing 100,000 dirty keys takes a handful
// of round trips.

// BenchmarkPush100kDirtyKeys measures one Instance.Sync of a periodic
// namespace (synced by hand) after 100,000 distinct keys were incremented
// once each (outside the timer): the push of 100,000 diffs and the fetch of
// the same 100,000 keys. Reported: keys/s of the whole sync and of its push
// alone, round trips per sync, and for Redis the ops/s of redis-benchmark
// (pipelined HINCRBYFLOAT of random fields, see redis_benchmark.sh) run on
// the same server right after, with the ratio x-redis-benchmark (this
// sync's keys/s over redis-benchmark's ops/s; push-x-redis-benchmark for
// the push alone).
func BenchmarkPush100kDirtyKeys(b *testing.B) {
	const keys = 100_000
	for _, o := range backends {
		b.Run(o.name, func(b *testing.B) {
			ctx := context.Background()
			be := o.open(b, 0)
			cs := &counting{Strategy: be.store}
			in := newInstance(b, "push", frozen(time.Now()))
			mustNew(b, in, namespace.Config{Name: "push", SyncRate: manual, Strategy: cs, WindowSizes: []time.Duration{window}})
			ks := keysN("key-", keys)
			dirty := func() {
				for _, k := range ks {
					if _, err := in.Increment(ctx, "push", k, window, 1); err != nil {
						b.Fatal(err)
					}
				}
			}
			var took, pushed time.Duration
			var trips int64
			syncOnce := func() {
				r, p, y, pn := be.trips(), cs.pushed.Load(), cs.yields.Load(), cs.pushNanos.Load()
				t := time.Now()
				if err := in.Sync(ctx, "push"); err != nil {
					b.Fatal(err)
				}
				took += time.Since(t)
				pushed += time.Duration(cs.pushNanos.Load() - pn)
				trips += be.trips() - r
				if n := cs.pushed.Load() - p; n != keys {
					b.Fatalf("sync pushed %d diffs, want %d", n, keys)
				}
				if n := cs.yields.Load() - y; n != keys {
					b.Fatalf("sync fetched %d counters, want %d", n, keys)
				}
			}
			dirty()
			syncOnce() // warm up: counters created in the store, statements prepared
			if be.pg != nil {
				// What autovacuum does after 100,000 inserts (within a
				// minute or so); done now so that it does not run during
				// the measurement. Without it, see README.md.
				if _, err := be.pg.Exec(ctx, "ANALYZE public.ratesync_counters"); err != nil {
					b.Fatal(err)
				}
			}
			took, pushed, trips = 0, 0, 0
			for b.Loop() {
				b.StopTimer()
				dirty()
				b.StartTimer()
				syncOnce()
			}
			n := float64(b.N)
			rate := keys * n / took.Seconds()
			pushRate := keys * n / pushed.Seconds()
			b.ReportMetric(rate, "keys/s")
			b.ReportMetric(pushRate, "push-keys/s")
			b.ReportMetric(float64(trips)/n, "roundtrips/sync")
			if be.redis == nil {
				return
			}
			rb, err := redisBenchmark(ctx, be.redis.URL, be.redis.Prefix+":bench:h")
			if err != nil {
				if errors.Is(err, exec.ErrNotFound) {
					b.Logf("redis-benchmark not run: %v", err)
					return
				}
				b.Fatal(err)
			}
			b.ReportMetric(rb, "redis-benchmark-ops/s")
			b.ReportMetric(rate/rb, "x-redis-benchmark")
			b.ReportMetric(pushRate/rb, "push-x-redis-benchmark")
		})
	}
}

// rpsRE finds the requests per second in redis-benchmark -q output.
var rpsRE = regexp.MustCompile(`([0-9.]+) requests per second`)

// redisBenchmark runs redis_benchmark.sh (redis-benchmark: 1,000,000
// pipelined HINCRBYFLOAT of 100,000 random fields of hash key, 50
// clients, pipelines of 16) against the server of url, deletes key, and
// returns the requests per second. The error wraps exec.ErrNotFound when
// redis-benchmark or bash is missing.
func redisBenchmark(ctx context.Context, url, key string) (float64, error) {
	for _, bin := range []string{"bash", "redis-benchmark"} {
		if _, err := exec.LookPath(bin); err != nil {
			return 0, fmt.Errorf("%s: %w", bin, err)
		}
	}
	opt, err := goredis.ParseURL(url)
	if err != nil {
		return 0, err
	}
	host, port, err := net.SplitHostPort(opt.Addr)
	if err != nil {
		return 0, err
	}
	args := []string{"redis_benchmark.sh", host, port, key, "--dbnum", strconv.Itoa(opt.DB)}
	if opt.Password != "" {
		args = append(args, "-a", opt.Password)
		if opt.Username != "" {
			args = append(args, "--user", opt.Username)
		}
	}
	c := goredis.NewClient(opt)
	defer c.Close()
	defer c.Del(context.Background(), key)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", args...).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("redis_benchmark.sh: %w: %s", err, out)
	}
	m := rpsRE.FindAllSubmatch(out, -1)
	if len(m) == 0 {
		return 0, fmt.Errorf("redis_benchmark.sh: no \"requests per second\" in %q", out)
	}
	return strconv.ParseFloat(string(m[len(m)-1][1]), 64)
}
