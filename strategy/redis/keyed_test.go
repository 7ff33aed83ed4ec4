package redis_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/arith"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesync/ratesync/internal/testenv"
	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/memory"
	"github.com/ratesync/ratesync/strategy/redis"
)

// sameState reports whether two keyed states are the same, bit for bit.
func sameState(a, b strategy.BucketState) bool {
	return a.Key == b.Key && a.Kind == b.Kind && a.Window == b.Window && a.At == b.At &&
		math.Float64bits(a.Level) == math.Float64bits(b.Level) && a.RetryAt == b.RetryAt
}

// Redis decides anchored windows and logs as the memory store does, the
// reference, and holds them the same, bit for bit: the same random runs of
// checks (several limits, costs and limits that doubles hold inexactly,
// clocks that repeat a millisecond, go back or jump past the window,
// replays) and pushes of diffs (at instants before, between and after the
// entries, merged with an entry of their millisecond) give the same
// results from both.
func TestKeyedMatchesMemory(t *testing.T) {
	ctx := context.Background()
	costs := []float64{1, 1, 2, 0.5, 0.1, 0.3, 1.0 / 3, 0, 2.75}
	limits := []float64{3, 5, 1.5, 0.7, 10.0 / 3}
	windows := []time.Duration{50 * time.Millisecond, time.Second, 7 * time.Millisecond}
	for run := range 6 {
		t.Run(fmt.Sprintf("run %d", run), func(t *testing.T) {
			rnd := rand.New(rand.NewPCG(uint64(run), 99))
			mem := memory.New()
			s, _ := newStore(t, redis.Config{Shards: 1 + run%3})
			type limit struct {
				kind   uint8
				window time.Duration
			}
			var lims []limit
			for _, kind := range []uint8{strategy.KindAnchored, strategy.KindLog} {
				for _, w := range windows {
					lims = append(lims, limit{kind, w})
				}
			}
			keys := []string{"a", "b", "{c}"}
			now := base.UnixMilli()
			seq := uint64(0)
			var (
				last    []strategy.Check // the last call's checks, to replay
				lastSeq uint64
			)
			for step := range 400 {
				switch r := rnd.IntN(20); {
				case r < 7:
					now += rnd.Int64N(3) // the same ms, often
				case r < 15:
					now += rnd.Int64N(60)
				case r < 16:
					now -= rnd.Int64N(30) // a clock behind
				case r < 17:
					now += 2000 // every window closes
				default:
					now += rnd.Int64N(400)
				}
				if rnd.IntN(8) == 0 {
					var diffs []strategy.BucketDiff
					for range 1 + rnd.IntN(4) {
						l := lims[rnd.IntN(len(lims))]
						diffs = append(diffs, strategy.BucketDiff{Namespace: "ns", Key: keys[rnd.IntN(len(keys))], Kind: l.kind, Window: l.window,
							At: now - 40 + rnd.Int64N(60), Cost: costs[rnd.IntN(len(costs)-1)] + 0.25, Rate: 5})
					}
					seq++
					if run%3 != 0 {
						// Several shards: the push may leave the last call's
						// record (and decisions) in the shards it does not
						// touch, where the memory store has one record. A
						// node retries a call before it sends anything newer.
						last = nil
					}
					b := strategy.Batch{Node: "n", Seq: seq, Buckets: diffs}
					if err := mem.PushDiffs(ctx, b); err != nil {
						t.Fatal(err)
					}
					mustPush(t, s, b)
					continue
				}
				checks, cseq := last, lastSeq
				if len(last) == 0 || rnd.IntN(10) != 0 {
					checks = nil
					for range 1 + rnd.IntN(5) {
						c := strategy.Check{Namespace: "ns", Key: keys[rnd.IntN(len(keys))], Cost: costs[rnd.IntN(len(costs))], Now: time.UnixMilli(now + rnd.Int64N(2))}
						for range 1 + rnd.IntN(3) {
							l := lims[rnd.IntN(len(lims))]
							c.Limits = append(c.Limits, strategy.CheckLimit{Kind: l.kind, WindowSize: l.window, Limit: limits[rnd.IntN(len(limits))]})
						}
						checks = append(checks, c)
					}
					seq++
					cseq = seq
				} // else: a replay of the last call, with its seq
				last, lastSeq = checks, cseq
				want, err := mem.CheckAndCount(ctx, "n", cseq, checks)
				if err != nil {
					t.Fatal(err)
				}
				got, err := s.CheckAndCount(ctx, "n", cseq, checks)
				if err != nil {
					t.Fatal(err)
				}
				for i := range want {
					if got[i].Allowed != want[i].Allowed || len(got[i].Buckets) != len(want[i].Buckets) {
						t.Fatalf("step %d, check %d (%+v): got %+v, want %+v", step, i, checks[i], got[i], want[i])
					}
					for j := range want[i].Buckets {
						if !sameState(got[i].Buckets[j], want[i].Buckets[j]) {
							t.Fatalf("step %d, check %d (%+v), limit %d: state %+v, want %+v", step, i, checks[i], j, got[i].Buckets[j], want[i].Buckets[j])
						}
					}
				}
			}
		})
	}
}

