package middleware

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/memory"
)

func TestPolicyValidate(t *testing.T) {
	local := namespace.Config{Name: "l", SyncRate: namespace.LocalOnly, WindowSizes: []time.Duration{time.Second, time.Minute}}
	ok := []ratelimiting.Limit{{Limit: 10, Window: time.Second}}
	tb, lb := ratelimiting.TokenBucket, ratelimiting.LeakyBucket
	tests := []struct {
		name       string
		p          Policy
		key, value string
		allowed    string
	}{
		{"no limits", Policy{}, "limits", "[]", "at least one limit is required"},
		{"limit zero", Policy{Limits: []ratelimiting.Limit{ok[0], {Limit: 0, Window: time.Second}}}, "limits[1].limit", "0", "must be a finite number > 0"},
		{"limit NaN", Policy{Limits: []ratelimiting.Limit{{Limit: math.NaN(), Window: time.Second}}}, "limits[0].limit", "NaN", "must be a finite number > 0"},
		{"window", Policy{Limits: []ratelimiting.Limit{{Limit: 1, Window: time.Hour}}}, "limits[0].window", "1h", `must be one of the window sizes of namespace "l": 1s, 1m`},
		{"negative cost", Policy{Limits: ok, Cost: -1}, "cost", "-1", "must be a finite number > 0"},
		{"cost above a limit", Policy{Limits: ok, Cost: 11}, "cost", "11", "must be at most limits[0].limit (10): a larger cost can never pass"},
		{"deny without a store", Policy{Limits: ok, StoreDown: StoreDownDeny}, "on_store_down", "deny", `namespace "l" has no store (it is local only)`},
		{"burst on a sliding window", Policy{Limits: []ratelimiting.Limit{{Limit: 10, Window: time.Second, Burst: 5}}}, "limits[0].burst", "5", "only applies to token_bucket and leaky_bucket, not sliding_window"},
		{"burst on a fixed window", Policy{Limits: []ratelimiting.Limit{{Limit: 10, Window: time.Second, Fixed: true, Burst: 5}}}, "limits[0].burst", "5", "only applies to token_bucket and leaky_bucket, not fixed_window"},
		{"negative burst", Policy{Limits: []ratelimiting.Limit{ok[0], {Limit: 10, Window: time.Second, Algorithm: tb, Burst: -1}}}, "limits[1].burst", "-1", "must be a finite number >= 0 (0 means the limit)"},
		{"NaN burst", Policy{Limits: []ratelimiting.Limit{{Limit: 10, Window: time.Second, Algorithm: lb, Burst: math.NaN()}}}, "limits[0].burst", "NaN", "must be a finite number >= 0 (0 means the limit)"},
		{"bucket window not whole milliseconds", Policy{Limits: []ratelimiting.Limit{{Limit: 10, Window: 1500 * time.Microsecond, Algorithm: tb}}}, "limits[0].window", "1.5ms", "must be whole milliseconds, > 0 and at most 876000h"},
		{"bucket window 0", Policy{Limits: []ratelimiting.Limit{{Limit: 10, Algorithm: tb}}}, "limits[0].window", "0s", "must be whole milliseconds, > 0 and at most 876000h"},
		{"bucket window over 100 years", Policy{Limits: []ratelimiting.Limit{{Limit: 10, Window: 876001 * time.Hour, Algorithm: lb}}}, "limits[0].window", "876001h", "must be whole milliseconds, > 0 and at most 876000h"},
		{"bucket too slow to refill", Policy{Limits: []ratelimiting.Limit{{Limit: 1e-9, Window: time.Second, Algorithm: tb, Burst: 1e7}}, Cost: 1}, "limits[0].burst", "1e+07", "must let the bucket refill from empty within 876000h: burst / limit × window is longer"},
		{"cost above a burst", Policy{Limits: []ratelimiting.Limit{{Limit: 10, Window: time.Minute, Algorithm: tb, Burst: 5}}, Cost: 6}, "cost", "6", "must be at most limits[0].burst (5), the bucket's capacity: a larger cost can never pass"},
		{"cost above the limit of a bucket without burst", Policy{Limits: []ratelimiting.Limit{{Limit: 10, Window: time.Minute, Algorithm: lb}}, Cost: 11}, "cost", "11", "must be at most limits[0].limit (10), the bucket's capacity when burst is 0: a larger cost can never pass"},
		{"unknown algorithm", Policy{Limits: []ratelimiting.Limit{{Limit: 10, Window: time.Second, Algorithm: 9}}}, "limits[0].type", "Algorithm(9)", "must be one of sliding_window, fixed_window, anchored, sliding_log, token_bucket, leaky_bucket"},
		{"fixed bucket", Policy{Limits: []ratelimiting.Limit{{Limit: 10, Window: time.Second, Algorithm: tb, Fixed: true}}}, "limits[0].fixed", "true", "only applies to sliding_window and fixed_window, not token_bucket"},
		{"penalty with a bucket", Policy{Limits: []ratelimiting.Limit{ok[0], {Limit: 10, Window: time.Second, Algorithm: lb}}, Penalty: true}, "penalty", "true", "limits[1] is a leaky_bucket, and a bucket cannot count denied requests: drop penalty, or use a window type"},
		{"one bucket, two rates", Policy{Limits: []ratelimiting.Limit{{Limit: 10, Window: time.Minute, Algorithm: tb}, {Limit: 10, Window: time.Minute, Algorithm: lb}, {Limit: 20, Window: time.Minute, Algorithm: tb, Burst: 30}}}, "limits[2].limit", "20", "limits[0] is the same token_bucket with limit 10: bucket limits of one type and window share one bucket, which has one rate"},
	}
	tests = append(tests, keyedAndPrecisionCases...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var pe *PolicyError
			if err := tt.p.Validate(local); !errors.As(err, &pe) {
				t.Fatalf("Validate = %v, want a *PolicyError", err)
			}
			if pe.Key != tt.key || pe.Value != tt.value || pe.Allowed != tt.allowed {
				t.Errorf("Validate = %+v, want key %q value %q allowed %q", pe, tt.key, tt.value, tt.allowed)
			}
		})
	}
	if err := (Policy{Limits: ok, Cost: 10}).Validate(local); err != nil {
		t.Errorf("valid policy: %v", err)
	}
	buckets := Policy{Cost: 20, Limits: []ratelimiting.Limit{ // any window; a cost above the limit, within the burst
		{Limit: 10, Window: 90 * time.Second, Algorithm: tb, Burst: 20},
		{Limit: 10, Window: 90 * time.Second, Algorithm: tb, Burst: 25},
		{Limit: 40, Window: 1500 * time.Millisecond, Algorithm: lb},
	}}
	if err := buckets.Validate(local); err != nil {
		t.Errorf("valid bucket policy: %v", err)
	}
	for _, p := range validKeyedAndPrecision {
		if err := p.Validate(local); err != nil {
			t.Errorf("valid policy %+v: %v", p.Limits, err)
		}
	}
}

