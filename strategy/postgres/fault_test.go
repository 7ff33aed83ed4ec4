package postgres_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/arith"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ratesync/ratesync/internal/strategytest"
	"github.com/ratesync/ratesync/internal/testenv"
	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/postgres"
)

// proxiedPool returns a pool of one connection to p's database through a
// new proxy, which never pings on acquire (a ping's reply would be the one
// a DropReplies swallows).
func proxiedPool(t *testing.T, p *testenv.Postgres) (*pgxpool.Pool, *testenv.Proxy) {
	t.Helper()
	u, err := url.Parse(p.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.NewProxy(t, u.Host)
	cfg, err := pgxpool.ParseConfig(p.URLVia(proxy))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, proxy
}

// The server applies a batch and its reply is lost: the call fails, and
// its retry with the same (Node, Seq) counts nothing again. Bucket diffs
// and bucket limits too: a batch of bucket diffs alone records its seq.
func TestDroppedReplyThenRetryCountsOnce(t *testing.T) {
	size := time.Minute
	now := strategytest.Base.Add(15 * time.Second)
	start := arith.WindowStart(now, size)
	window := []strategy.Diff{diff("ns", "k", start, size, 1)}
	buckets := []strategy.BucketDiff{{Namespace: "ns", Key: "k", Kind: 1, Window: time.Second, At: now.UnixMilli(), Cost: 1, Rate: 1}}
	checks := func(limits ...strategy.CheckLimit) []strategy.Check {
		return []strategy.Check{{Namespace: "ns", Key: "k", Cost: 1, Now: now, Limits: append([]strategy.CheckLimit{{WindowSize: size, Limit: 100}}, limits...)}}
	}
	bucketLimit := strategy.CheckLimit{Kind: 1, WindowSize: time.Second, Limit: 1, Burst: 100}
	for _, c := range []struct {
		name string
		call func(ctx context.Context, s *postgres.Store, seq uint64) error
	}{
		{"PushDiffs", func(ctx context.Context, s *postgres.Store, seq uint64) error {
			return s.PushDiffs(ctx, strategy.Batch{Node: "n", Seq: seq, Diffs: window})
		}},
		{"PushAndCount", func(ctx context.Context, s *postgres.Store, seq uint64) error {
			_, err := s.PushAndCount(ctx, strategy.Batch{Node: "n", Seq: seq, Diffs: window})
			return err
		}},
		{"CheckAndCount", func(ctx context.Context, s *postgres.Store, seq uint64) error {
			_, err := s.CheckAndCount(ctx, "n", seq, checks())
			return err
		}},
		{"PushDiffs of bucket diffs alone", func(ctx context.Context, s *postgres.Store, seq uint64) error {
			return s.PushDiffs(ctx, strategy.Batch{Node: "n", Seq: seq, Buckets: buckets})
		}},
		{"PushAndCount with bucket diffs", func(ctx context.Context, s *postgres.Store, seq uint64) error {
			_, err := s.PushAndCount(ctx, strategy.Batch{Node: "n", Seq: seq, Diffs: window, Buckets: buckets})
			return err
		}},
		{"CheckAndCount with a bucket limit", func(ctx context.Context, s *postgres.Store, seq uint64) error {
			_, err := s.CheckAndCount(ctx, "n", seq, checks(bucketLimit))
			return err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, direct := newDB(t)
			pool, proxy := proxiedPool(t, p)
			ctx := context.Background()
			s, err := postgres.New(ctx, pool, postgres.Config{})
			if err != nil {
				t.Fatal(err)
			}
			check, err := postgres.New(ctx, direct, postgres.Config{}) // reads past the proxy
			if err != nil {
				t.Fatal(err)
			}
			state := func() string { // the window's count and the bucket
				b, err := check.GetBuckets(ctx, "ns", []strategy.BucketRef{{Key: "k", Kind: 1, Window: time.Second}})
				if err != nil {
					t.Fatal(err)
				}
				return fmt.Sprintf("window %v, buckets %+v", mustWindow(t, check, "ns", "k", start, size), b)
			}
			// Seq 1 prepares the statement on the pool's one connection, so
			// that seq 2 is a single exchange whose reply can be dropped.
			if err := c.call(ctx, s, 1); err != nil {
				t.Fatalf("seq 1: %v", err)
			}
			once := state()
			proxy.DropReplies(1)
			if err := c.call(ctx, s, 2); err == nil {
				t.Fatal("seq 2 with its reply dropped: no error")
			}
			twice := state()
			if twice == once {
				t.Fatalf("after the lost reply the store holds %s, as after seq 1: the server did not apply seq 2", twice)
			}
			if err := c.call(ctx, s, 2); err != nil {
				t.Fatalf("retry of seq 2: %v", err)
			}
			if got := state(); got != twice {
				t.Fatalf("after the retry the store holds %s, want %s (seq 2 counted once)", got, twice)
			}
		})
	}
}

// A store outage in the middle of traffic: Increment never fails, nodes
// keep counting locally, and once the server is back every diff lands, so
// the store's totals equal the hits exactly.
func TestStoreOutageMidTraffic(t *testing.T) {
	pg := testenv.PrivatePostgres(t)
	pool := pg.Pool(t)
	ctx := context.Background()
	s, err := postgres.New(ctx, pool, postgres.Config{})
	if err != nil {
		t.Fatal(err)
	}
	in := ratelimiting.NewInstance(t.Name(),
		ratelimiting.WithLogger(slog.New(slog.DiscardHandler)),
		ratelimiting.WithSyncTimeout(2*time.Second, 500*time.Millisecond))
	t.Cleanup(func() { _ = in.Close(context.Background()) })
	const size = time.Hour // one window (two if the test straddles the hour)
	if err := in.New(namespace.Config{Name: "api", SyncRate: 100 * time.Millisecond, Strategy: s, WindowSizes: []time.Duration{size}}); err != nil {
		t.Fatal(err)
	}

	const workers = 3
	var (
		stop  atomic.Bool
		hits  [workers]atomic.Int64
		wg    sync.WaitGroup
		errMu sync.Mutex
		errs  []error
	)
	fail := func(err error) {
		errMu.Lock()
		errs = append(errs, err)
		errMu.Unlock()
	}
	keyOf := func(w int) string { return fmt.Sprintf("client-%d", w) }
	for w := range workers {
		wg.Go(func() {
			last := 0.0
			for !stop.Load() {
				win, err := in.Increment(ctx, "api", keyOf(w), size, 1)
				if err != nil {
					fail(fmt.Errorf("worker %d: Increment: %w", w, err))
					return
				}
				hits[w].Add(1)
				if cur := win.Current; cur < last {
					// once per worker: it would fail on every hit until the
					// count passed last again
					fail(fmt.Errorf("worker %d: own key's count went down from %v to %v", w, last, cur))
					return
				}
				last = win.Current
				if _, err := in.Increment(ctx, "api", "shared", size, 1); err != nil {
					fail(fmt.Errorf("worker %d: Increment shared: %w", w, err))
					return
				}
				hits[w].Add(1 << 32) // shared hits in the high half
				time.Sleep(time.Millisecond)
			}
		})
	}
	total := func() (own [workers]int64, shared int64) {
		for w := range workers {
			h := hits[w].Load()
			own[w], shared = h&(1<<32-1), shared+h>>32
		}
		return own, shared
	}

	time.Sleep(time.Second) // traffic with the store up
	pg.Stop(t)
	before, _ := total()
	time.Sleep(5 * time.Second) // traffic with the store down
	during, _ := total()
	pg.Start(t)
	time.Sleep(time.Second) // traffic after recovery
	stop.Store(true)
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	for w := range workers {
		if during[w] <= before[w] {
			t.Errorf("worker %d counted nothing while the store was down (%d hits before, %d after)", w, before[w], during[w])
		}
	}

	own, shared := total()
	keys := []string{"shared"}
	for w := range workers {
		keys = append(keys, keyOf(w))
	}
	want := map[string]float64{"shared": float64(shared)}
	for w := range workers {
		want[keyOf(w)] = float64(own[w])
	}
	stored := func() map[string]float64 {
		got := make(map[string]float64)
		q := strategy.Query{Namespace: "api", WindowSizes: []time.Duration{size}, Now: time.Now(), Keys: keys}
		for c, err := range s.GetCounters(ctx, q) {
			if err != nil {
				return nil
			}
			got[c.Key] += c.Count
		}
		return got
	}
	var got map[string]float64
	eventually(t, 45*time.Second, "the store's totals equal the hits", func() bool {
		got = stored()
		return fmt.Sprint(got) == fmt.Sprint(want)
	}, func() string { return fmt.Sprintf("store %v, hits %v", got, want) })
}

// eventually polls cond until it holds, failing t after within with what
// and the state describe returns.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool, describe func() string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s; %s", within, what, describe())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A check call whose reply is lost, over every kind of limit: its retry
// with the same (Node, Seq) gets the decisions the server made the first
// time, and each check is counted exactly once.
func TestLostCheckReplyRetryGetsTheDecisionsMadeThen(t *testing.T) {
	p, direct := newDB(t)
	pool, proxy := proxiedPool(t, p)
	ctx := context.Background()
	s, err := postgres.New(ctx, pool, postgres.Config{})
	if err != nil {
		t.Fatal(err)
	}
	now := strategytest.Base.Add(15 * time.Second)
	ms := now.UnixMilli()
	start := arith.WindowStart(now, time.Minute)
	// Seq 1 prepares the statement on the pool's one connection, so that
	// seq 2 is a single exchange whose reply can be dropped.
	if _, err := s.CheckAndCount(ctx, "n", 1, strategytest.RetryCall("warm", now)); err != nil {
		t.Fatalf("seq 1: %v", err)
	}
	call := strategytest.RetryCall("ns", now)
	proxy.DropReplies(1)
	if _, err := s.CheckAndCount(ctx, "n", 2, call); err == nil {
		t.Fatal("seq 2 with its reply dropped: no error")
	}
	res, err := s.CheckAndCount(ctx, "n", 2, call)
	if err != nil {
		t.Fatalf("retry of seq 2: %v", err)
	}
	for i, r := range res {
		if r.Allowed != strategytest.RetryDecisions[i] {
			t.Errorf("check %d: %+v, want allowed %v (the decision made then)", i, r, strategytest.RetryDecisions[i])
		}
	}
	check, err := postgres.New(ctx, direct, postgres.Config{}) // reads past the proxy
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]float64{"ra": 3, "re": 2, "rf": 0} {
		if got := mustWindow(t, check, "ns", key, start, time.Minute); got != want {
			t.Errorf("%s = %v, want %v (counted once)", key, got, want)
		}
	}
	b, err := check.GetBuckets(ctx, "ns", []strategy.BucketRef{{Key: "rb", Kind: 4, Window: time.Second}})
	if err != nil || len(b) != 1 || b[0].Level != 1000 || b[0].At != ms {
		t.Errorf("bucket rb: %+v, %v; want level 1000 at %d (counted once)", b, err, ms)
	}
	if r := res[4].Buckets[0]; r.Level != 2 || r.At != ms || r.RetryAt != 0 {
		t.Errorf("log rc of an allowed check: %+v, want sum 2 at %d (counted once), no retry", r, ms)
	}
	if r := res[5].Buckets[0]; r.Level != 2 || r.RetryAt != ms+60000 {
		t.Errorf("log rc of a denied check: %+v, want sum 2, retry at %d", r, ms+60000)
	}
}