// keyedKeys returns the keys of key's anchored window, log entries and log
// sum, of window w, in namespace ns of a one-shard store under prefix.
func keyedKeys(prefix, ns, key string, w time.Duration) (anchored, entries, sum string) {
	tag := "{" + prefix + ":" + ns + ":0}"
	ms := strconv.FormatInt(w.Milliseconds(), 10)
	return tag + ":a:" + ms + ":" + key, tag + ":l:" + ms + ":" + key, tag + ":ls:" + ms + ":" + key
}

// checkAt runs one check of cost at now on limit l of key, on its own seq.
func checkAt(t *testing.T, s *redis.Store, seq *uint64, key string, now int64, cost float64, l strategy.CheckLimit) strategy.CheckResult {
	t.Helper()
	*seq++
	res, err := s.CheckAndCount(context.Background(), "n", *seq, []strategy.Check{{Namespace: "ns", Key: key, Cost: cost, Now: time.UnixMilli(now), Limits: []strategy.CheckLimit{l}}})
	if err != nil {
		t.Fatal(err)
	}
	return res[0]
}

// An anchored window is one string key "at level" that expires a minute
// after the window closes, counted from the clock of the request that
// last changed it. A peek opens no window and writes nothing; a closed
// window reads as none and the next hit opens a new one.
func TestAnchoredKey(t *testing.T) {
	r := testenv.NewRedis(t)
	c := r.Client(t)
	s := storeOn(t, c, r.Prefix, redis.Config{Shards: 1})
	ctx := context.Background()
	w := 10 * time.Second
	key, _, _ := keyedKeys(r.Prefix, "ns", "k", w)
	lim := strategy.CheckLimit{Kind: strategy.KindAnchored, WindowSize: w, Limit: 3}
	t0 := base.UnixMilli() + 123
	var seq uint64

	if res := checkAt(t, s, &seq, "k", t0, 0, lim); !res.Allowed || c.Exists(ctx, key).Val() != 0 {
		t.Fatalf("a peek: %+v, key exists %d; want allowed and no key", res, c.Exists(ctx, key).Val())
	}
	since := time.Now()
	checkAt(t, s, &seq, "k", t0, 1, lim)
	if v := c.Get(ctx, key).Val(); v != strconv.FormatInt(t0, 10)+" 1" {
		t.Fatalf("value %q, want \"<at> 1\"", v)
	}
	pttlAbout(t, c, key, w+time.Minute, since)
	since = time.Now()
	if res := checkAt(t, s, &seq, "k", t0+4000, 1.5, lim); !res.Allowed || res.Buckets[0].Level != 2.5 || res.Buckets[0].At != t0 {
		t.Fatalf("a second hit 4 s later: %+v, want allowed, 2.5 since %d", res, t0)
	}
	pttlAbout(t, c, key, w+time.Minute-4*time.Second, since) // from the later clock: the same end
	if res := checkAt(t, s, &seq, "k", t0+9999, 1, lim); res.Allowed || res.Buckets[0].Level != 2.5 {
		t.Fatalf("over the limit: %+v, want denied, 2.5", res)
	}
	// Closed, though the key is still there: none, and a new window.
	if res := checkAt(t, s, &seq, "k", t0+10_000, 0, lim); !res.Allowed || res.Buckets[0] != (strategy.BucketState{Key: "k", Kind: strategy.KindAnchored, Window: w}) {
		t.Fatalf("a peek when the window closed: %+v, want no window", res)
	}
	if res := checkAt(t, s, &seq, "k", t0+10_001, 3, lim); !res.Allowed || res.Buckets[0].At != t0+10_001 || res.Buckets[0].Level != 3 {
		t.Fatalf("the next hit: %+v, want a new window of 3 at %d", res, t0+10_001)
	}
	c.Del(ctx, key) // expired: none
	if res := checkAt(t, s, &seq, "k", t0+10_002, 3, lim); !res.Allowed || res.Buckets[0].At != t0+10_002 || res.Buckets[0].Level != 3 {
		t.Fatalf("after the key expired: %+v, want a new window of 3", res)
	}
	if n := c.MemoryUsage(ctx, key).Val(); n > 200 {
		t.Errorf("an anchored window takes %d bytes (MEMORY USAGE), want it small", n)
	}
}

