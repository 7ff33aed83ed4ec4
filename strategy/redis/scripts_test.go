package redis_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/arith"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesync/ratesync/internal/testenv"
	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/redis"
)

// The scripts sum the increments of a (hash, field) and write them with
// one HINCRBYFLOAT only where that is exact; everywhere the totals, the
// decisions and the stored strings are those of one HINCRBYFLOAT per
// increment, as sent by the client, one after the other.
func TestScriptsMatchSequentialIncrements(t *testing.T) {
	r := testenv.NewRedis(t)
	c := r.Client(t)
	s := storeOn(t, c, r.Prefix, redis.Config{Shards: 1})
	ctx := context.Background()
	scratch := "{" + r.Prefix + "}:sequential"
	t.Cleanup(func() { c.Del(ctx, scratch) })

	// sequential returns the replies of one HINCRBYFLOAT per value, each sent
	// as the store sends it, on a field starting from initial ("" for none).
	sequential := func(t *testing.T, field, initial string, values []float64) []string {
		t.Helper()
		if initial != "" {
			if err := c.HSet(ctx, scratch, field, initial).Err(); err != nil {
				t.Fatal(err)
			}
		}
		var out []string
		for _, v := range values {
			got, err := c.Do(ctx, "HINCRBYFLOAT", scratch, field, strconv.FormatFloat(v, 'g', -1, 64)).Text()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, got)
		}
		return out
	}
	hash := func(start time.Time, size time.Duration) string {
		return fmt.Sprintf("{%s:ns:0}:%d:%d", r.Prefix, size.Milliseconds(), start.UnixMilli())
	}
	parse := func(t *testing.T, v string) float64 {
		t.Helper()
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}

	size := time.Minute
	start := arith.WindowStart(base, size)
	seq := uint64(0)
	for i, tc := range []struct {
		name    string
		initial string // the field's value before the batch
		values  []float64
	}{
		{"ones", "", []float64{1, 1, 1, 1, 1}},
		{"halves and quarters", "2.5", []float64{0.5, 0.25, 1.5, 0.0625, 3}},
		{"tenths", "", []float64{0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1}},
		{"thirds after ones", "", []float64{1, 1, 1.0 / 3, 1, 1.0 / 3, 1, 1}},
		{"ones on a tenth", "0.1", []float64{1, 1, 1}},
		{"big", "99999999998", []float64{1, 1, 1, 1}},
		{"past 2^53", "9007199254740990", []float64{1, 1, 1}},
		{"negative", "", []float64{5, -1, -0.5, -3.5, -1, 2}},
		{"tiny", "", []float64{1e-300, 1, 1e-300, 2}},
		{"zero", "", []float64{0, 0, 1, 0}},
		{"negative zero", "", []float64{math.Copysign(0, -1), 1, math.Copysign(0, -1)}},
		{"integers on a half", "2.5", []float64{1, 1, 2}},
		{"integers past 1e6", "", []float64{1e6, 2e6, 1, 1e300, -1e300}},
		{"past int64", "9223372036854775806", []float64{1, 1, 1}},
	} {
		t.Run("push and count/"+tc.name, func(t *testing.T) {
			key := fmt.Sprintf("p%d", i)
			want := sequential(t, key, tc.initial, tc.values)
			if tc.initial != "" {
				if err := c.HSet(ctx, hash(start, size), key, tc.initial).Err(); err != nil {
					t.Fatal(err)
				}
			}
			var diffs []strategy.Diff
			for _, v := range tc.values {
				diffs = append(diffs, diff("ns", key, start, size, v))
			}
			seq++
			got, err := s.PushAndCount(ctx, strategy.Batch{Node: "n", Seq: seq, Diffs: diffs})
			if err != nil {
				t.Fatal(err)
			}
			for j := range want {
				if w := parse(t, want[j]); math.Float64bits(got[j].Current) != math.Float64bits(w) {
					t.Errorf("diff %d: total %v, want %v (%s) as with one HINCRBYFLOAT per diff", j, got[j].Current, w, want[j])
				}
			}
			if stored := c.HGet(ctx, hash(start, size), key).Val(); stored != want[len(want)-1] {
				t.Errorf("stored %q, want %q as with one HINCRBYFLOAT per diff", stored, want[len(want)-1])
			}
		})
		if slicesMin(tc.values) < 0 {
			continue // costs are not negative
		}
		t.Run("check and count/"+tc.name, func(t *testing.T) {
			key := fmt.Sprintf("c%d", i)
			want := sequential(t, key, tc.initial, tc.values)
			if tc.initial != "" {
				if err := c.HSet(ctx, hash(start, size), key, tc.initial).Err(); err != nil {
					t.Fatal(err)
				}
			}
			var checks []strategy.Check
			for _, v := range tc.values {
				checks = append(checks, strategy.Check{Namespace: "ns", Key: key, Cost: v, Now: base, Limits: []strategy.CheckLimit{{WindowSize: size, Limit: 1e300}}})
			}
			seq++
			got, err := s.CheckAndCount(ctx, "n", seq, checks)
			if err != nil {
				t.Fatal(err)
			}
			for j := range want {
				if w := parse(t, want[j]); !got[j].Allowed || math.Float64bits(got[j].Totals[0].Current) != math.Float64bits(w) {
					t.Errorf("check %d: %+v, want allowed, current %v (%s) as with one HINCRBYFLOAT per check", j, got[j], w, want[j])
				}
			}
			if stored := c.HGet(ctx, hash(start, size), key).Val(); stored != want[len(want)-1] {
				t.Errorf("stored %q, want %q as with one HINCRBYFLOAT per check", stored, want[len(want)-1])
			}
		})
	}

	// Distinct keys take the scripts' other path: the same again, one value
	// per key.
	for _, mode := range []string{"push and count", "check and count"} {
		t.Run(mode+"/distinct keys", func(t *testing.T) {
			var (
				diffs  []strategy.Diff
				checks []strategy.Check
				want   []string
			)
			k := 0
			for _, initial := range []string{"", "2.5", "0.1", "99999999999", "9223372036854775807"} {
				for _, v := range []float64{1, math.Copysign(0, -1), 1e6, 3, 0.5, 0.1, -2, 1e300} {
					if mode == "check and count" && v < 0 {
						continue
					}
					k++
					key := fmt.Sprintf("%s-%d", mode, k)
					want = append(want, sequential(t, key, initial, []float64{v})[0])
					if initial != "" {
						if err := c.HSet(ctx, hash(start, size), key, initial).Err(); err != nil {
							t.Fatal(err)
						}
					}
					diffs = append(diffs, diff("ns", key, start, size, v))
					checks = append(checks, strategy.Check{Namespace: "ns", Key: key, Cost: v, Now: base, Limits: []strategy.CheckLimit{{WindowSize: size, Limit: math.MaxFloat64}}})
				}
			}
			seq++
			var got []float64
			if mode == "push and count" {
				totals, err := s.PushAndCount(ctx, strategy.Batch{Node: "n", Seq: seq, Diffs: diffs})
				if err != nil {
					t.Fatal(err)
				}
				for _, tot := range totals {
					got = append(got, tot.Current)
				}
			} else {
				res, err := s.CheckAndCount(ctx, "n", seq, checks)
				if err != nil {
					t.Fatal(err)
				}
				for j, r := range res {
					if !r.Allowed {
						t.Errorf("check %d (%+v): not allowed", j, checks[j])
					}
					got = append(got, r.Totals[0].Current)
				}
			}
			for j, d := range diffs {
				if w := parse(t, want[j]); math.Float64bits(got[j]) != math.Float64bits(w) && !(got[j] == 0 && w == 0) {
					t.Errorf("%s + %v: total %v, want %v (%s)", d.Key, d.Value, got[j], w, want[j])
				}
				if stored := c.HGet(ctx, hash(start, size), d.Key).Val(); stored != want[j] {
					t.Errorf("%s + %v: stored %q, want %q", d.Key, d.Value, stored, want[j])
				}
			}
		})
	}

	// Decisions see the counts Redis holds: three tenths make 0.3 for Redis
	// (0.30000000000000004 summed in doubles), so a fourth check of cost 0
	// passes a limit of 0.3.
	t.Run("limit reached by tenths", func(t *testing.T) {
		check := func(cost, limit float64) strategy.Check {
			return strategy.Check{Namespace: "ns", Key: "tenths", Cost: cost, Now: base, Limits: []strategy.CheckLimit{{WindowSize: size, Limit: limit, Fixed: true}}}
		}
		seq++
		got, err := s.CheckAndCount(ctx, "n", seq, []strategy.Check{check(0.1, 1), check(0.1, 1), check(0.1, 1), check(0, 0.3), check(0.1, 0.3)})
		if err != nil {
			t.Fatal(err)
		}
		for j, want := range []bool{true, true, true, true, false} {
			if got[j].Allowed != want {
				t.Errorf("check %d: %+v, want allowed %v", j, got[j], want)
			}
		}
		if v := count(t, s, "ns", "tenths", start, size); v != 0.3 {
			t.Errorf("count = %v, want 0.3", v)
		}
	})
}