var (
	anchored, slidingLog = ratelimiting.AnchoredWindow, ratelimiting.SlidingLog

	// keyedAndPrecisionCases are invalid policies with anchored windows,
	// sliding logs and precision limits on a local namespace of windows 1s
	// and 1m: the first error Validate reports.
	keyedAndPrecisionCases = []struct {
		name       string
		p          Policy
		key, value string
		allowed    string
	}{
		{"precision on a fixed window", Policy{Limits: []ratelimiting.Limit{{Limit: 10, Window: time.Minute, Fixed: true, Precision: time.Second}}}, "limits[0].precision", "1s", "only applies to sliding_window, not fixed_window"},
		{"precision on a token bucket", Policy{Limits: []ratelimiting.Limit{{Limit: 10, Window: time.Minute, Algorithm: ratelimiting.TokenBucket, Precision: time.Second}}}, "limits[0].precision", "1s", "only applies to sliding_window, not token_bucket"},
		{"precision on an anchored window", Policy{Limits: []ratelimiting.Limit{{Limit: 10, Window: time.Minute, Algorithm: anchored, Precision: time.Second}}}, "limits[0].precision", "1s", "only applies to sliding_window, not anchored"},
		{"negative precision", Policy{Limits: []ratelimiting.Limit{{Limit: 10, Window: time.Minute, Precision: -time.Second}}}, "limits[0].precision", "-1s", "must be whole milliseconds > 0 (0 means the window)"},
		{"precision not dividing the window", Policy{Limits: []ratelimiting.Limit{{Limit: 10, Window: time.Minute, Precision: 7 * time.Second}}}, "limits[0].precision", "7s", "must divide limits[0].window (1m)"},
		{"precision longer than the window", Policy{Limits: []ratelimiting.Limit{{Limit: 10, Window: time.Second, Precision: time.Minute}}}, "limits[0].precision", "1m", "must divide limits[0].window (1s)"},
		{"too many sub-windows", Policy{Limits: []ratelimiting.Limit{{Limit: 10, Window: 2 * time.Minute, Precision: time.Second}}}, "limits[0].precision", "1s", "must be at least limits[0].window / 60 (2s): a window slides over at most 60 sub-windows"},
		{"precision not a window size", Policy{Limits: []ratelimiting.Limit{{Limit: 10, Window: time.Minute, Precision: 10 * time.Second}}}, "limits[0].precision", "10s", `must be one of the window sizes of namespace "l": 1s, 1m`},
		{"precision equal to a window not a window size", Policy{Limits: []ratelimiting.Limit{{Limit: 10, Window: time.Hour, Precision: time.Hour}}}, "limits[0].window", "1h", `must be one of the window sizes of namespace "l": 1s, 1m`},
		{"precision window over 100 years", Policy{Limits: []ratelimiting.Limit{{Limit: 10, Window: 876060 * time.Hour, Precision: 14601 * time.Hour}}}, "limits[0].window", "876060h", "must be at most 876000h"},
		{"precision with penalty", Policy{Penalty: true, Limits: []ratelimiting.Limit{{Limit: 10, Window: time.Minute, Precision: time.Second}}}, "limits[0].precision", "1s", "cannot be used with penalty (Kong's penalty counts in its two windows): drop one of them"},
		{"anchored with burst", Policy{Limits: []ratelimiting.Limit{{Limit: 10, Window: time.Minute, Algorithm: anchored, Burst: 5}}}, "limits[0].burst", "5", "only applies to token_bucket and leaky_bucket, not anchored"},
		{"fixed sliding log", Policy{Limits: []ratelimiting.Limit{{Limit: 10, Window: time.Minute, Algorithm: slidingLog, Fixed: true}}}, "limits[0].fixed", "true", "only applies to sliding_window and fixed_window, not sliding_log"},
		{"anchored window 0", Policy{Limits: []ratelimiting.Limit{{Limit: 10, Algorithm: anchored}}}, "limits[0].window", "0s", "must be whole milliseconds, > 0 and at most 876000h"},
		{"sliding log window not whole milliseconds", Policy{Limits: []ratelimiting.Limit{{Limit: 10, Window: 1500 * time.Microsecond, Algorithm: slidingLog}}}, "limits[0].window", "1.5ms", "must be whole milliseconds, > 0 and at most 876000h"},
		{"sliding log above 10000", Policy{Limits: []ratelimiting.Limit{{Limit: 10001, Window: time.Minute, Algorithm: slidingLog}}}, "limits[0].limit", "10001", "must be at most 10000 for sliding_log (a log keeps an entry per admitted millisecond): use sliding_window with precision, e.g. precision 1s"},
		{"sliding log above 10000, an hour", Policy{Limits: []ratelimiting.Limit{{Limit: 50000, Window: time.Hour, Algorithm: slidingLog}}}, "limits[0].limit", "50000", "must be at most 10000 for sliding_log (a log keeps an entry per admitted millisecond): use sliding_window with precision, e.g. precision 1m"},
		{"sliding log above 10000, no precision fits", Policy{Limits: []ratelimiting.Limit{{Limit: 50000, Window: 24 * time.Hour, Algorithm: slidingLog}}}, "limits[0].limit", "50000", "must be at most 10000 for sliding_log (a log keeps an entry per admitted millisecond): use sliding_window with precision"},
		{"sliding log cost too fine", Policy{Cost: 0.5, Limits: []ratelimiting.Limit{{Limit: 10000, Window: time.Minute, Algorithm: slidingLog}}}, "cost", "0.5", "must be at least limits[0].limit / 10000 (1) for sliding_log: a log holds at most 10000 entries per key; use sliding_window with precision for finer costs"},
		{"cost above an anchored limit", Policy{Cost: 4, Limits: []ratelimiting.Limit{{Limit: 3, Window: time.Minute, Algorithm: anchored}}}, "cost", "4", "must be at most limits[0].limit (3): a larger cost can never pass"},
		{"sliding log with penalty", Policy{Penalty: true, Limits: []ratelimiting.Limit{{Limit: 10, Window: time.Second}, {Limit: 10, Window: time.Minute, Algorithm: slidingLog}}}, "penalty", "true", "limits[1] is sliding_log, and only sliding_window and fixed_window can count denied requests: drop penalty, or use one of them"},
		{"anchored with penalty", Policy{Penalty: true, Limits: []ratelimiting.Limit{{Limit: 10, Window: time.Minute, Algorithm: anchored}}}, "penalty", "true", "limits[0] is anchored, and only sliding_window and fixed_window can count denied requests: drop penalty, or use one of them"},
	}

	// validKeyedAndPrecision are valid on the same namespace.
	validKeyedAndPrecision = []Policy{
		{Limits: []ratelimiting.Limit{{Limit: 10, Window: 3 * time.Minute, Precision: time.Minute}}},        // the window need not be a window size
		{Limits: []ratelimiting.Limit{{Limit: 10, Window: time.Minute, Precision: time.Second}}},            // 60 sub-windows
		{Limits: []ratelimiting.Limit{{Limit: 10, Window: time.Minute, Precision: time.Minute}}},            // Kong's two windows
		{Limits: []ratelimiting.Limit{{Limit: 3, Window: 90 * time.Second, Algorithm: anchored}}},           // any window
		{Limits: []ratelimiting.Limit{{Limit: 10000, Window: time.Hour, Algorithm: slidingLog}}, Cost: 1},   // the largest log
		{Limits: []ratelimiting.Limit{{Limit: 5, Window: time.Minute, Algorithm: slidingLog}}, Cost: 0.001}, // fine costs on a small log
		{Limits: []ratelimiting.Limit{{Limit: 5, Window: time.Minute, Algorithm: anchored}, {Limit: 100, Window: time.Minute, Algorithm: slidingLog}, {Limit: 100, Window: time.Minute}}},
	}
)