// A log is a sorted set of its entries, one per ms ("at:cost", hits of one
// ms merged), and a string "newest sum". Both expire a minute after the
// newest entry stops weighing, counted from the clock of the request that
// last changed the log. A check trims the entries that no longer weigh;
// once none weighs, both keys go. A peek writes nothing.
func TestLogKeys(t *testing.T) {
	r := testenv.NewRedis(t)
	c := r.Client(t)
	s := storeOn(t, c, r.Prefix, redis.Config{Shards: 1})
	ctx := context.Background()
	w := 10 * time.Second
	_, entries, sum := keyedKeys(r.Prefix, "ns", "k", w)
	lim := strategy.CheckLimit{Kind: strategy.KindLog, WindowSize: w, Limit: 100}
	t0 := base.UnixMilli() + 77
	var seq uint64

	if res := checkAt(t, s, &seq, "k", t0, 0, lim); !res.Allowed || c.Exists(ctx, entries, sum).Val() != 0 {
		t.Fatalf("a peek of an empty log: %+v; want allowed and no keys", res)
	}
	var lg arith.Log // the reference

	for _, cost := range []float64{1, 0.5, 1} { // one ms: one entry
		checkAt(t, s, &seq, "k", t0, cost, lim)
		lg.Add(t0, cost)
	}
	checkAt(t, s, &seq, "k", t0+1, 0.1, lim)
	since := time.Now()
	res := checkAt(t, s, &seq, "k", t0+1, 0.2, lim)
	lg.Add(t0+1, 0.1)
	lg.Add(t0+1, 0.2)
	if !res.Allowed || res.Buckets[0].At != t0+1 || res.Buckets[0].Level != lg.Sum {
		t.Fatalf("hits: %+v, want allowed, newest %d, sum %v", res, t0+1, lg.Sum)
	}
	members := c.ZRangeWithScores(ctx, entries, 0, -1).Val()
	want := []goredis.Z{{Score: float64(t0), Member: fmt.Sprintf("%d:2.5", t0)}, {Score: float64(t0 + 1), Member: fmt.Sprintf("%d:%.17g", t0+1, lg.Entries[1].Cost)}}
	if fmt.Sprint(members) != fmt.Sprint(want) {
		t.Fatalf("entries %v, want %v (hits of one ms merged)", members, want)
	}
	if v := c.Get(ctx, sum).Val(); v != fmt.Sprintf("%d %.17g", t0+1, lg.Sum) {
		t.Fatalf("sum %q, want \"<newest> <sum>\"", v)
	}
	for _, k := range []string{entries, sum} {
		pttlAbout(t, c, k, w+time.Minute-time.Millisecond, since) // from t0+1, the newest
	}

	// 5 s later, a hit: the TTLs follow its clock and the newest entry.
	since = time.Now()
	checkAt(t, s, &seq, "k", t0+5000, 1, lim)
	for _, k := range []string{entries, sum} {
		pttlAbout(t, c, k, w+time.Minute, since)
	}
	lg.Add(t0+5000, 1)
	// When the first entry stops weighing, a check trims it, even a peek.
	lg.Trim(t0+10_000, w.Milliseconds())
	if res := checkAt(t, s, &seq, "k", t0+10_000, 0, lim); res.Buckets[0].Level != lg.Sum {
		t.Fatalf("after the first entry: %+v, want sum %v", res, lg.Sum)
	}
	if n := c.ZCard(ctx, entries).Val(); n != 2 || c.ZCount(ctx, entries, "-inf", strconv.FormatInt(t0, 10)).Val() != 0 {
		t.Fatalf("%d entries, want 2: the one at %d trimmed", n, t0)
	}
	// When the newest stops weighing, the log is empty: both keys go.
	if res := checkAt(t, s, &seq, "k", t0+15_000, 0, lim); res.Buckets[0] != (strategy.BucketState{Key: "k", Kind: strategy.KindLog, Window: w}) {
		t.Fatalf("when every entry stopped weighing: %+v, want an empty log", res)
	}
	if n := c.Exists(ctx, entries, sum).Val(); n != 0 {
		t.Fatalf("%d keys left of an empty log, want none", n)
	}
}