// commandCalls returns the commands Redis ran during run, from INFO
// commandstats of c's server (reset first), with "increments" for HINCRBY
// and HINCRBYFLOAT together.
var commandCalls = redis.CommandCalls

func slicesMin(vs []float64) float64 {
	m := math.Inf(1)
	for _, v := range vs {
		m = min(m, v)
	}
	return m
}

// What the scripts cost Redis: each (hash, field) is read once and written
// once per batch, whatever the number of decisions on it (twice for
// PushAndCount: its first diff, then the sum of the others); a check call
// reads and writes each hash once, and its lane record once. A counted hash
// gets a PTTL (and a PEXPIRE when its TTL is short) only when the batch
// made a field in it. Counted with INFO commandstats of a private server.
func TestScriptCallsPerBatch(t *testing.T) {
	r := testenv.PrivateRedis(t)
	c := r.Client(t)
	s := storeOn(t, c, r.Prefix, redis.Config{Shards: 1})
	ctx := context.Background()
	size := time.Minute
	start := arith.WindowStart(base, size)
	calls := func(t *testing.T, run func() error) map[string]int { return commandCalls(t, c, run) }
	want := func(t *testing.T, got map[string]int, want map[string]int) {
		t.Helper()
		for k, w := range want {
			if got[k] != w {
				t.Errorf("%s: %d calls, want %d (all: %v)", k, got[k], w, got)
			}
		}
		if got["pexpire"] > got["pttl"] {
			t.Errorf("%d PEXPIREs for %d PTTLs: want at most one per hash (all: %v)", got["pexpire"], got["pttl"], got)
		}
	}
	const n = 32
	keys := func(prefix string) func(i int) string {
		return func(i int) string { return fmt.Sprintf("%s%d", prefix, i) }
	}
	checks := func(keys func(i int) string, now time.Time) []strategy.Check {
		var cs []strategy.Check
		for i := range n {
			cs = append(cs, strategy.Check{Namespace: "ns", Key: keys(i), Cost: 1, Now: now, Limits: []strategy.CheckLimit{{WindowSize: size, Limit: 1e9}}})
		}
		return cs
	}
	diffs := func(keys func(i int) string) []strategy.Diff {
		var ds []strategy.Diff
		for i := range n {
			ds = append(ds, diff("ns", keys(i), start, size, 1))
		}
		return ds
	}
	hot := func(int) string { return "hot" }
	spread := keys("k")

	t.Run("check, one hot key", func(t *testing.T) {
		// A new hash: its PTTL finds none, and its PEXPIRE sets it.
		got := calls(t, func() error { _, err := s.CheckAndCount(ctx, "n", 1, checks(hot, base)); return err })
		want(t, got, map[string]int{"evalsha": 1, "get": 1, "hget": 2, "hset": 1, "increments": 0, "pttl": 1, "pexpire": 1, "set": 1})
	})
	t.Run("check, distinct keys", func(t *testing.T) {
		// New fields of a hash that has its TTL: a PTTL (and a PEXPIRE
		// when that TTL ran down since by a millisecond: the checks' clock
		// stands still at base).
		got := calls(t, func() error { _, err := s.CheckAndCount(ctx, "n", 2, checks(spread, base)); return err })
		want(t, got, map[string]int{"evalsha": 1, "get": 1, "hget": 0, "hmget": 2, "hset": 1, "increments": 0, "pttl": 1, "set": 1})
	})
	t.Run("check, fields there", func(t *testing.T) {
		got := calls(t, func() error { _, err := s.CheckAndCount(ctx, "n", 3, checks(spread, base)); return err })
		want(t, got, map[string]int{"evalsha": 1, "get": 1, "hmget": 2, "hset": 1, "increments": 0, "pttl": 0, "pexpire": 0, "set": 1})
	})
	t.Run("push and count, one hot key", func(t *testing.T) {
		got := calls(t, func() error {
			_, err := s.PushAndCount(ctx, strategy.Batch{Node: "n", Seq: 4, Diffs: diffs(hot)})
			return err
		})
		want(t, got, map[string]int{"evalsha": 1, "get": 1, "hget": 1, "increments": 2, "pttl": 0, "set": 1})
	})
	t.Run("push and count, distinct keys", func(t *testing.T) {
		got := calls(t, func() error {
			_, err := s.PushAndCount(ctx, strategy.Batch{Node: "n", Seq: 5, Diffs: diffs(spread)})
			return err
		})
		want(t, got, map[string]int{"evalsha": 1, "get": 1, "hget": n, "increments": n, "pttl": 0, "set": 1})
	})
	t.Run("push, new keys", func(t *testing.T) {
		// (The push's TTL runs from the wall clock, the checks' from base,
		// in 2040: the push's is longer, and a PEXPIRE sets it.)
		got := calls(t, func() error {
			return s.PushDiffs(ctx, strategy.Batch{Node: "n", Seq: 6, Diffs: diffs(keys("new"))})
		})
		want(t, got, map[string]int{"evalsha": 1, "get": 1, "increments": n, "pttl": 1, "set": 1})
	})
	t.Run("replay reads each field once", func(t *testing.T) {
		got := calls(t, func() error { _, err := s.CheckAndCount(ctx, "n", 1, checks(hot, base)); return err })
		want(t, got, map[string]int{"evalsha": 1, "get": 1, "hget": 2, "hset": 0, "increments": 0, "pttl": 0, "pexpire": 0, "set": 0})
	})
}