// A bucket needs a store that keeps buckets.
func TestPolicyValidateBucketStore(t *testing.T) {
	p := Policy{Limits: []ratelimiting.Limit{{Limit: 10, Window: time.Minute, Algorithm: ratelimiting.TokenBucket}}}
	tests := []struct {
		name    string
		store   strategy.Strategy
		allowed string // "" valid
	}{
		{"memory keeps buckets", memory.New(), ""},
		{"a store without buckets", struct{ strategy.Strategy }{}, `the store of namespace "s" does not keep buckets`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := namespace.Config{Name: "s", SyncRate: time.Second, Strategy: tt.store, WindowSizes: []time.Duration{time.Second}}
			err := p.Validate(ns)
			var pe *PolicyError
			switch {
			case tt.allowed == "" && err != nil:
				t.Errorf("Validate = %v", err)
			case tt.allowed != "" && (!errors.As(err, &pe) || pe.Key != "limits[0].type" || pe.Allowed != tt.allowed):
				t.Errorf("Validate = %v, want limits[0].type: %s", err, tt.allowed)
			}
		})
	}
}

func TestPolicyValidateReportsEveryField(t *testing.T) {
	local := namespace.Config{Name: "n", SyncRate: namespace.LocalOnly, WindowSizes: []time.Duration{time.Second}}
	p := Policy{Cost: -1, StoreDown: StoreDownDeny, Limits: []ratelimiting.Limit{{Limit: 0, Window: time.Second}, {Limit: 1, Window: time.Minute}}}
	var keys []string
	for _, e := range p.Validate(local).(interface{ Unwrap() []error }).Unwrap() {
		var pe *PolicyError
		if errors.As(e, &pe) {
			keys = append(keys, pe.Key)
		}
	}
	if got := fmt.Sprint(keys); got != "[cost on_store_down limits[0].limit limits[1].window]" {
		t.Errorf("fields = %s", got)
	}
}