// Pushed log diffs sort in at their instant, before the newest entry too,
// and merge with an entry of their ms; anchored diffs open or join a
// window at theirs. The keys' TTLs count from the diffs' instants.
func TestKeyedDiffs(t *testing.T) {
	r := testenv.NewRedis(t)
	c := r.Client(t)
	s := storeOn(t, c, r.Prefix, redis.Config{Shards: 1})
	ctx := context.Background()
	w := time.Second
	anchored, entries, _ := keyedKeys(r.Prefix, "ns", "k", w)
	t0 := base.UnixMilli()
	d := func(kind uint8, at int64, cost float64) strategy.BucketDiff {
		return strategy.BucketDiff{Namespace: "ns", Key: "k", Kind: kind, Window: w, At: at, Cost: cost, Rate: 10}
	}
	mustPush(t, s, strategy.Batch{Node: "n", Seq: 1, Buckets: []strategy.BucketDiff{
		d(strategy.KindLog, t0+30, 1), d(strategy.KindLog, t0+10, 2), d(strategy.KindLog, t0+20, 3), d(strategy.KindLog, t0+10, 0.5),
		d(strategy.KindAnchored, t0+5, 1), d(strategy.KindAnchored, t0+500, 2),
	}})
	mustPush(t, s, strategy.Batch{Node: "n", Seq: 2, Buckets: []strategy.BucketDiff{d(strategy.KindLog, t0+20, 1), d(strategy.KindLog, t0+40, 1)}})
	got := fmt.Sprint(c.ZRange(ctx, entries, 0, -1).Val())
	if want := fmt.Sprintf("[%d:2.5 %d:4 %d:1 %d:1]", t0+10, t0+20, t0+30, t0+40); got != want {
		t.Fatalf("entries %s, want %s", got, want)
	}
	if v := c.Get(ctx, anchored).Val(); v != fmt.Sprintf("%d 3", t0+5) {
		t.Fatalf("anchored window %q, want opened at %d holding 3", v, t0+5)
	}
	var seq uint64 = 10
	res := checkAt(t, s, &seq, "k", t0+1010, 0, strategy.CheckLimit{Kind: strategy.KindLog, WindowSize: w, Limit: 9})
	if res.Buckets[0].At != t0+40 || res.Buckets[0].Level != 6 {
		t.Fatalf("log after the pushes, at +1010: %+v, want newest +40, sum 6 (the entry at +10 trimmed)", res)
	}
}