// A field that holds no number fails the checks that read it, not the
// others; the batch is recorded, so that a retry counts nothing again.
// Distinct keys and repeated ones take different paths of check.lua.
func TestCheckOfAFieldHoldingNoNumber(t *testing.T) {
	r := testenv.NewRedis(t)
	c := r.Client(t)
	s := storeOn(t, c, r.Prefix, redis.Config{Shards: 1})
	ctx := context.Background()
	size := time.Minute
	start := arith.WindowStart(base, size)
	mustPush(t, s, strategy.Batch{Node: "n", Seq: 1, Diffs: []strategy.Diff{diff("ns", "bad", start, size, 1)}})
	if err := c.HSet(ctx, fmt.Sprintf("{%s:ns:0}:%d:%d", r.Prefix, size.Milliseconds(), start.UnixMilli()), "bad", "not a number").Err(); err != nil {
		t.Fatal(err)
	}
	check := func(key string) strategy.Check {
		return strategy.Check{Namespace: "ns", Key: key, Cost: 1, Now: base, Limits: []strategy.CheckLimit{{WindowSize: size, Limit: 10}}}
	}
	for _, tc := range []struct {
		name   string
		node   string
		checks []strategy.Check
		want   map[string]float64
	}{
		{"distinct keys", "n1", []strategy.Check{check("a"), check("bad"), check("b")}, map[string]float64{"a": 1, "b": 1}},
		{"repeated keys", "n2", []strategy.Check{check("c"), check("bad"), check("c"), check("bad"), check("d")}, map[string]float64{"c": 2, "d": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for try := range 2 {
				res, err := s.CheckAndCount(ctx, tc.node, 1, tc.checks)
				if err == nil || !strings.Contains(err.Error(), "holds no number") {
					t.Fatalf("try %d: CheckAndCount = %+v, %v; want the field holding no number reported", try, res, err)
				}
			}
			for k, want := range tc.want {
				if got := count(t, s, "ns", k, start, size); got != want {
					t.Errorf("%s = %v, want %v", k, got, want)
				}
			}
		})
	}
}

