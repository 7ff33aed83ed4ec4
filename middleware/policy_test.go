package middleware

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
)

func TestPolicyValidate(t *testing.T) {
	local := namespace.Config{Name: "l", SyncRate: namespace.LocalOnly, WindowSizes: []time.Duration{time.Second, time.Minute}}
	ok := []ratelimiting.Limit{{Limit: 10, Window: time.Second}}
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
