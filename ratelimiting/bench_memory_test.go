package ratelimiting_test

import (
	"context"
	"fmt"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
	"github.com/ratesync/ratesync/strategy/memory"
)

// heldHeap returns the heap the Go runtime holds from the system and has not
// returned to it: live and dead objects, the unused ends of their spans, and
// free spans not yet released (MemStats' HeapSys - HeapReleased), read
// without stopping the world.
func heldHeap() float64 {
	s := []metrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
	}
	metrics.Read(s)
	return float64(s[0].Value.Uint64() + s[1].Value.Uint64() + s[2].Value.Uint64())
}

func heapAlloc() float64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc)
}

// MemoryPerCounter measures the heap one live counter costs: 1,000,000
// 20-byte keys in one window size, after GC, beside a plain
// map[string]int64 that owns copies of the same keys (B/counter-map).
func BenchmarkMemoryPerCounter(b *testing.B) {
	memoryPerKey(b, "counter", 1_000_000, 1, localMem, func(in *ratelimiting.Instance, key string) error {
		_, err := in.Increment(context.Background(), "ns", key, time.Minute, 1)
		return err
	})
}

// MemoryPerDirtyCounter measures the heap one counter costs when it holds
// hits not yet pushed to the store, the same way: the namespace syncs
// periodically, and its first sync is not due before the measurement ends,
// so every one of the 1,000,000 counters waits for the syncer.
func BenchmarkMemoryPerDirtyCounter(b *testing.B) {
	memoryPerKey(b, "dirty-counter", 1_000_000, 1, dirtyMem, func(in *ratelimiting.Instance, key string) error {
		_, err := in.Increment(context.Background(), "ns", key, time.Minute, 1)
		return err
	})
}

// memSetup is a namespace of a memory benchmark: its configuration, and a
// check of the instance after the keys are hit.
type memSetup struct {
	config func() namespace.Config
	check  func(in *ratelimiting.Instance, n int) error
}

// localMem is a local-only namespace.
var localMem = memSetup{config: func() namespace.Config { return local("ns", time.Minute) }}

// dirtyMem is a namespace that syncs every 1,000 hours to a memory store:
// its first sync (at a random instant of the first period) is not due for
// a long while, so every counter hit holds a diff the syncer has not taken.
var dirtyMem = memSetup{
	config: func() namespace.Config { return synced("ns", 1000*time.Hour, memory.New(), time.Minute) },
	check: func(in *ratelimiting.Instance, n int) error {
		if got := in.Stats()[0].Sync.Dirty; got != n {
			return fmt.Errorf("%d counters listed with a diff to push, want %d", got, n)
		}
		return nil
	},
}

// MemoryPerBucket measures the heap one token bucket costs, the same way.
func BenchmarkMemoryPerBucket(b *testing.B) {
	l := ratelimiting.Limit{Limit: 10, Window: time.Second, Algorithm: ratelimiting.TokenBucket}
	memoryPerKey(b, "bucket", 1_000_000, 1, localMem, func(in *ratelimiting.Instance, key string) error {
		_, err := in.AllowOne(context.Background(), "ns", key, 1, l)
		return err
	})
}

// MemoryPerLog measures the heap one sliding log of limit 100 costs when
// full, 100 entries, the same way on 100,000 keys: each key gets one
// admitted hit per millisecond on a log of 100 per 100 ms. full: 100 hits
// each, as a log first fills; steady: 200 each, where every hit from the
// 101st on trims the oldest entry and appends one, as on a key held at its
// limit. Every hit must be admitted.
func BenchmarkMemoryPerLog(b *testing.B) {
	l := ratelimiting.Limit{Limit: 100, Window: 100 * time.Millisecond, Algorithm: ratelimiting.SlidingLog}
	hit := func(in *ratelimiting.Instance, key string) error {
		st, err := in.AllowOne(context.Background(), "ns", key, 1, l)
		if err == nil && !st.Allowed {
			err = fmt.Errorf("key %s: hit denied: %+v", key, st)
		}
		return err
	}
	b.Run("full", func(b *testing.B) { memoryPerKey(b, "log", 100_000, 100, localMem, hit) })
	b.Run("steady", func(b *testing.B) { memoryPerKey(b, "log", 100_000, 200, localMem, hit) })
}

// memoryPerKey reports the heap per key (B/<what>) that rounds calls of hit
// on each of n 20-byte keys leave on the namespace of setup, after GC, beside a
// map[string]int64 owning copies of the keys (B/<what>-map, x-map). Each
// round hits every key once; the clock moves 1 ms between rounds.
func memoryPerKey(b *testing.B, what string, n, rounds int, setup memSetup, hit func(in *ratelimiting.Instance, key string) error) {
	keys := benchKeys(n)
	var per, perMap float64
	for b.Loop() {
		var err error
		if per, err = heapPerKey(keys, rounds, setup, hit); err != nil {
			b.Fatal(err)
		}
		before := heapAlloc()
		m := make(map[string]int64)
		for _, k := range keys {
			m[strings.Clone(k)]++
		}
		perMap = (heapAlloc() - before) / float64(n)
		runtime.KeepAlive(m)
	}
	b.ReportMetric(per, "B/"+what)
	b.ReportMetric(perMap, "B/"+what+"-map")
	b.ReportMetric(per/perMap, "x-map")
}