// Calls end with their context on a paused server, whether the client
// watches contexts (the call then runs on the caller's goroutine) or not (a
// helper goroutine runs it).
func TestCallsEndWithTheirContextBothWays(t *testing.T) {
	for _, watch := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", watch), func(t *testing.T) {
			t.Parallel()
			r := testenv.PrivateRedis(t)
			opt, err := goredis.ParseURL(r.URL)
			if err != nil {
				t.Fatal(err)
			}
			opt.ContextTimeoutEnabled = watch
			c := goredis.NewClient(opt)
			t.Cleanup(func() { _ = c.Close() })
			s := storeOn(t, c, r.Prefix, redis.Config{Timeout: 300 * time.Millisecond})
			start := arith.WindowStart(base, time.Minute)
			b := strategy.Batch{Node: "n", Seq: 1, Diffs: []strategy.Diff{diff("ns", "k", start, time.Minute, 1)}}
			if err := c.Ping(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			r.Pause(t)
			t.Cleanup(func() { r.Resume(t) })

			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			t0 := time.Now()
			_, err = s.PushAndCount(ctx, b)
			if err != context.DeadlineExceeded || time.Since(t0) > 2*time.Second {
				t.Fatalf("PushAndCount on a paused server = %v after %v, want context.DeadlineExceeded unchanged, promptly", err, time.Since(t0))
			}
			t0 = time.Now()
			_, err = s.CheckAndCount(context.Background(), "m", 1, []strategy.Check{{Namespace: "ns", Key: "other", Cost: 1, Now: base, Limits: []strategy.CheckLimit{{WindowSize: time.Minute, Limit: 10}}}})
			if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "Config.Timeout 300ms") || time.Since(t0) > 2*time.Second {
				t.Fatalf("CheckAndCount without a deadline = %v after %v, want the Timeout's deadline error", err, time.Since(t0))
			}
			if watch {
				// Canceled, not expired: the client notices between
				// commands, and the reply it awaits ends at Config.Timeout.
				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(50*time.Millisecond, cancel)
				t0 = time.Now()
				if _, err := s.GetWindow(ctx, "ns", "k", start, time.Minute); err == nil || time.Since(t0) > 2*time.Second {
					t.Fatalf("GetWindow canceled on a paused server = %v after %v, want an error within Config.Timeout", err, time.Since(t0))
				}
			}

			r.Resume(t)
			mustPush(t, s, b) // the syncer's retry: whether the abandoned push landed or not, counted once
			if got := count(t, s, "ns", "k", start, time.Minute); got != 1 {
				t.Fatalf("count = %v after the retry, want 1", got)
			}
		})
	}
}