// Each log a script call reads is read once and written once, whatever
// the number of hits on it: for a hot key, its sum's GET and SET, a trim
// that finds nothing (ZRANGEBYSCORE), and one write of the hits' entry
// (ZADD), which replaces the stored one of its ms if any (read by score,
// and ZREM). The first call of a log checks that no stale entries lie
// where its entries go (TYPE). A replay reads and writes nothing more.
// Anchored windows take one GET and one SET.
func TestKeyedCallsPerBatch(t *testing.T) {
	r := testenv.PrivateRedis(t)
	c := r.Client(t)
	s := storeOn(t, c, r.Prefix, redis.Config{Shards: 1})
	ctx := context.Background()
	const n = 32
	checks := func(kind uint8, now time.Time) []strategy.Check {
		var cs []strategy.Check
		for range n {
			cs = append(cs, strategy.Check{Namespace: "ns", Key: "hot", Cost: 1, Now: now,
				Limits: []strategy.CheckLimit{{Kind: kind, WindowSize: time.Second, Limit: 1e9}}})
		}
		return cs
	}
	later := base.Add(time.Millisecond)
	for _, tc := range []struct {
		name string
		run  func() error
		want map[string]int // GET and SET: the lane record's and the state's
	}{
		{"log, new", func() error { _, err := s.CheckAndCount(ctx, "n", 1, checks(strategy.KindLog, base)); return err },
			map[string]int{"evalsha": 1, "get": 2, "set": 2, "type": 1, "zrangebyscore": 0, "zadd": 1, "zrem": 0, "pexpire": 1}},
		{"log, the same ms", func() error { _, err := s.CheckAndCount(ctx, "n", 2, checks(strategy.KindLog, base)); return err },
			map[string]int{"evalsha": 1, "get": 2, "set": 2, "type": 0, "zrangebyscore": 2, "zadd": 1, "zrem": 1, "pexpire": 1}},
		{"log, a later ms", func() error { _, err := s.CheckAndCount(ctx, "n", 3, checks(strategy.KindLog, later)); return err },
			map[string]int{"evalsha": 1, "get": 2, "set": 2, "type": 0, "zrangebyscore": 1, "zadd": 1, "zrem": 0, "pexpire": 1}},
		{"log, replay", func() error { _, err := s.CheckAndCount(ctx, "n", 3, checks(strategy.KindLog, later)); return err },
			map[string]int{"evalsha": 1, "get": 2, "set": 0, "zrangebyscore": 1, "zadd": 0, "zrem": 0, "pexpire": 0}},
		{"anchored", func() error { _, err := s.CheckAndCount(ctx, "n", 4, checks(strategy.KindAnchored, base)); return err },
			map[string]int{"evalsha": 1, "get": 2, "set": 2}},
	} {
		got := commandCalls(t, c, tc.run)
		for k, w := range tc.want {
			if got[k] != w {
				t.Errorf("%s: %s: %d calls, want %d (all: %v)", tc.name, k, got[k], w, got)
			}
		}
	}
	res, err := s.CheckAndCount(ctx, "n", 5, checks(strategy.KindLog, later)[:1])
	if err != nil || res[0].Buckets[0].Level != 3*n+1 {
		t.Fatalf("log after the calls: %+v, %v; want sum %d", res, err, 3*n+1)
	}
}

