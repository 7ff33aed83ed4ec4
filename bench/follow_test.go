package bench

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/arith"
	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
	"github.com/ratesync/ratesync/strategy"
)

// A periodic sync reads the keys this node holds, not the
// namespace, so its cost follows the node's active keys and not the size
// of the store.

const (
	window       = time.Hour // every window of this package: it never turns during a run
	manual       = 24 * time.Hour
	preloadBatch = 50_000 // diffs per PushDiffs of a preload
)

// preload pushes n counters of keys other than the benchmark's ("other-...")
// into namespace ns, window start, as the node "preloader" would: batches of
// preloadBatch diffs.
func preload(tb testing.TB, s strategy.Strategy, ns string, start time.Time, n int) {
	tb.Helper()
	diffs := make([]strategy.Diff, 0, preloadBatch)
	seq := uint64(0)
	for lo := 0; lo < n; lo += preloadBatch {
		diffs = diffs[:0]
		for i := lo; i < min(lo+preloadBatch, n); i++ {
			diffs = append(diffs, strategy.Diff{Namespace: ns, Key: fmt.Sprintf("other-%07d", i), WindowStart: start, WindowSize: window, Value: 1})
		}
		seq++
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		err := s.PushDiffs(ctx, strategy.Batch{Node: "preloader", Seq: seq, Diffs: diffs})
		cancel()
		if err != nil {
			tb.Fatalf("preload batch %d: %v", seq, err)
		}
	}
}

// BenchmarkSyncFollowsActiveKeys measures Instance.Sync of a node holding
// 1,000 keys, all dirty (each incremented once before each sync), in a
// namespace where the store also holds 1,000,000 counters of other keys in
// the same window ("loaded"), and in an empty namespace of the same store
// ("empty"), alternately, in one loop. Reported: the time of one sync in
// each (ms/sync-*), their ratio x-empty (target: at most 2), the part of
// it spent in GetCounters (ms/fetch-*, while the syncer consumes the
// counters), the counters GetCounters yielded per sync (fails unless 1,000
// to 2,000: the node's keys in the current and previous windows) and the
// round trips per sync.
//
// PostgreSQL runs twice: with the table analyzed after the preload (as
// autovacuum leaves it in steady state), and with stale statistics (no
// ANALYZE since the table was empty, autovacuum off for the table: the
// minutes after a fast growth), which shows the plan GetCounters then gets.
func BenchmarkSyncFollowsActiveKeys(b *testing.B) {
	const (
		others = 1_000_000
		held   = 1_000
	)
	variants := []struct {
		name  string
		open  func(testing.TB, int) *backend
		stale bool // PostgreSQL: no ANALYZE after the preload, autovacuum off for the table
	}{
		{"redis", openRedis, false},
		{"postgres", openPostgres, false},
		{"postgres-stale-stats", openPostgres, true},
	}
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			ctx := context.Background()
			be := v.open(b, 0)
			if v.stale {
				// As in the minutes after a table grew fast, before
				// autovacuum analyzes it (kept so for the whole run).
				if _, err := be.pg.Exec(ctx, "ALTER TABLE public.ratesync_counters SET (autovacuum_enabled = false)"); err != nil {
					b.Fatal(err)
				}
			}
			now := time.Now()
			start := arith.WindowStart(now, window)
			cs := &counting{Strategy: be.store}
			in := newInstance(b, "follow", frozen(now))
			names := [2]string{"loaded", "empty"}
			for _, ns := range names {
				mustNew(b, in, namespace.Config{Name: ns, Dict: ns, SyncRate: manual, Strategy: cs, WindowSizes: []time.Duration{window}})
			}

			t0 := time.Now()
			preload(b, be.store, "loaded", start, others)
			b.Logf("%s: preloaded %d counters in %v", be.name, others, time.Since(t0).Round(time.Millisecond))
			if be.pg != nil && !v.stale {
				// What autovacuum does after a million inserts (within a
				// minute or so); done now so that it does not run during
				// the measurement.
				if _, err := be.pg.Exec(ctx, "ANALYZE public.ratesync_counters"); err != nil {
					b.Fatal(err)
				}
			}

			keys := keysN("held-", held)
			dirty := func(ns string) {
				for _, k := range keys {
					if _, err := in.Increment(ctx, ns, k, window, 1); err != nil {
						b.Fatal(err)
					}
				}
			}
			var (
				took     [2]time.Duration
				fetch    [2]time.Duration
				counters [2]int64
				trips    [2]int64
			)
			syncOnce := func(i int) {
				dirty(names[i])
				y, r, p, g := cs.yields.Load(), be.trips(), cs.pushed.Load(), cs.getNanos.Load()
				t := time.Now()
				if err := in.Sync(ctx, names[i]); err != nil {
					b.Fatal(err)
				}
				took[i] += time.Since(t)
				fetch[i] += time.Duration(cs.getNanos.Load() - g)
				got := cs.yields.Load() - y
				if got < held || got > 2*held {
					b.Fatalf("%s: sync read %d counters, want %d to %d (the node's keys only)", names[i], got, held, 2*held)
				}
				if n := cs.queryKeys.Load(); n != held || cs.wholeNamespace.Load() != 0 {
					b.Fatalf("%s: GetCounters asked for %d keys (%d whole-namespace reads), want %d keys", names[i], n, cs.wholeNamespace.Load(), held)
				}
				if n := cs.pushed.Load() - p; n != held {
					b.Fatalf("%s: sync pushed %d diffs, want %d", names[i], n, held)
				}
				counters[i] += got
				trips[i] += be.trips() - r
			}
			// Warm up: the node's keys reach the store, statements are
			// prepared, connections open.
			syncOnce(0)
			syncOnce(1)
			took, fetch, counters, trips = [2]time.Duration{}, [2]time.Duration{}, [2]int64{}, [2]int64{}

			i := 0
			for b.Loop() {
				syncOnce(i % 2) // alternate which goes first
				syncOnce(1 - i%2)
				i++
			}
			n := float64(b.N)
			b.ReportMetric(float64(took[0].Microseconds())/n/1e3, "ms/sync-loaded")
			b.ReportMetric(float64(took[1].Microseconds())/n/1e3, "ms/sync-empty")
			b.ReportMetric(float64(took[0])/float64(took[1]), "x-empty")
			b.ReportMetric(float64(fetch[0].Microseconds())/n/1e3, "ms/fetch-loaded")
			b.ReportMetric(float64(fetch[1].Microseconds())/n/1e3, "ms/fetch-empty")
			b.ReportMetric(float64(counters[0])/n, "counters/sync-loaded")
			b.ReportMetric(float64(counters[1])/n, "counters/sync-empty")
			b.ReportMetric(float64(trips[0])/n, "roundtrips/sync-loaded")
			b.ReportMetric(float64(trips[1])/n, "roundtrips/sync-empty")
		})
	}
}