// The decision tests: Redis decides every check as the node does
// (arith.WindowFits, Level, BucketFits, BucketAdd), bit for bit.
// Each check's limit sits on the boundary of its decision or one ulp
// either side, with counts, costs and rates that doubles hold inexactly.

// boundaries draws the values of the decision tests.
type boundaries struct{ rnd *rand.Rand }

var inexact = []float64{1, 2, 7, 0.1, 0.3, 1.0 / 3, 2.0 / 3, 0.5, 12.75, 1e6 + 0.1, 99.99}

// value returns a count or cost, 0 too when zero is set.
func (b boundaries) value(zero bool) float64 {
	if zero && b.rnd.IntN(len(inexact)+1) == 0 {
		return 0
	}
	return inexact[b.rnd.IntN(len(inexact))]
}

// near returns x or one of its neighbours, at least the smallest double
// above 0.
func (b boundaries) near(x float64) float64 {
	switch b.rnd.IntN(3) {
	case 0:
		x = math.Nextafter(x, math.Inf(-1))
	case 1:
		x = math.Nextafter(x, math.Inf(1))
	}
	return max(x, math.SmallestNonzeroFloat64)
}

// decide runs checks in two calls of half each (the first half of one
// limit per check, so that check.lua takes its path for those), passes
// each result to want, and fails t unless many checks pass and many fail.
func decide(t *testing.T, s *redis.Store, checks []strategy.Check, want func(i int, r strategy.CheckResult)) {
	t.Helper()
	allowed := 0
	for lo, half := 0, len(checks)/2; lo < len(checks); lo += half {
		res, err := s.CheckAndCount(context.Background(), "n", uint64(lo+1), checks[lo:lo+half])
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			want(lo+i, r)
			if r.Allowed {
				allowed++
			}
		}
	}
	if allowed < len(checks)/5 || allowed > len(checks)*4/5 {
		t.Fatalf("%d of %d checks allowed: want many of both, or the boundaries are not tested", allowed, len(checks))
	}
}

const decisions = 400

var far = base.Add(1000 * time.Hour)

