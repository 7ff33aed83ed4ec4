package middleware

import (
	"errors"
	"fmt"
	"math"
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
		{"anchored window", Policy{Limits: []ratelimiting.Limit{{Limit: 10, Window: time.Second, Algorithm: ratelimiting.AnchoredWindow}}}, "limits[0].type", "anchored", "not available: use sliding_window, fixed_window, token_bucket or leaky_bucket"},
		{"unknown algorithm", Policy{Limits: []ratelimiting.Limit{{Limit: 10, Window: time.Second, Algorithm: 9}}}, "limits[0].type", "Algorithm(9)", "must be one of sliding_window, fixed_window, token_bucket, leaky_bucket"},
		{"fixed bucket", Policy{Limits: []ratelimiting.Limit{{Limit: 10, Window: time.Second, Algorithm: tb, Fixed: true}}}, "limits[0].fixed", "true", "only applies to sliding_window and fixed_window, not token_bucket"},
		{"penalty with a bucket", Policy{Limits: []ratelimiting.Limit{ok[0], {Limit: 10, Window: time.Second, Algorithm: lb}}, Penalty: true}, "penalty", "true", "limits[1] is a leaky_bucket, and a bucket cannot count denied requests: drop penalty, or use a window type"},
		{"one bucket, two rates", Policy{Limits: []ratelimiting.Limit{{Limit: 10, Window: time.Minute, Algorithm: tb}, {Limit: 10, Window: time.Minute, Algorithm: lb}, {Limit: 20, Window: time.Minute, Algorithm: tb, Burst: 30}}}, "limits[2].limit", "20", "limits[0] is the same token_bucket with limit 10: bucket limits of one type and window share one bucket, which has one rate"},
	}
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
}

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