// heapPerKey returns the heap per key, after GC, that rounds calls of hit on
// each of keys leave on a new instance holding the namespace of setup (in
// a dict of twice as many entries as keys). Each round hits every key once;
// the clock moves 1 ms between rounds.
func heapPerKey(keys []string, rounds int, setup memSetup, hit func(in *ratelimiting.Instance, key string) error) (float64, error) {
	clk := newClock(t0)
	cfg := setup.config()
	cfg.DictCapacity = 2 * len(keys)
	before := heapAlloc()
	in := ratelimiting.NewInstance("mem", ratelimiting.WithClock(clk.Now), quiet)
	defer in.Close(context.Background())
	if err := in.New(cfg); err != nil {
		return 0, err
	}
	for range rounds {
		for _, k := range keys {
			if err := hit(in, k); err != nil {
				return 0, err
			}
		}
		clk.Advance(time.Millisecond)
	}
	per := (heapAlloc() - before) / float64(len(keys))
	if got := in.Stats()[0].Dict.Entries; got != len(keys) {
		return 0, fmt.Errorf("%d entries, want %d", got, len(keys))
	}
	if setup.check != nil {
		if err := setup.check(in, len(keys)); err != nil {
			return 0, err
		}
	}
	return per, nil
}

// A counter costs at most 100 bytes of heap (20-byte keys, after GC), with
// or without a diff waiting for the syncer: measured as
// BenchmarkMemoryPerCounter and BenchmarkMemoryPerDirtyCounter do, on
// 100,000 keys. A window's tables cost a counter the most right after they
// double, under 21 bytes; the rest is the counter with its key and, when it
// holds a diff, its pointer in the dirty list: about 77 and 87 bytes at
// worst, whatever the number of keys.
func TestCounterMemoryBudget(t *testing.T) {
	const budget = 100
	keys := benchKeys(100_000)
	increment := func(in *ratelimiting.Instance, key string) error {
		_, err := in.Increment(context.Background(), "ns", key, time.Minute, 1)
		return err
	}
	for _, c := range []struct {
		name  string
		setup memSetup
	}{{"clean", localMem}, {"dirty", dirtyMem}} {
		t.Run(c.name, func(t *testing.T) {
			per, err := heapPerKey(keys, 1, c.setup, increment)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%.1f B per counter", per)
			if per > budget {
				t.Fatalf("a %s counter costs %.1f bytes of heap, want at most %d", c.name, per, budget)
			}
		})
	}
}

// FloodBoundedMemory floods a dict of capacity 100,000 with 10,000,000
// distinct keys while 100 hot keys keep being hit, and reports the heap
// after the flood over the heap at 100,000 live counters (heap-ratio), the
// most heap the Go runtime held from the system during the flood (read
// every 10,000 flood keys, see heldHeap), less the heap before the
// instance, over that same live heap (peak-ratio), the evictions and
// refusals, and how many hot keys lost counts (hot-keys-off).
func BenchmarkFloodBoundedMemory(b *testing.B) {
	const (
		capacity = 100_000
		flood    = 10_000_000
		hot      = 100
		hotEvery = 100 // a hot hit every 100 flood keys
	)
	ctx := context.Background()
	var ratio, peakRatio, evictions, overflows, hotOff float64
	for b.Loop() {
		var ms atomic.Int64
		ms.Store(t0.UnixMilli())
		var ops int64
		clock := func() time.Time { return time.UnixMilli(ms.Load()) }
		tick := func() { // 1 ms of traffic per 1,000 operations
			if ops++; ops%1000 == 0 {
				ms.Add(1)
			}
		}
		base := heapAlloc()
		in := ratelimiting.NewInstance("flood", ratelimiting.WithClock(clock), quiet)
		cfg := local("ns", time.Hour)
		cfg.DictCapacity = capacity
		if err := in.New(cfg); err != nil {
			b.Fatal(err)
		}
		hotKeys := benchKeys(hot)
		want := make([]float64, hot)
		for i, k := range hotKeys { // hot keys are known before the flood
			in.Increment(ctx, "ns", k, time.Hour, 10)
			want[i] = 10
		}
		buf := []byte("flood:")
		for i := range capacity - hot {
			in.Increment(ctx, "ns", string(strconv.AppendInt(buf[:6], int64(i), 10)), time.Hour, 1)
			tick()
		}
		atCapacity := heapAlloc() - base
		peak := 0.0
		for i := range flood {
			if i%10_000 == 0 {
				peak = max(peak, heldHeap())
			}
			in.Increment(ctx, "ns", string(strconv.AppendInt(buf[:6], int64(capacity+i), 10)), time.Hour, 1)
			tick()
			if i%hotEvery == 0 {
				h := (i / hotEvery) % hot
				in.Increment(ctx, "ns", hotKeys[h], time.Hour, 1)
				want[h]++
			}
		}
		ratio = (heapAlloc() - base) / atCapacity
		peakRatio = (peak - base) / atCapacity
		st := in.Stats()[0].Dict
		evictions, overflows = float64(st.Evictions), float64(st.Overflows)
		hotOff = 0
		for i, k := range hotKeys {
			if w, _ := in.SlidingWindow(ctx, "ns", k, time.Hour); w.Current != want[i] {
				hotOff++
			}
		}
		in.Close(ctx)
	}
	b.ReportMetric(ratio, "heap-ratio")
	b.ReportMetric(peakRatio, "peak-ratio")
	b.ReportMetric(evictions, "evictions")
	b.ReportMetric(overflows, "refused")
	b.ReportMetric(hotOff, "hot-keys-off")
}
