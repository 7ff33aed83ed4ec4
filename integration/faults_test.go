package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/arith"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesync/ratesync/internal/testenv"
	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/postgres"
	"github.com/ratesync/ratesync/strategy/redis"
)

// hungStore is a private store server the tests can pause (SIGSTOP): its
// URL for the nodes, a store on it for the test's own reads.
type hungStore struct {
	name          string
	url           string
	pause, resume func(t testing.TB)
	store         strategy.Strategy
}

// privateStores starts one private server of each kind.
var privateStores = []struct {
	name string
	open func(t *testing.T) hungStore
}{
	{"redis", func(t *testing.T) hungStore {
		r := testenv.PrivateRedis(t)
		s, err := redis.New(r.Client(t), redis.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return hungStore{"redis", r.URL, r.Pause, r.Resume, s}
	}},
	{"postgres", func(t *testing.T) hungStore {
		p := testenv.PrivatePostgres(t)
		s, err := postgres.New(context.Background(), p.Pool(t), postgres.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return hungStore{"postgres", p.URL, p.Pause, p.Resume, s}
	}},
}

// percentile returns the p-th percentile (0..1) of ds, which it sorts.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(p*float64(len(ds))))]
}

// A synchronous store that hangs (SIGSTOP) under load fails open in one
// call timeout (store_down: local; sharing, a cluster refuses in the
// windows under way instead): the requests under way when it stops wait
// at most the timeout, and once one has timed out the namespace decides
// on the node at once, until a probe finds the store back. No caller sees
// an error, and afterwards the store holds every admitted hit exactly
// once: the checks whose replies never came are sent again with their
// (node, seq), and the store counts each once.
func TestHungStoreFailsOpenInOneTimeout(t *testing.T) {
	const (
		timeout = time.Second // the namespace's call timeout (the default)
		stopFor = 4 * time.Second
	)
	bin := buildNode(t)
	for _, ps := range privateStores {
		t.Run(ps.name, func(t *testing.T) {
			st := ps.open(t)
			var nodes []*nodeProcess
			for i := range 2 {
				nodes = append(nodes, startNode(t, bin, nodeConfig(fmt.Sprintf("hang-%d", i), st.name, st.url, "    timeout: "+timeout.String()+"\n    store_down: local", 0)))
			}
			eventually(t, 10*time.Second, "every node ready", func() bool {
				for _, n := range nodes {
					if n.ready() != http.StatusOK {
						return false
					}
				}
				return true
			})
			var stopped, resumed atomic.Int64
			var faults sync.WaitGroup
			faults.Go(func() {
				time.Sleep(2 * time.Second)
				st.pause(t)
				stopped.Store(time.Now().UnixNano())
				time.Sleep(stopFor)
				resumed.Store(time.Now().UnixNano())
				st.resume(t)
			})
			res, err := RunWith(context.Background(), len(nodes), Load{Rate: 200, Keys: 10, Spread: Random, Duration: 9 * time.Second, Seed: 11},
				func(ctx context.Context, node int, key string, _ float64) (bool, error) {
					return nodes[node].check(ctx, key)
				})
			faults.Wait()
			if err != nil {
				t.Fatal(err)
			}
			noErrors(t, res)
			from, to := time.Unix(0, stopped.Load()), time.Unix(0, resumed.Load())
			var during, before []time.Duration
			for _, d := range res.Decisions {
				switch {
				case !d.At.Before(from) && d.At.Before(to):
					during = append(during, d.Latency)
				case d.At.Before(from):
					before = append(before, d.Latency)
				}
			}
			p50, p99, worst := percentile(during, 0.5), percentile(during, 0.99), percentile(during, 1)
			t.Logf("%s stopped %v under 200 req/s: %d requests during the stop: p50 %v, p99 %v, max %v (call timeout %v); before it: p99 %v",
				ps.name, stopFor, len(during), p50.Round(time.Millisecond), p99.Round(time.Millisecond), worst.Round(time.Millisecond), timeout,
				percentile(before, 0.99).Round(time.Millisecond))
			if len(during) < 100 {
				t.Fatalf("%d requests during the stop: too few to judge", len(during))
			}
			// A generous bound on a shared machine; the figure is logged.
			if p99 > timeout+time.Second {
				t.Fatalf("p99 during the stop %v: callers waited for the store beyond the call timeout %v", p99, timeout)
			}
			for _, n := range nodes {
				if code := n.stop(t, syscall.SIGTERM); code != 0 {
					t.Fatalf("node exit code %d", code)
				}
			}
			stored, admitted := storedTotal(t, st.store, "api", res)
			t.Logf("%s: %v admitted, %v in the store after the nodes stopped", ps.name, admitted, stored)
			if stored != admitted {
				t.Fatalf("store %v, admitted %v: a hit lost or counted twice", stored, admitted)
			}
		})
	}
}

// Replies lost after the store applied the call: four nodes in synchronous
// mode, a proxy dropping 20% then 50% of the store's replies, 400 requests
// for a limit of 100 on one key. A check whose reply is lost is sent again
// with the same (node, seq), and the store answers with the decision it
// recorded: the cluster admits exactly the limit, and the store counts it,
// as long as each call gets through within its timeout.
func TestLostRepliesAdmitExactlyTheLimit(t *testing.T) {
	const (
		nodes, perNode = 4, 100
		limit          = 100
	)
	type via struct {
		store, direct strategy.Strategy
		proxy         *testenv.Proxy
	}
	open := map[string]func(t *testing.T) via{
		"redis": func(t *testing.T) via {
			r := testenv.NewRedis(t)
			p := testenv.NewProxy(t, r.Addr)
			direct, err := redis.New(r.Client(t), redis.Config{Prefix: r.Prefix})
			if err != nil {
				t.Fatal(err)
			}
			return via{redisStoreVia(t, r, p), direct, p}
		},
		"postgres": func(t *testing.T) via {
			pg := testenv.NewPostgres(t)
			direct, err := postgres.New(context.Background(), pg.Pool(t), postgres.Config{})
			if err != nil {
				t.Fatal(err)
			}
			p := testenv.NewProxy(t, pg.Addr())
			pool := (&testenv.Postgres{URL: pg.URLVia(p)}).Pool(t)
			s, err := postgres.New(context.Background(), pool, postgres.Config{})
			if err != nil {
				t.Fatal(err)
			}
			return via{s, direct, p}
		},
	}
	for _, share := range []float64{0.2, 0.5} {
		for _, name := range []string{"redis", "postgres"} {
			t.Run(fmt.Sprintf("%s/%.0f%%", name, share*100), func(t *testing.T) {
				v := open[name](t)
				// A call timeout of 3s: at 50% lost, a call may take several
				// tries, and the machine is shared; a call still unanswered
				// after its timeout is decided on a node (fail open).
				c := newCluster(t, ClusterConfig{Nodes: nodes, SyncRate: namespace.Synchronous, Strategy: v.store, WindowSizes: []time.Duration{time.Hour},
					Options: []ratelimiting.Option{ratelimiting.WithSyncTimeout(10*time.Second, 3*time.Second)}})
				lim := ratelimiting.Limit{Limit: limit, Window: time.Hour}
				v.proxy.DropShare(share)
				var admitted, errs atomic.Int64
				var wg sync.WaitGroup
				start := time.Now()
				for n := range nodes {
					for range 8 { // 8 callers per node
						wg.Go(func() {
							for range perNode / 8 {
								d, err := c.Nodes[n].Allow(context.Background(), c.Namespace(), "k", 1, lim)
								switch {
								case err != nil:
									errs.Add(1)
								case d.Allowed:
									admitted.Add(1)
								}
							}
						})
					}
				}
				wg.Wait()
				took := time.Since(start)
				v.proxy.DropShare(0)
				lost := v.proxy.Dropped()
				down := 0
				for _, in := range c.Nodes {
					if st := in.Stats(); len(st) > 0 {
						down += int(st[0].Sync.LocalHits)
					}
				}
				if err := c.Close(context.Background()); err != nil {
					t.Fatalf("close: %v", err)
				}
				stored, err := v.direct.GetWindow(context.Background(), c.Namespace(), "k", arith.WindowStart(start, time.Hour), time.Hour)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%s, %.0f%% of replies dropped: %d requests from %d nodes in %v, %d replies lost: %d admitted, %v in the store (limit %d)",
					name, share*100, nodes*perNode/8*8, nodes, took.Round(time.Millisecond), lost, admitted.Load(), stored, limit)
				if errs.Load() != 0 {
					t.Fatalf("%d errors", errs.Load())
				}
				if lost == 0 {
					t.Fatal("no reply was lost: the test tested nothing")
				}
				if admitted.Load() != limit || stored != limit {
					t.Fatalf("%d admitted, %v in the store: want exactly %d (%d hits decided on a node)", admitted.Load(), stored, limit, down)
				}
			})
		}
	}
}