// Anchored windows and sliding logs are decided as a whole per key: local
// or synchronous namespaces hold them, and leased ones; periodic ones do
// not; precision
// limits sync periodically.
func TestPolicyValidateKeyedNamespaces(t *testing.T) {
	sizes := []time.Duration{time.Second, time.Minute}
	undecided := struct {
		strategy.Strategy
		strategy.BucketStore
	}{}
	tests := []struct {
		name    string
		ns      namespace.Config
		alg     ratelimiting.Algorithm
		allowed string // "" valid
	}{
		{"local anchored", namespace.Config{Name: "s", SyncRate: namespace.LocalOnly}, anchored, ""},
		{"synchronous sliding log", namespace.Config{Name: "s", Strategy: memory.New()}, slidingLog, ""},
		{"periodic sliding log", namespace.Config{Name: "s", SyncRate: time.Second, Strategy: memory.New()}, slidingLog,
			`sliding_log is decided as a whole per key, locally or in the store, and cannot sync periodically (namespace "s" syncs every 1s): use sliding_window with precision, or a synchronous or local-only namespace`},
		{"periodic anchored", namespace.Config{Name: "s", SyncRate: 500 * time.Millisecond, Strategy: memory.New()}, anchored,
			`anchored is decided as a whole per key, locally or in the store, and cannot sync periodically (namespace "s" syncs every 500ms): use fixed_window, or a synchronous or local-only namespace`},
		{"leased anchored", namespace.Config{Name: "s", SyncRate: time.Second, Strategy: memory.New(), Leases: true}, anchored, ""},
		{"leased sliding log", namespace.Config{Name: "s", SyncRate: time.Second, Strategy: memory.New(), Leases: true}, slidingLog, ""},
		{"a store that does not decide", namespace.Config{Name: "s", Strategy: undecided}, anchored,
			`anchored needs a store that keeps and decides it (memory, Redis, PostgreSQL); the store of namespace "s" does not`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.ns.WindowSizes = sizes
			p := Policy{Limits: []ratelimiting.Limit{{Limit: 10, Window: time.Minute, Algorithm: tt.alg}}}
			err := p.Validate(tt.ns)
			var pe *PolicyError
			switch {
			case tt.allowed == "" && err != nil:
				t.Errorf("Validate = %v", err)
			case tt.allowed != "" && (!errors.As(err, &pe) || pe.Key != "limits[0].type" || pe.Value != tt.alg.String() || pe.Allowed != tt.allowed):
				t.Errorf("Validate = %v, want limits[0].type %s: %s", err, tt.alg, tt.allowed)
			}
		})
	}
	periodic := namespace.Config{Name: "s", SyncRate: time.Second, Strategy: memory.New(), WindowSizes: sizes}
	p := Policy{Limits: []ratelimiting.Limit{{Limit: 10, Window: 5 * time.Minute, Precision: time.Minute}}}
	if err := p.Validate(periodic); err != nil {
		t.Errorf("a precision limit in a periodic namespace: %v", err)
	}
}