func TestWindowDecisionsAreTheNodes(t *testing.T) {
	s, _ := newStore(t, redis.Config{})
	b := boundaries{rand.New(rand.NewPCG(1, 2))}
	sizes := []int64{7, 1000, 60000, 3600000}
	var diffs []strategy.Diff
	checks := make([]strategy.Check, decisions)
	for i := range checks {
		size := time.Duration(sizes[b.rnd.IntN(len(sizes))]) * time.Millisecond
		start := arith.WindowStart(far, size)
		key := fmt.Sprintf("w%d", i)
		diffs = append(diffs, diff("ns", key, start.Add(-size), size, b.value(false)), diff("ns", key, start, size, b.value(false)))
		now := start.Add(time.Duration(b.rnd.Int64N(size.Milliseconds())) * time.Millisecond)
		checks[i] = strategy.Check{Namespace: "ns", Key: key, Cost: b.value(true), Now: now, Limits: []strategy.CheckLimit{{WindowSize: size, Fixed: b.rnd.IntN(4) == 0}}}
	}
	totals, err := s.PushAndCount(context.Background(), strategy.Batch{Node: "seed", Seq: 1, Diffs: diffs})
	if err != nil {
		t.Fatal(err)
	}
	elapsed := func(c strategy.Check) int64 {
		return c.Now.UnixMilli() - arith.WindowStart(c.Now, c.Limits[0].WindowSize).UnixMilli()
	}
	for i := range checks {
		c, l := checks[i], &checks[i].Limits[0]
		cur, prev := totals[2*i+1].Current, totals[2*i+1].Previous // as Redis holds them
		x := cur + c.Cost
		if !l.Fixed {
			size := float64(l.WindowSize.Milliseconds())
			x = ((cur+c.Cost)*size + prev*(size-float64(elapsed(c)))) / size
		}
		l.Limit = b.near(x)
		if i >= decisions/2 {
			checks[i].Limits = append(checks[i].Limits, *l) // the same window again
		}
	}
	decide(t, s, checks, func(i int, r strategy.CheckResult) {
		c, l, tot := checks[i], checks[i].Limits[0], totals[2*i+1]
		if want := arith.WindowFits(tot.Current, tot.Previous, c.Cost, l.Limit, l.WindowSize.Milliseconds(), elapsed(c), l.Fixed); r.Allowed != want {
			t.Errorf("check %d (%+v; current %v, previous %v): allowed %v, the node decides %v", i, c, tot.Current, tot.Previous, r.Allowed, want)
		}
	})
}

func TestBucketDecisionsAreTheNodes(t *testing.T) {
	s, _ := newStore(t, redis.Config{})
	b := boundaries{rand.New(rand.NewPCG(3, 4))}
	windows := []int64{7, 1000, 3000, 60000}
	rates := []float64{1, 3, 1.0 / 3, 0.1, 7.0 / 3, 100, 0.001}
	t0 := far.UnixMilli()
	var diffs []strategy.BucketDiff
	var refs []strategy.BucketRef
	checks := make([]strategy.Check, decisions)
	for i := range checks {
		w := time.Duration(windows[b.rnd.IntN(len(windows))]) * time.Millisecond
		key, rate := fmt.Sprintf("b%d", i), rates[b.rnd.IntN(len(rates))]
		diffs = append(diffs, strategy.BucketDiff{Namespace: "ns", Key: key, Kind: 4, Window: w, At: t0, Cost: b.value(false), Rate: rate})
		refs = append(refs, strategy.BucketRef{Key: key, Kind: 4, Window: w})
		now := time.UnixMilli(t0 + b.rnd.Int64N(3*w.Milliseconds()) - w.Milliseconds()/2) // a clock behind the bucket too
		checks[i] = strategy.Check{Namespace: "ns", Key: key, Cost: b.value(true), Now: now, Limits: []strategy.CheckLimit{{Kind: 4, WindowSize: w, Limit: rate}}}
	}
	if err := s.PushDiffs(context.Background(), strategy.Batch{Node: "seed", Seq: 1, Buckets: diffs}); err != nil {
		t.Fatal(err)
	}
	held, err := s.GetBuckets(context.Background(), "ns", refs) // as Redis holds them
	if err != nil || len(held) != decisions {
		t.Fatalf("GetBuckets: %d buckets, %v", len(held), err)
	}
	for i := range checks {
		c, l := checks[i], &checks[i].Limits[0]
		w := float64(l.WindowSize.Milliseconds())
		l.Burst = b.near((arith.Level(held[i].Level, held[i].At, l.Limit, c.Now.UnixMilli()) + c.Cost*w) / w)
		if i >= decisions/2 {
			checks[i].Limits = append(checks[i].Limits, strategy.CheckLimit{WindowSize: time.Minute, Limit: 1e300})
		}
	}
	decide(t, s, checks, func(i int, r strategy.CheckResult) {
		c, l, st := checks[i], checks[i].Limits[0], held[i]
		now, w := c.Now.UnixMilli(), l.WindowSize.Milliseconds()
		want, after := arith.BucketFits(arith.Level(st.Level, st.At, l.Limit, now), c.Cost, l.Burst, w), st
		if want && c.Cost > 0 {
			after.Level, after.At = arith.BucketAdd(st.Level, st.At, l.Limit, c.Cost, w, now)
		}
		got := r.Buckets[0]
		if r.Allowed != want || got.At != after.At || math.Float64bits(got.Level) != math.Float64bits(after.Level) {
			t.Errorf("check %d (%+v; bucket %+v): allowed %v, bucket %+v; the node decides %v, bucket %+v", i, c, st, r.Allowed, got, want, after)
		}
	})
}