// TestSyncReadsOnlyHeldKeys: another node's 5,000 keys in the namespace
// stay in the store; a sync of this node asks for its 50 keys and reads
// them only, with the other node's hits on the 10 keys they share.
func TestSyncReadsOnlyHeldKeys(t *testing.T) {
	for _, o := range backends {
		t.Run(o.name, func(t *testing.T) {
			ctx := context.Background()
			be := o.open(t, 0)
			now := time.Now()
			start := arith.WindowStart(now, window)
			preload(t, be.store, "api", start, 5_000) // other-0000000 .. other-0004999
			cs := &counting{Strategy: be.store}
			in := newInstance(t, "reads", frozen(now))
			mustNew(t, in, namespace.Config{Name: "api", SyncRate: manual, Strategy: cs, WindowSizes: []time.Duration{window}})

			mine := keysN("mine-", 40)
			shared := keysN("other-", 10) // the other node counted 1 each
			held := append(slices.Clone(mine), shared...)
			for _, k := range held {
				if _, err := in.Increment(ctx, "api", k, window, 2); err != nil {
					t.Fatal(err)
				}
			}
			cs.mu.Lock()
			cs.record = true
			cs.mu.Unlock()
			if err := in.Sync(ctx, "api"); err != nil {
				t.Fatal(err)
			}

			if got := cs.gets.Load(); got != 1 {
				t.Fatalf("GetCounters calls = %d, want 1", got)
			}
			if got := cs.wholeNamespace.Load(); got != 0 {
				t.Fatalf("whole-namespace reads = %d, want 0", got)
			}
			if got := cs.queryKeys.Load(); got != int64(len(held)) {
				t.Fatalf("GetCounters asked for %d keys, want %d", got, len(held))
			}
			cs.mu.Lock()
			yielded := slices.Sorted(slices.Values(cs.yielded))
			cs.mu.Unlock()
			want := slices.Sorted(slices.Values(held))
			if !slices.Equal(yielded, want) {
				t.Fatalf("GetCounters yielded %d counters %v...; want exactly the node's %d keys", len(yielded), yielded[:min(5, len(yielded))], len(want))
			}
			for _, c := range []struct {
				key  string
				want float64
			}{{mine[0], 2}, {shared[0], 3}, {shared[9], 3}} {
				w, err := in.SlidingWindow(ctx, "api", c.key, window)
				if err != nil {
					t.Fatal(err)
				}
				if w.Current != c.want {
					t.Errorf("%s: Current = %v after sync, want %v (the store's total)", c.key, w.Current, c.want)
				}
			}
			var st ratelimiting.NamespaceStats
			for _, s := range in.Stats() {
				if s.Config.Name == "api" {
					st = s
				}
			}
			if st.Dict.Entries != len(held) {
				t.Errorf("dict holds %d counters after sync, want the node's %d", st.Dict.Entries, len(held))
			}
		})
	}
}