// A key of an anchored window or a log that holds something else fails
// the requests that read it, not the others; the batch is recorded, so
// that a retry counts nothing again.
func TestKeyedKeysHoldingSomethingElse(t *testing.T) {
	r := testenv.NewRedis(t)
	c := r.Client(t)
	s := storeOn(t, c, r.Prefix, redis.Config{Shards: 1})
	ctx := context.Background()
	w := time.Second
	anchored, entries, sum := keyedKeys(r.Prefix, "ns", "bad", w)
	for _, tc := range []struct {
		name string
		kind uint8
		set  func()
		want string
	}{
		{"anchored window: text", strategy.KindAnchored, func() { c.Set(ctx, anchored, "not a window", 0) }, "holds no anchored window"},
		{"anchored window: a hash", strategy.KindAnchored, func() { c.HSet(ctx, anchored, "at", 1) }, "holds no anchored window"},
		{"log sum: text", strategy.KindLog, func() { c.Set(ctx, sum, "x", 0) }, "holds no log"},
		{"log entries: a string", strategy.KindLog, func() { c.Set(ctx, entries, "x", 0) }, "holds no log"},
		{"log entries: not ours", strategy.KindLog, func() {
			c.Set(ctx, sum, fmt.Sprintf("%d 1", base.UnixMilli()), 0)
			c.ZAdd(ctx, entries, goredis.Z{Score: 1, Member: "x"}, goredis.Z{Score: float64(base.UnixMilli()), Member: "y"}) // a check trims x, a push merges with y
		}, "holds no log"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, good, goodSum := keyedKeys(r.Prefix, "ns", "good", w)
			goodAnchored, _, _ := keyedKeys(r.Prefix, "ns", "good", w)
			c.Del(ctx, anchored, entries, sum, good, goodSum, goodAnchored)
			tc.set()
			lim := strategy.CheckLimit{Kind: tc.kind, WindowSize: w, Limit: 5}
			checks := []strategy.Check{
				{Namespace: "ns", Key: "good", Cost: 1, Now: base.Add(-w), Limits: []strategy.CheckLimit{lim}},
				{Namespace: "ns", Key: "bad", Cost: 1, Now: base, Limits: []strategy.CheckLimit{lim}},
				{Namespace: "ns", Key: "good", Cost: 1, Now: base, Limits: []strategy.CheckLimit{lim}},
			}
			node := "n-" + tc.name
			for try := range 2 {
				if res, err := s.CheckAndCount(ctx, node, 1, checks); err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("try %d: CheckAndCount = %+v, %v; want an error containing %q", try, res, err, tc.want)
				}
			}
			b := strategy.Batch{Node: node, Seq: 2, Buckets: []strategy.BucketDiff{
				{Namespace: "ns", Key: "bad", Kind: tc.kind, Window: w, At: base.UnixMilli(), Cost: 1, Rate: 5},
				{Namespace: "ns", Key: "good", Kind: tc.kind, Window: w, At: base.UnixMilli(), Cost: 1, Rate: 5},
			}}
			if err := s.PushDiffs(ctx, b); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("PushDiffs = %v, want an error containing %q", err, tc.want)
			}
			mustPush(t, s, b) // recorded: nothing again
			res, err := s.CheckAndCount(ctx, node, 3, checks[2:])
			if err != nil || res[0].Buckets[0].Level != 3 {
				t.Fatalf("the good key after: %+v, %v; want 3 counted (2 checks, 1 diff)", res, err)
			}
		})
	}
}

