package middleware

import (
	"net/http"
	"testing"
	"time"

	"github.com/ratesync/ratesync/ratelimiting"
)

func TestWriteHeaders(t *testing.T) {
	perMin := ratelimiting.Limit{Limit: 100, Window: time.Minute}
	perSec := ratelimiting.Limit{Limit: 10, Window: time.Second, Fixed: true}
	tests := []struct {
		name string
		pol  string
		d    ratelimiting.Decision
		o    HeaderOptions
		want map[string]string // "" value: header absent
	}{
		{
			name: "allowed, two limits",
			pol:  "api",
			d: ratelimiting.Decision{Allowed: true, Limits: []ratelimiting.LimitState{
				{Limit: perMin, Remaining: 99, Reset: 90 * time.Second, Allowed: true},
				{Limit: perSec, Remaining: 9, Reset: 400 * time.Millisecond, Allowed: true},
			}},
			want: map[string]string{
				"RateLimit-Policy":      `"api/1m";q=100;w=60, "api/1s/fixed";q=10;w=1`,
				"RateLimit":             `"api/1m";r=99;t=90, "api/1s/fixed";r=9;t=1`,
				"X-RateLimit-Limit":     "10",
				"X-RateLimit-Remaining": "9",
				"X-RateLimit-Reset":     "1",
				"Retry-After":           "",
			},
		},
		{
			name: "denied: Retry-After rounded up",
			pol:  "api",
			d: ratelimiting.Decision{Allowed: false, RetryAfter: 1200 * time.Millisecond, Limits: []ratelimiting.LimitState{
				{Limit: perMin, Remaining: 0, Reset: 61 * time.Second, RetryAfter: 1200 * time.Millisecond},
			}},
			want: map[string]string{
				"RateLimit":             `"api/1m";r=0;t=61`,
				"X-RateLimit-Remaining": "0",
				"Retry-After":           "2",
			},
		},
		{
			name: "denied with a zero RetryAfter still says 1",
			pol:  "p",
			d:    ratelimiting.Decision{Limits: []ratelimiting.LimitState{{Limit: perSec}}},
			want: map[string]string{"Retry-After": "1"},
		},
		{
			name: "tie on remaining: the larger window",
			pol:  "p",
			d: ratelimiting.Decision{Allowed: true, Limits: []ratelimiting.LimitState{
				{Limit: perSec, Remaining: 5, Reset: time.Second},
				{Limit: perMin, Remaining: 5, Reset: time.Minute},
			}},
			want: map[string]string{"X-RateLimit-Limit": "100", "X-RateLimit-Reset": "60"},
		},
		{
			name: "sub-second window: w=1; fractional limit: q floored; same name twice",
			pol:  `we"ird`,
			d: ratelimiting.Decision{Allowed: true, Limits: []ratelimiting.LimitState{
				{Limit: ratelimiting.Limit{Limit: 2.5, Window: 500 * time.Millisecond}, Remaining: 1},
				{Limit: ratelimiting.Limit{Limit: 7, Window: 500 * time.Millisecond}, Remaining: 6},
			}},
			want: map[string]string{
				"RateLimit-Policy":  `"we\"ird/500ms";q=2;w=1, "we\"ird/500ms#1";q=7;w=1`,
				"X-RateLimit-Limit": "2.5",
			},
		},
		{
			name: "hidden",
			pol:  "p",
			d:    ratelimiting.Decision{Limits: []ratelimiting.LimitState{{Limit: perSec}}},
			o:    HeaderOptions{Hide: true},
			want: map[string]string{"RateLimit": "", "X-RateLimit-Limit": "", "Retry-After": ""},
		},
		{
			name: "X-RateLimit family only",
			pol:  "p",
			d:    ratelimiting.Decision{Allowed: true, Limits: []ratelimiting.LimitState{{Limit: perSec, Remaining: 3}}},
			o:    HeaderOptions{Families: FamilyXRateLimit},
			want: map[string]string{"RateLimit": "", "RateLimit-Policy": "", "X-RateLimit-Remaining": "3"},
		},
		{
			name: "RateLimit family only",
			pol:  "p",
			d:    ratelimiting.Decision{Allowed: true, Limits: []ratelimiting.LimitState{{Limit: perSec, Remaining: 3}}},
			o:    HeaderOptions{Families: FamilyRateLimit},
			want: map[string]string{"RateLimit": `"p/1s/fixed";r=3;t=0`, "X-RateLimit-Remaining": ""},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			WriteHeaders(h, tt.pol, tt.d, tt.o)
			for k, want := range tt.want {
				if got := h.Get(k); got != want {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
		})
	}
}

func TestWriteHeadersBuckets(t *testing.T) {
	tb := ratelimiting.Limit{Limit: 10, Window: time.Minute, Algorithm: ratelimiting.TokenBucket, Burst: 20}
	lb := ratelimiting.Limit{Limit: 2, Window: time.Minute, Algorithm: ratelimiting.LeakyBucket}
	tests := []struct {
		name string
		d    ratelimiting.Decision
		want map[string]string
	}{
		{
			name: "token bucket: q the capacity, w the time to fill from empty",
			d: ratelimiting.Decision{Allowed: true, Limits: []ratelimiting.LimitState{
				{Limit: tb, Rate: 1, Remaining: 19, Reset: 6 * time.Second, Allowed: true},
			}},
			want: map[string]string{
				"RateLimit-Policy":      `"api/1m/token_bucket";q=20;w=120`,
				"RateLimit":             `"api/1m/token_bucket";r=19;t=6`,
				"X-RateLimit-Limit":     "20",
				"X-RateLimit-Remaining": "19",
				"X-RateLimit-Reset":     "6",
			},
		},
		{
			name: "leaky bucket denied: burst 0 means the limit; Retry-After rounded up",
			d: ratelimiting.Decision{RetryAfter: 29999 * time.Millisecond, Limits: []ratelimiting.LimitState{
				{Limit: lb, Rate: 2, Remaining: 0, Reset: 59999 * time.Millisecond, RetryAfter: 29999 * time.Millisecond},
			}},
			want: map[string]string{
				"RateLimit-Policy":  `"api/1m/leaky_bucket";q=2;w=60`,
				"RateLimit":         `"api/1m/leaky_bucket";r=0;t=60`,
				"X-RateLimit-Limit": "2",
				"Retry-After":       "30",
			},
		},
		{
			name: "a window and buckets on one window size: one name each, a second token bucket numbered",
			d: ratelimiting.Decision{Allowed: true, Limits: []ratelimiting.LimitState{
				{Limit: ratelimiting.Limit{Limit: 100, Window: time.Minute}, Remaining: 99},
				{Limit: tb, Remaining: 19},
				{Limit: ratelimiting.Limit{Limit: 10, Window: time.Minute, Algorithm: ratelimiting.TokenBucket, Burst: 5}, Remaining: 4},
				{Limit: lb, Remaining: 1},
				{Limit: ratelimiting.Limit{Limit: 5, Window: time.Minute, Algorithm: ratelimiting.FixedWindow}, Remaining: 4},
			}},
			want: map[string]string{
				"RateLimit-Policy": `"api/1m";q=100;w=60, "api/1m/token_bucket";q=20;w=120, "api/1m/token_bucket#2";q=5;w=30, "api/1m/leaky_bucket";q=2;w=60, "api/1m/fixed";q=5;w=60`,
			},
		},
		{
			name: "fill times rounded up, at least 1",
			d: ratelimiting.Decision{Allowed: true, Limits: []ratelimiting.LimitState{
				{Limit: ratelimiting.Limit{Limit: 1000, Window: time.Second, Algorithm: ratelimiting.TokenBucket, Burst: 1}, Remaining: 1},
				{Limit: ratelimiting.Limit{Limit: 7, Window: time.Minute, Algorithm: ratelimiting.TokenBucket, Burst: 1}, Remaining: 1},
				{Limit: ratelimiting.Limit{Limit: 3, Window: 1500 * time.Millisecond, Algorithm: ratelimiting.LeakyBucket, Burst: 2.5}, Remaining: 2},
			}},
			want: map[string]string{
				"RateLimit-Policy": `"api/1s/token_bucket";q=1;w=1, "api/1m/token_bucket";q=1;w=9, "api/1500ms/leaky_bucket";q=2;w=2`,
			},
		},
		{
			name: "a fill time beyond 15 digits is clamped",
			d: ratelimiting.Decision{Allowed: true, Limits: []ratelimiting.LimitState{
				{Limit: ratelimiting.Limit{Limit: 1e-9, Window: 876000 * time.Hour, Algorithm: ratelimiting.TokenBucket, Burst: 1e15}, Remaining: 1e15, Reset: 876000 * time.Hour},
			}},
			want: map[string]string{
				"RateLimit-Policy": `"api/876000h/token_bucket";q=999999999999999;w=999999999999999`,
				"RateLimit":        `"api/876000h/token_bucket";r=999999999999999;t=3153600000`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			WriteHeaders(h, "api", tt.d, HeaderOptions{})
			for k, want := range tt.want {
				if got := h.Get(k); got != want {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
		})
	}
}

func TestWriteHeadersAnchoredLogAndPrecision(t *testing.T) {
	anchored := ratelimiting.Limit{Limit: 3, Window: time.Minute, Algorithm: ratelimiting.AnchoredWindow}
	log := ratelimiting.Limit{Limit: 100, Window: time.Hour, Algorithm: ratelimiting.SlidingLog}
	precise := ratelimiting.Limit{Limit: 50, Window: 3 * time.Minute, Precision: time.Minute}
	tests := []struct {
		name string
		d    ratelimiting.Decision
		want map[string]string
	}{
		{
			name: "q the limit, w the window, t until the window closes or the newest entry stops weighing",
			d: ratelimiting.Decision{Allowed: true, Limits: []ratelimiting.LimitState{
				{Limit: anchored, Rate: 3, Remaining: 0, Reset: 41500 * time.Millisecond, Allowed: true},
				{Limit: log, Rate: 3, Remaining: 97, Reset: time.Hour, Allowed: true},
				{Limit: precise, Rate: 12.5, Remaining: 37, Reset: 179 * time.Second, Allowed: true},
			}},
			want: map[string]string{
				"RateLimit-Policy":      `"api/1m/anchored";q=3;w=60, "api/1h/sliding_log";q=100;w=3600, "api/3m";q=50;w=180`,
				"RateLimit":             `"api/1m/anchored";r=0;t=42, "api/1h/sliding_log";r=97;t=3600, "api/3m";r=37;t=179`,
				"X-RateLimit-Limit":     "3",
				"X-RateLimit-Remaining": "0",
				"X-RateLimit-Reset":     "42",
			},
		},
		{
			name: "denied: Retry-After from the decision",
			d: ratelimiting.Decision{RetryAfter: 1234 * time.Millisecond, Limits: []ratelimiting.LimitState{
				{Limit: log, Rate: 100, Remaining: 0, Reset: 3599 * time.Second, RetryAfter: 1234 * time.Millisecond},
			}},
			want: map[string]string{
				"RateLimit":   `"api/1h/sliding_log";r=0;t=3599`,
				"Retry-After": "2",
			},
		},
		{
			name: "one name each on one window size, a second sliding window numbered",
			d: ratelimiting.Decision{Allowed: true, Limits: []ratelimiting.LimitState{
				{Limit: ratelimiting.Limit{Limit: 100, Window: time.Minute}},
				{Limit: ratelimiting.Limit{Limit: 100, Window: time.Minute, Precision: time.Second}},
				{Limit: anchored},
				{Limit: ratelimiting.Limit{Limit: 3, Window: time.Minute, Algorithm: ratelimiting.SlidingLog}},
				{Limit: ratelimiting.Limit{Limit: 3, Window: time.Minute, Algorithm: ratelimiting.FixedWindow}},
			}},
			want: map[string]string{
				"RateLimit-Policy": `"api/1m";q=100;w=60, "api/1m#1";q=100;w=60, "api/1m/anchored";q=3;w=60, "api/1m/sliding_log";q=3;w=60, "api/1m/fixed";q=3;w=60`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			WriteHeaders(h, "api", tt.d, HeaderOptions{})
			for k, want := range tt.want {
				if got := h.Get(k); got != want {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
		})
	}
}

func TestFormatWindow(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{time.Second, "1s"}, {time.Minute, "1m"}, {time.Hour, "1h"}, {24 * time.Hour, "24h"},
		{90 * time.Second, "90s"}, {1500 * time.Millisecond, "1500ms"}, {0, "0s"}, {time.Microsecond, "1µs"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := FormatWindow(tt.d); got != tt.want {
				t.Errorf("FormatWindow(%v) = %q, want %q", tt.d, got, tt.want)
			}
		})
	}
}

func TestWriteHeadersAllocs(t *testing.T) {
	d := ratelimiting.Decision{Allowed: true, Limits: []ratelimiting.LimitState{
		{Limit: ratelimiting.Limit{Limit: 100, Window: time.Minute}, Remaining: 99},
		{Limit: ratelimiting.Limit{Limit: 10, Window: time.Second}, Remaining: 9},
	}}
	h := http.Header{}
	allocs := testing.AllocsPerRun(100, func() {
		clear(h)
		WriteHeaders(h, "api", d, HeaderOptions{})
	})
	// One string holding every value, one slice of values.
	if allocs > 2 {
		t.Errorf("WriteHeaders: %v allocations, want at most 2", allocs)
	}
}

// Every integer the headers write fits a Structured Field integer (at
// most 15 digits): a longer one makes a client discard the whole field.
func TestWriteHeadersClampsIntegers(t *testing.T) {
	huge := ratelimiting.Limit{Limit: 1e15, Window: time.Second}
	tests := []struct {
		name string
		d    ratelimiting.Decision
		want map[string]string
	}{
		{
			name: "a limit of 1e15",
			d:    ratelimiting.Decision{Allowed: true, Limits: []ratelimiting.LimitState{{Limit: huge, Remaining: 1e15 - 1, Reset: time.Second}}},
			want: map[string]string{
				"RateLimit-Policy":      `"p/1s";q=999999999999999;w=1`,
				"RateLimit":             `"p/1s";r=999999999999999;t=1`,
				"X-RateLimit-Remaining": "999999999999999",
			},
		},
		{
			name: "values far beyond",
			d:    ratelimiting.Decision{Allowed: true, Limits: []ratelimiting.LimitState{{Limit: ratelimiting.Limit{Limit: 1e300, Window: time.Second}, Remaining: 1e300}}},
			want: map[string]string{
				"RateLimit-Policy":      `"p/1s";q=999999999999999;w=1`,
				"RateLimit":             `"p/1s";r=999999999999999;t=0`,
				"X-RateLimit-Remaining": "999999999999999",
			},
		},
		{
			name: "never negative",
			d:    ratelimiting.Decision{Limits: []ratelimiting.LimitState{{Limit: huge, Remaining: -5, Reset: -time.Second, RetryAfter: -time.Second}}, RetryAfter: -time.Second},
			want: map[string]string{
				"RateLimit":             `"p/1s";r=0;t=0`,
				"X-RateLimit-Remaining": "0",
				"X-RateLimit-Reset":     "0",
				"Retry-After":           "1",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			WriteHeaders(h, "p", tt.d, HeaderOptions{})
			for k, want := range tt.want {
				if got := h.Get(k); got != want {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
		})
	}
	if got := wholeNumber(1e15); got != 999_999_999_999_999 {
		t.Errorf("wholeNumber(1e15) = %d", got)
	}
}