// A hung store is seen: within two sync timeouts of the stop (SIGSTOP),
// ratesync_store_up's source (Stats.StoreUp) is false, in periodic and in
// synchronous mode; the sync or call that timed out counts as a push
// error; the log has one WARN line when the store goes down and one INFO
// when it is back, with how long it was down and what was pending.
func TestHungStoreIsSeen(t *testing.T) {
	const (
		syncTimeout = time.Second
		callTimeout = 500 * time.Millisecond
		stopFor     = 3 * time.Second
	)
	modes := []struct {
		name string
		rate time.Duration
	}{{"periodic", 200 * time.Millisecond}, {"synchronous", namespace.Synchronous}}
	for _, ps := range privateStores {
		for _, m := range modes {
			t.Run(ps.name+"/"+m.name, func(t *testing.T) {
				st := ps.open(t)
				logs := &lockedBuffer{}
				in := ratelimiting.NewInstance("seen", ratelimiting.WithLogger(slog.New(slog.NewJSONHandler(logs, nil))),
					ratelimiting.WithSyncTimeout(syncTimeout, callTimeout))
				t.Cleanup(func() { _ = in.Close(context.Background()) })
				t.Cleanup(func() {
					if t.Failed() {
						t.Logf("logs:\n%s\nstats: %+v", logs, in.Stats()[0].Sync)
					}
				})
				if err := in.New(namespace.Config{Name: "ns", SyncRate: m.rate, Strategy: nodeStore(t, ps.name, st.url), WindowSizes: []time.Duration{time.Hour}}); err != nil {
					t.Fatal(err)
				}
				stats := func() ratelimiting.SyncStats { return in.Stats()[0].Sync }
				ctx, cancel := context.WithCancel(context.Background())
				var hits sync.WaitGroup
				hits.Go(func() { // traffic all along
					for ctx.Err() == nil {
						_, _ = in.Increment(ctx, "ns", "k", time.Hour, 1)
						time.Sleep(10 * time.Millisecond)
					}
				})
				defer func() { cancel(); hits.Wait() }()
				eventually(t, 10*time.Second, "the store up, a good sync", func() bool { s := stats(); return s.StoreUp && !s.LastGood.IsZero() })
				errsBefore := stats().PushErrors

				st.pause(t)
				stopped := time.Now()
				seen := eventually(t, 2*syncTimeout+time.Second, "store_up 0", func() bool { return !stats().StoreUp })
				time.Sleep(time.Until(stopped.Add(stopFor)))
				pushErrors := stats().PushErrors - errsBefore
				st.resume(t)
				back := eventually(t, 10*time.Second, "store_up 1 again", func() bool { return stats().StoreUp })
				t.Logf("%s %s: store_up 0 %v after the stop (two sync timeouts: %v), 1 again %v after it ended; %d push errors",
					ps.name, m.name, seen.Round(time.Millisecond), 2*syncTimeout, back.Round(time.Millisecond), pushErrors)
				if seen > 2*syncTimeout {
					t.Fatalf("store_up 0 only %v after the stop, want within %v", seen, 2*syncTimeout)
				}
				if pushErrors == 0 {
					t.Fatal("no push error counted for the timed-out exchange")
				}
				cancel()
				hits.Wait()

				var warns, infos []map[string]any
				for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
					var rec map[string]any
					if err := json.Unmarshal([]byte(line), &rec); err != nil {
						t.Fatalf("log line not JSON: %q", line)
					}
					msg, _ := rec["msg"].(string)
					switch {
					case rec["level"] == "WARN" && strings.Contains(msg, "store down"):
						warns = append(warns, rec)
					case rec["level"] == "INFO" && strings.Contains(msg, "store back up"):
						infos = append(infos, rec)
					}
				}
				if len(warns) != 1 || len(infos) != 1 {
					t.Fatalf("%d WARN and %d INFO lines about the store, want one of each:\n%s", len(warns), len(infos), logs)
				}
				downFor, err := time.ParseDuration(fmt.Sprint(infos[0]["down_for"]))
				if err != nil || downFor < stopFor/2 {
					t.Fatalf("INFO line's down_for %v (%v): want about the stop, %v", infos[0]["down_for"], err, stopFor)
				}
				if p, _ := infos[0]["pending"].(float64); p <= 0 {
					t.Fatalf("INFO line's pending %v: the hits counted meanwhile were pending", infos[0]["pending"])
				}
				t.Logf("WARN: %v\nINFO: %v", warns[0], infos[0])
			})
		}
	}
}

// nodeStore opens a store of kind on url, as a node would.
func nodeStore(t *testing.T, kind, url string) strategy.Strategy {
	t.Helper()
	if kind == "redis" {
		opt, err := goredis.ParseURL(url)
		if err != nil {
			t.Fatal(err)
		}
		client := goredis.NewClient(opt)
		t.Cleanup(func() { _ = client.Close() })
		s, err := redis.New(client, redis.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s, err := postgres.New(context.Background(), (&testenv.Postgres{URL: url}).Pool(t), postgres.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// lockedBuffer is a log's output, written by several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
