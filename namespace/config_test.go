package namespace_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/memory"
)

func TestValidate(t *testing.T) {
	store := memory.New()
	ok := namespace.Config{Name: "api", SyncRate: time.Second, Strategy: store, WindowSizes: []time.Duration{time.Second}}
	tests := []struct {
		name  string
		edit  func(*namespace.Config)
		field string
		value string // substring of the error's value
		hint  string // substring of what is allowed
	}{
		{"name with a pipe", func(c *namespace.Config) { c.Name = "a|b" }, "Name", `"a|b"`, "must not contain '|'"},
		{"name with a NUL", func(c *namespace.Config) { c.Name = "a\x00b" }, "Name", `"a\x00b"`, "valid UTF-8 without NUL"},
		{"name not UTF-8", func(c *namespace.Config) { c.Name = "a\xffb" }, "Name", `"a\xffb"`, "valid UTF-8 without NUL"},
		{"dict with a pipe", func(c *namespace.Config) { c.Dict = "d|x" }, "Dict", `"d|x"`, "must not contain '|'"},
		{"periodic without strategy", func(c *namespace.Config) { c.Strategy = nil }, "Strategy", "nil", "strategy is required"},
		{"synchronous without strategy", func(c *namespace.Config) { c.SyncRate, c.Strategy = 0, nil }, "Strategy", "nil", "sync rate 0s"},
		{"sync rate below a millisecond", func(c *namespace.Config) { c.SyncRate = time.Microsecond }, "SyncRate", "1µs", "at least 1ms"},
		{"no window sizes", func(c *namespace.Config) { c.WindowSizes = nil }, "WindowSizes", "[]", "at least one"},
		{"zero window", func(c *namespace.Config) { c.WindowSizes = []time.Duration{time.Second, 0} }, "WindowSizes[1]", "0s", "> 0"},
		{"negative window", func(c *namespace.Config) { c.WindowSizes = []time.Duration{-time.Second} }, "WindowSizes[0]", "-1s", "> 0"},
		{"fractional millisecond window", func(c *namespace.Config) { c.WindowSizes = []time.Duration{1500 * time.Microsecond} }, "WindowSizes[0]", "1.5ms", "whole number of milliseconds"},
		{"window over 100 years", func(c *namespace.Config) { c.WindowSizes = []time.Duration{2562047 * time.Hour} }, "WindowSizes[0]", "2562047h", "at most 876000h"},
		{"negative dict capacity", func(c *namespace.Config) { c.DictCapacity = -5 }, "DictCapacity", "-5", ">= 0"},
		{"near limit on a synchronous namespace", func(c *namespace.Config) { c.SyncRate, c.NearLimit = 0, true }, "NearLimit", "true", "periodic sync rate (sync_rate, SyncRate > 0)"},
		{"near limit without a checker", func(c *namespace.Config) { c.Strategy, c.NearLimit = plainStore{store}, true }, "NearLimit", "true", "strategy.Checker"},
		{"leases on a synchronous namespace", func(c *namespace.Config) { c.SyncRate, c.Leases = 0, true }, "Leases", "true", "periodic sync rate (sync_rate, SyncRate > 0)"},
		{"leases on a local namespace", func(c *namespace.Config) { c.SyncRate, c.Strategy, c.Leases = -1, nil, true }, "Leases", "true", "local only"},
		{"leases with near limit", func(c *namespace.Config) { c.NearLimit, c.Leases = true, true }, "Leases", "true", "alternatives"},
		{"leases without a checker", func(c *namespace.Config) { c.Strategy, c.Leases = plainStore{store}, true }, "Leases", "true", "strategy.Checker and strategy.BucketStore"},
		{"unknown clock", func(c *namespace.Config) { c.Clock = 7 }, "Clock", "Clock(7)", "StoreClock (store, the default) or NodeClock (node)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.edit(&c)
			err := c.Validate()
			var fe *namespace.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Validate() = %v, want a *namespace.FieldError", err)
			}
			if fe.Field != tt.field || !strings.Contains(fe.Value, tt.value) || !strings.Contains(fe.Allowed, tt.hint) {
				t.Fatalf("error %q: field %q value %q allowed %q; want field %q, value ~%q, allowed ~%q", err, fe.Field, fe.Value, fe.Allowed, tt.field, tt.value, tt.hint)
			}
			if !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("error text %q does not name the field", err)
			}
		})
	}
	valid := []namespace.Config{
		ok,
		{WindowSizes: []time.Duration{time.Second}, SyncRate: namespace.LocalOnly},
		{WindowSizes: []time.Duration{time.Second}, SyncRate: -time.Hour},
		{WindowSizes: []time.Duration{time.Second}, SyncRate: namespace.Synchronous, Strategy: store},
		{WindowSizes: []time.Duration{time.Minute, time.Second, time.Minute}, SyncRate: -1},
		{WindowSizes: []time.Duration{time.Second}, SyncRate: time.Second, Strategy: store, NearLimit: true},
		{WindowSizes: []time.Duration{time.Second}, SyncRate: time.Second, Strategy: store, Leases: true},
		{WindowSizes: []time.Duration{time.Second}, SyncRate: time.Second, Strategy: store, Clock: namespace.NodeClock},
		{WindowSizes: []time.Duration{time.Second}, SyncRate: namespace.LocalOnly, Clock: namespace.NodeClock},
	}
	for _, c := range valid {
		if err := c.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v, want nil", c, err)
		}
	}
}

// plainStore hides the optional interfaces of the store it wraps.
type plainStore struct{ strategy.Strategy }

func TestNormalize(t *testing.T) {
	c := namespace.Config{SyncRate: -7, WindowSizes: []time.Duration{time.Minute, time.Second, time.Minute, time.Hour}}.Normalize()
	if c.Name != "default" || c.Dict != "default" || c.SyncRate != namespace.LocalOnly {
		t.Fatalf("Normalize defaults: %+v", c)
	}
	if want := []time.Duration{time.Second, time.Minute, time.Hour}; !slices.Equal(c.WindowSizes, want) {
		t.Fatalf("WindowSizes = %v, want %v (sorted, duplicates removed)", c.WindowSizes, want)
	}
}

func TestValidateReportsEveryField(t *testing.T) {
	c := namespace.Config{Dict: "x|y", SyncRate: 500 * time.Microsecond, DictCapacity: -1, WindowSizes: []time.Duration{0, time.Second, -1}}
	var keys []string
	for _, e := range c.Validate().(interface{ Unwrap() []error }).Unwrap() {
		var fe *namespace.FieldError
		if errors.As(e, &fe) {
			keys = append(keys, fe.Key)
		}
	}
	if got := strings.Join(keys, " "); got != "dict sync_rate dict_capacity window_sizes[0] window_sizes[2]" {
		t.Errorf("fields = %s", got)
	}
}

func TestClockString(t *testing.T) {
	for c, want := range map[namespace.Clock]string{namespace.StoreClock: "store", namespace.NodeClock: "node", 9: "Clock(9)"} {
		if got := c.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", uint8(c), got, want)
		}
	}
}