// A call whose shard group is one check of an integer cost counts it
// first (HINCRBY) and reads only the previous window; when the check does
// not pass, the count is taken back: the field holds what it held, and a
// field that held none holds none again (one that held 0 holds none: the
// same count). Decisions and counts are those of the read-first path.
func TestOneCheckIsCountedFirst(t *testing.T) {
	r := testenv.PrivateRedis(t)
	c := r.Client(t)
	s := storeOn(t, c, r.Prefix, redis.Config{Shards: 1})
	ctx := context.Background()
	size := time.Minute
	now := base.Add(15 * time.Second) // the previous window weighs 0.75
	start := arith.WindowStart(now, size)
	hash := fmt.Sprintf("{%s:ns:0}:%d:%d", r.Prefix, size.Milliseconds(), start.UnixMilli())
	var diffs []strategy.Diff
	for _, k := range []string{"new", "some", "zero", "bad"} {
		diffs = append(diffs, diff("ns", k, start.Add(-size), size, 12)) // 9 of it weighs now
	}
	mustPush(t, s, strategy.Batch{Node: "seed", Seq: 1, Diffs: append(diffs,
		diff("ns", "some", start, size, 1), diff("ns", "ok", start, size, 2))})
	for k, v := range map[string]string{"zero": "0", "float": "2.5", "bad": "not a number"} {
		if err := c.HSet(ctx, hash, k, v).Err(); err != nil {
			t.Fatal(err)
		}
	}
	seq := uint64(0)
	for _, tc := range []struct {
		key     string
		allowed bool
		stored  string // "" for no field
		current float64
		calls   map[string]int
	}{
		{"new", false, "", 0, map[string]int{"hincrby": 1, "hdel": 1, "hget": 1}},               // 9 + 0 + 1 > 9.5
		{"some", false, "1", 1, map[string]int{"hincrby": 2, "hdel": 0, "hget": 1}},             // 9 + 1 + 1 > 9.5
		{"zero", false, "", 0, map[string]int{"hincrby": 1, "hdel": 1, "hget": 1}},              // 9 + 0 + 1 > 9.5
		{"ok", true, "3", 3, map[string]int{"hincrby": 1, "hdel": 0, "hget": 1}},                // 0 + 2 + 1 <= 9.5
		{"float", true, "3.5", 3.5, map[string]int{"hincrby": 1, "hincrbyfloat": 1, "hget": 2}}, // refused, read first
	} {
		t.Run(tc.key, func(t *testing.T) {
			seq++
			check := []strategy.Check{{Namespace: "ns", Key: tc.key, Cost: 1, Now: now, Limits: []strategy.CheckLimit{{WindowSize: size, Limit: 9.5}}}}
			var res []strategy.CheckResult
			got := commandCalls(t, c, func() error {
				var err error
				res, err = s.CheckAndCount(ctx, "n", seq, check)
				return err
			})
			if res[0].Allowed != tc.allowed || res[0].Totals[0].Current != tc.current {
				t.Errorf("check: %+v, want allowed %v, current %v", res[0], tc.allowed, tc.current)
			}
			stored, err := c.HGet(ctx, hash, tc.key).Result()
			if errors.Is(err, goredis.Nil) {
				stored, err = "", nil
			}
			if err != nil || stored != tc.stored {
				t.Errorf("stored %q, %v; want %q", stored, err, tc.stored)
			}
			for k, w := range tc.calls {
				if got[k] != w {
					t.Errorf("%s: %d calls, want %d (all: %v)", k, got[k], w, got)
				}
			}
			again, err := s.CheckAndCount(ctx, "n", seq, check)
			if err != nil || again[0].Allowed != tc.allowed || again[0].Totals[0].Current != tc.current {
				t.Errorf("retry: %+v, %v; want the decision made then, nothing counted again", again, err)
			}
		})
	}
	seq++
	if _, err := s.CheckAndCount(ctx, "n", seq, []strategy.Check{{Namespace: "ns", Key: "bad", Cost: 1, Now: now,
		Limits: []strategy.CheckLimit{{WindowSize: size, Limit: 100}}}}); err == nil || !strings.Contains(err.Error(), "holds no number") {
		t.Errorf("check of a field holding no number: %v, want it reported", err)
	}
	if got := c.HGet(ctx, hash, "bad").Val(); got != "not a number" {
		t.Errorf("bad: stored %q, want it untouched", got)
	}
}