// Every key of an anchored window or a log lives in the Cluster slot of
// its shard, with the lane records of the scripts that write it.
func TestKeyedKeysStayInTheirShardsSlot(t *testing.T) {
	cl := testenv.RedisCluster(t)
	c := cl.Client(t)
	prefix := testenv.Name("t")
	s := storeOn(t, c, prefix, redis.Config{})
	ctx := context.Background()
	keys := []string{"k", "{k}", "}{", "a{b}c", "user:42", "{t}:l:1000"}
	var diffs []strategy.BucketDiff
	for _, k := range keys {
		for _, kind := range []uint8{strategy.KindAnchored, strategy.KindLog} {
			diffs = append(diffs, strategy.BucketDiff{Namespace: "ns", Key: k, Kind: kind, Window: time.Second, At: base.UnixMilli(), Cost: 1, Rate: 5})
		}
	}
	mustPush(t, s, strategy.Batch{Node: "push", Seq: 1, Diffs: nil, Buckets: diffs})
	for i, k := range keys {
		res, err := s.CheckAndCount(ctx, "check", uint64(i+1), []strategy.Check{{Namespace: "ns", Key: k, Cost: 1, Now: base, Limits: []strategy.CheckLimit{
			{Kind: strategy.KindAnchored, WindowSize: time.Second, Limit: 5}, {Kind: strategy.KindLog, WindowSize: time.Second, Limit: 5},
		}}})
		if err != nil || !res[0].Allowed || res[0].Buckets[0].Level != 2 || res[0].Buckets[1].Level != 2 {
			t.Fatalf("check of %q = %+v, %v; want allowed, 2 in each", k, res, err)
		}
	}
	var mu sync.Mutex
	found := map[string]bool{} // a pattern may match another's keys: "{t}:l:1000" holds ":l:"
	err := c.ForEachMaster(ctx, func(ctx context.Context, n *goredis.Client) error {
		for _, pattern := range []string{"{" + prefix + ":*}:a:*", "{" + prefix + ":*}:l:*", "{" + prefix + ":*}:ls:*"} {
			it := n.Scan(ctx, 0, pattern, 1000).Iterator()
			for it.Next(ctx) {
				key := it.Val()
				mu.Lock()
				found[key] = true
				mu.Unlock()
				tag := key[:strings.IndexByte(key, '}')+1]
				for _, lane := range []string{tag + ":lane:push", tag + ":lane:check"} {
					if ks, ls := n.ClusterKeySlot(ctx, key).Val(), n.ClusterKeySlot(ctx, lane).Val(); ks != ls || n.Exists(ctx, lane).Val() != 1 {
						t.Errorf("key %q in slot %d, its lane record %q in slot %d (on this node: %d)", key, ks, lane, ls, n.Exists(ctx, lane).Val())
					}
				}
			}
			if err := it.Err(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 3*len(keys) {
		t.Fatalf("found %d keys, want %d (3 per counter key)", len(found), 3*len(keys))
	}
}

// A log's sum key is its record: entries left without it (the sum
// evicted, or deleted) are stale, and go at the log's next use.
func TestLogEntriesWithoutTheirSumGo(t *testing.T) {
	r := testenv.NewRedis(t)
	c := r.Client(t)
	s := storeOn(t, c, r.Prefix, redis.Config{Shards: 1})
	ctx := context.Background()
	w := time.Second
	_, entries, _ := keyedKeys(r.Prefix, "ns", "k", w)
	c.ZAdd(ctx, entries, goredis.Z{Score: float64(base.UnixMilli() - 5), Member: fmt.Sprintf("%d:3", base.UnixMilli()-5)})
	var seq uint64
	res := checkAt(t, s, &seq, "k", base.UnixMilli(), 1, strategy.CheckLimit{Kind: strategy.KindLog, WindowSize: w, Limit: 2})
	if !res.Allowed || res.Buckets[0].Level != 1 {
		t.Fatalf("check = %+v, want allowed, sum 1: the stale entry gone", res)
	}
	if n := c.ZCard(ctx, entries).Val(); n != 1 {
		t.Fatalf("%d entries, want 1", n)
	}
}

// A log at 10,000 entries (one per ms of its window): the scripts push
// them, decide on them, walk them all for a denied request's RetryAt,
// trim half of them in one check and the rest at once, exactly as
// arith.Log does, with no Lua stack or reply limit in the way.
func TestLogAtItsBound(t *testing.T) {
	r := testenv.NewRedis(t)
	c := r.Client(t)
	s := storeOn(t, c, r.Prefix, redis.Config{Shards: 1})
	ctx := context.Background()
	const n = 10_000
	w := n * time.Millisecond
	_, entries, sum := keyedKeys(r.Prefix, "ns", "k", w)
	t0 := base.UnixMilli()
	var lg arith.Log // the reference
	var diffs []strategy.BucketDiff
	costs := []float64{1, 0.1, 1.0 / 3, 2}
	for i := range n {
		d := strategy.BucketDiff{Namespace: "ns", Key: "k", Kind: strategy.KindLog, Window: w, At: t0 + int64(i), Cost: costs[i%len(costs)], Rate: 1e9}
		diffs = append(diffs, d)
		lg.Add(d.At, d.Cost)
	}
	t1 := time.Now()
	mustPush(t, s, strategy.Batch{Node: "push", Seq: 1, Buckets: diffs})
	t.Logf("push of %d log diffs: %v", n, time.Since(t1))
	if got := c.ZCard(ctx, entries).Val(); got != n {
		t.Fatalf("%d entries, want %d", got, n)
	}
	mem := c.MemoryUsage(ctx, entries, 0).Val() + c.MemoryUsage(ctx, sum).Val()
	t.Logf("MEMORY USAGE of the log: %d bytes, %.0f an entry", mem, float64(mem)/n)
	if mem > 200*n {
		t.Errorf("a log of %d entries takes %d bytes: want at most 200 an entry", n, mem)
	}
	var seq uint64
	check := func(now int64, cost, limit float64) strategy.BucketState {
		t.Helper()
		t1 := time.Now()
		res := checkAt(t, s, &seq, "k", now, cost, strategy.CheckLimit{Kind: strategy.KindLog, WindowSize: w, Limit: limit})
		t.Logf("check at +%d, cost %v: %v", now-t0, cost, time.Since(t1))
		return res.Buckets[0]
	}
	same := func(what string, got strategy.BucketState, want arith.Log, retry int64) {
		t.Helper()
		if got.At != want.Newest() || math.Float64bits(got.Level) != math.Float64bits(want.Sum) || got.RetryAt != retry {
			t.Fatalf("%s: %+v, want newest %d, sum %v, retry at %d", what, got, want.Newest(), want.Sum, retry)
		}
	}

	// Denied: a cost of the whole limit fits once every entry is gone.
	now := t0 + n - 1
	limit := lg.Sum
	same("a denial that waits for every entry", check(now, limit, limit), lg, arith.RetryAt(lg.Entries, lg.Sum, limit, limit, w.Milliseconds()))
	if r := arith.RetryAt(lg.Entries, lg.Sum, limit, limit, w.Milliseconds()); r != t0+n-1+n {
		t.Fatalf("reference RetryAt %d: want the newest entry's end, %d", r, t0+n-1+n)
	}
	same("a denial that waits for half", check(now, limit/2, limit), lg, arith.RetryAt(lg.Entries, lg.Sum, limit/2, limit, w.Milliseconds()))

	// Half the entries stop weighing: one check trims 5,000.
	now = t0 + n + n/2 - 1
	lg.Trim(now, w.Milliseconds())
	same("after trimming half", check(now, 0, limit), lg, 0)
	if got := c.ZCard(ctx, entries).Val(); got != n/2 || len(lg.Entries) != n/2 {
		t.Fatalf("%d entries (reference %d), want %d", got, len(lg.Entries), n/2)
	}
	// All of them: the keys go.
	same("after every entry", check(t0+3*n, 0, limit), arith.Log{}, 0)
	if got := c.Exists(ctx, entries, sum).Val(); got != 0 {
		t.Fatalf("%d keys left, want none", got)
	}
}