// Validate states the library's rules: on every policy of the tables
// above, in a local, a synchronous and a periodic namespace, it refuses
// what ratelimiting's Check refuses, naming the field the library names
// (or penalty, where the library names the limit's algorithm), and accepts
// what Check accepts.
func TestPolicyValidateAgreesWithTheLibrary(t *testing.T) {
	var policies []Policy
	for _, tt := range keyedAndPrecisionCases {
		policies = append(policies, tt.p)
	}
	policies = append(policies, validKeyedAndPrecision...)
	sizes := []time.Duration{time.Second, time.Minute}
	for _, ns := range []namespace.Config{
		{Name: "l", SyncRate: namespace.LocalOnly, WindowSizes: sizes},
		{Name: "s", SyncRate: 0, Strategy: memory.New(), WindowSizes: sizes},
		{Name: "p", SyncRate: time.Hour, Strategy: memory.New(), WindowSizes: sizes},
	} {
		in := ratelimiting.NewInstance("test", ratelimiting.WithClock(func() time.Time { return time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC) }))
		t.Cleanup(func() { _ = in.Close(context.Background()) })
		if err := in.New(ns); err != nil {
			t.Fatal(err)
		}
		for _, p := range policies {
			cost := p.Cost
			if cost == 0 {
				cost = 1
			}
			_, lib := in.Check(context.Background(), ratelimiting.Request{Namespace: ns.Name, Key: "k", Cost: cost, Limits: p.Limits, Penalty: p.Penalty})
			ours := p.Validate(ns)
			if (lib == nil) != (ours == nil) {
				t.Errorf("namespace %s, %+v (cost %v, penalty %v): the library says %v, Validate %v", ns.Name, p.Limits, p.Cost, p.Penalty, lib, ours)
				continue
			}
			var ie *ratelimiting.InputError
			if lib == nil || !errors.As(lib, &ie) {
				continue
			}
			field := strings.Replace(ie.Field, ".algorithm", ".type", 1)
			var keys []string
			for _, e := range joined(ours) {
				var pe *PolicyError
				if errors.As(e, &pe) {
					keys = append(keys, pe.Key)
				}
			}
			penalty := p.Penalty && strings.HasSuffix(field, ".type") && slices.Contains(keys, "penalty")
			if !slices.Contains(keys, field) && !penalty {
				t.Errorf("namespace %s, %+v: the library names %s (%v), Validate %v", ns.Name, p.Limits, ie.Field, lib, keys)
			}
		}
	}
}

// joined returns the errors err joins, or err alone.
func joined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