// Calls whose groups mix the kinds check.lua runs (small groups of one
// plain window limit and an integer cost, which its fast loop counts
// first, larger groups, groups with a fractional cost or a fixed window
// next to a sliding one, fields that repeat) decide every check in order,
// each seeing the ones before, as the node would one after the other; a
// call sent again returns the decisions made then and counts nothing.
func TestChecksOfEveryGroupKindDecideInOrder(t *testing.T) {
	s, _ := newStore(t, redis.Config{})
	rnd := rand.New(rand.NewPCG(3, 4))
	size := time.Minute
	now := base.Add(20 * time.Second) // the previous window weighs 2/3
	start := arith.WindowStart(now, size)
	const nkeys = 24
	cur, prev := map[string]float64{}, map[string]float64{}
	var diffs []strategy.Diff
	for i := range nkeys {
		key := fmt.Sprintf("o%d", i)
		prev[key], cur[key] = float64(rnd.IntN(6)), float64(rnd.IntN(4))
		diffs = append(diffs, diff("ns", key, start.Add(-size), size, prev[key]), diff("ns", key, start, size, cur[key]))
	}
	mustPush(t, s, strategy.Batch{Node: "seed", Seq: 1, Diffs: diffs})
	seq, allowed, total := uint64(0), 0, 0
	for call := range 60 {
		checks := make([]strategy.Check, 1+rnd.IntN(14))
		for i := range checks {
			key := fmt.Sprintf("o%d", rnd.IntN(nkeys))
			cost := float64(rnd.IntN(3))
			if call%5 == 4 && i == 0 {
				cost = 0.5 // not for the fast loop: its group goes on as before
			}
			l := strategy.CheckLimit{WindowSize: size, Limit: float64(4 + rnd.IntN(6)), Fixed: call%7 == 6 && i%2 == 1}
			checks[i] = strategy.Check{Namespace: "ns", Key: key, Cost: cost, Now: now, Limits: []strategy.CheckLimit{l}}
		}
		seq++
		var want []strategy.CheckResult
		for _, c := range checks {
			l := c.Limits[0]
			ok := arith.WindowFits(cur[c.Key], prev[c.Key], c.Cost, l.Limit, size.Milliseconds(), now.Sub(start).Milliseconds(), l.Fixed)
			if ok {
				cur[c.Key] += c.Cost
			}
			want = append(want, strategy.CheckResult{Allowed: ok, Totals: []strategy.Totals{{Current: cur[c.Key], Previous: prev[c.Key]}}})
		}
		for try := range 2 {
			res, err := s.CheckAndCount(context.Background(), "n", seq, checks)
			if err != nil {
				t.Fatalf("call %d, try %d: %v", call, try, err)
			}
			for i, r := range res {
				w := want[i]
				if try == 1 {
					w.Totals[0].Current = cur[checks[i].Key] // a retry replies the totals as they are now
				}
				if r.Allowed != w.Allowed || r.Totals[0] != w.Totals[0] {
					t.Fatalf("call %d, try %d, check %d (%+v): %+v, want allowed %v, totals %+v", call, try, i, checks[i], r, w.Allowed, w.Totals[0])
				}
			}
		}
		for _, w := range want {
			total++
			if w.Allowed {
				allowed++
			}
		}
	}
	if allowed < total/5 || allowed > total*4/5 {
		t.Fatalf("%d of %d checks allowed: want many of both, or the limits are not tested", allowed, total)
	}
	for key, want := range cur {
		if got := count(t, s, "ns", key, start, size); got != want {
			t.Errorf("%s: stored %v, want %v", key, got, want)
		}
	}
}
