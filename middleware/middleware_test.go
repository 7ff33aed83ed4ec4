package middleware

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/strategytest"
	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
	"github.com/ratesync/ratesync/strategy/memory"
)

// newInstance returns an instance with a local namespace "default" (1s, 1m)
// on a fixed clock.
func newInstance(t *testing.T) *ratelimiting.Instance {
	t.Helper()
	clock := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	in := ratelimiting.NewInstance("test", ratelimiting.WithClock(func() time.Time { return clock }))
	t.Cleanup(func() { _ = in.Close(context.Background()) })
	if err := in.New(namespace.Config{SyncRate: namespace.LocalOnly, WindowSizes: []time.Duration{time.Second, time.Minute}}); err != nil {
		t.Fatal(err)
	}
	return in
}

// next is a handler that counts its calls.
type next struct{ calls atomic.Int64 }

func (n *next) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	n.calls.Add(1)
	w.WriteHeader(http.StatusNoContent)
}

func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

func request(key string) *http.Request {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "192.0.2.1:1000"
	if key != "" {
		r.Header.Set("X-Api-Key", key)
	}
	return r
}

// A token bucket of 2 per minute and capacity 3 passes three requests at
// once, then one every 30s; the headers are the decision's numbers.
func TestLimiterTokenBucket(t *testing.T) {
	in := newInstance(t)
	lim, err := New(in, Policy{
		Name:   "api",
		Limits: []ratelimiting.Limit{{Limit: 2, Window: time.Minute, Algorithm: ratelimiting.TokenBucket, Burst: 3}},
	}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := lim.Handler(&next{})
	tests := []struct {
		name       string
		wantStatus int
		wantRL     string
		wantRetry  string
	}{
		{"first", http.StatusNoContent, `"api/1m/token_bucket";r=2;t=30`, ""},
		{"second", http.StatusNoContent, `"api/1m/token_bucket";r=1;t=60`, ""},
		{"third empties it", http.StatusNoContent, `"api/1m/token_bucket";r=0;t=90`, ""},
		{"fourth waits for a token", http.StatusTooManyRequests, `"api/1m/token_bucket";r=0;t=90`, "30"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := serve(h, request(""))
			hd := rec.Header()
			if rec.Code != tt.wantStatus {
				t.Fatalf("status = %d, want %d", rec.Code, tt.wantStatus)
			}
			if got := hd.Get("RateLimit-Policy"); got != `"api/1m/token_bucket";q=3;w=90` {
				t.Errorf("RateLimit-Policy = %q", got)
			}
			if got := hd.Get("RateLimit"); got != tt.wantRL {
				t.Errorf("RateLimit = %q, want %q", got, tt.wantRL)
			}
			if got := hd.Get("Retry-After"); got != tt.wantRetry {
				t.Errorf("Retry-After = %q, want %q", got, tt.wantRetry)
			}
			if got := hd.Get("X-RateLimit-Limit"); got != "3" {
				t.Errorf("X-RateLimit-Limit = %q, want 3", got)
			}
		})
	}
}

// An anchored window of 3 a minute and a sliding log of 2 a minute, each
// behind a Limiter on the library's decisions: the headers carry each
// decision's remaining, reset and retry, to the second rounded up.
func TestLimiterAnchoredAndSlidingLog(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 250_000_000, time.UTC)
	in := ratelimiting.NewInstance("test", ratelimiting.WithClock(func() time.Time { return now }))
	t.Cleanup(func() { _ = in.Close(context.Background()) })
	if err := in.New(namespace.Config{SyncRate: namespace.LocalOnly, WindowSizes: []time.Duration{time.Minute}}); err != nil {
		t.Fatal(err)
	}
	handler := func(name string, l ratelimiting.Limit) http.Handler {
		lim, err := New(in, Policy{Name: name, Limits: []ratelimiting.Limit{l}}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		return lim.Handler(&next{})
	}
	anchored := handler("a", ratelimiting.Limit{Limit: 3, Window: time.Minute, Algorithm: ratelimiting.AnchoredWindow})
	log := handler("l", ratelimiting.Limit{Limit: 2, Window: time.Minute, Algorithm: ratelimiting.SlidingLog})
	tests := []struct {
		name       string
		h          http.Handler
		advance    time.Duration // before the request
		wantStatus int
		wantRL     string
		wantRetry  string
	}{
		{"anchored: the first hit opens the window", anchored, 0, http.StatusNoContent, `"a/1m/anchored";r=2;t=60`, ""},
		{"anchored: 17.5s in", anchored, 17500 * time.Millisecond, http.StatusNoContent, `"a/1m/anchored";r=1;t=43`, ""},
		{"anchored: the third", anchored, 0, http.StatusNoContent, `"a/1m/anchored";r=0;t=43`, ""},
		{"anchored: the fourth waits for the window's end", anchored, 0, http.StatusTooManyRequests, `"a/1m/anchored";r=0;t=43`, "43"},
		{"anchored: at its end a new window opens", anchored, 42500 * time.Millisecond, http.StatusNoContent, `"a/1m/anchored";r=2;t=60`, ""},
		{"log: the first hit weighs a minute", log, 0, http.StatusNoContent, `"l/1m/sliding_log";r=1;t=60`, ""},
		{"log: 20s later", log, 20 * time.Second, http.StatusNoContent, `"l/1m/sliding_log";r=0;t=60`, ""},
		{"log: the third waits for the first to stop weighing", log, 0, http.StatusTooManyRequests, `"l/1m/sliding_log";r=0;t=60`, "40"},
		{"log: 40s later it passes", log, 40 * time.Second, http.StatusNoContent, `"l/1m/sliding_log";r=0;t=60`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now = now.Add(tt.advance)
			rec := serve(tt.h, request(""))
			if rec.Code != tt.wantStatus {
				t.Fatalf("status = %d, want %d", rec.Code, tt.wantStatus)
			}
			hd := rec.Header()
			if got := hd.Get("RateLimit"); got != tt.wantRL {
				t.Errorf("RateLimit = %q, want %q", got, tt.wantRL)
			}
			if got := hd.Get("Retry-After"); got != tt.wantRetry {
				t.Errorf("Retry-After = %q, want %q", got, tt.wantRetry)
			}
			_, rl, _ := strings.Cut(tt.wantRL, ";r=")
			remaining, reset, _ := strings.Cut(rl, ";t=")
			if hd.Get("X-RateLimit-Remaining") != remaining || hd.Get("X-RateLimit-Reset") != reset {
				t.Errorf("X-RateLimit-Remaining %q, -Reset %q, want %s, %s", hd.Get("X-RateLimit-Remaining"), hd.Get("X-RateLimit-Reset"), remaining, reset)
			}
		})
	}
}

func TestLimiterAllowsThenDenies(t *testing.T) {
	in := newInstance(t)
	key, _ := ParseKey([]string{"header:X-Api-Key"}, KeyOptions{})
	var outcomes []Outcome
	lim, err := New(in, Policy{
		Name:   "api",
		Limits: []ratelimiting.Limit{{Limit: 2, Window: time.Second, Fixed: true}},
		Key:    key,
	}, Options{Observe: func(_ *http.Request, res Result) { outcomes = append(outcomes, res.Outcome) }})
	if err != nil {
		t.Fatal(err)
	}
	nx := &next{}
	h := lim.Handler(nx)
	tests := []struct {
		name       string
		key        string
		wantStatus int
		wantRemain string
	}{
		{"first", "a", http.StatusNoContent, "1"},
		{"second", "a", http.StatusNoContent, "0"},
		{"third is denied", "a", http.StatusTooManyRequests, "0"},
		{"another key has its own quota", "b", http.StatusNoContent, "1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := serve(h, request(tt.key))
			if rec.Code != tt.wantStatus {
				t.Fatalf("status = %d, want %d", rec.Code, tt.wantStatus)
			}
			if got := rec.Header().Get("X-RateLimit-Remaining"); got != tt.wantRemain {
				t.Errorf("X-RateLimit-Remaining = %q, want %q", got, tt.wantRemain)
			}
			if got := rec.Header().Get("RateLimit-Policy"); got != `"api/1s/fixed";q=2;w=1` {
				t.Errorf("RateLimit-Policy = %q", got)
			}
			if tt.wantStatus == http.StatusTooManyRequests {
				if got := rec.Header().Get("Retry-After"); got != "1" {
					t.Errorf("Retry-After = %q, want 1", got)
				}
				if got := rec.Header().Get("Content-Type"); got != "application/json" {
					t.Errorf("Content-Type = %q", got)
				}
				var body struct{ Message string }
				if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.Message != DefaultDeniedMessage {
					t.Errorf("body = %q (%v)", rec.Body, err)
				}
			}
		})
	}
	if got := nx.calls.Load(); got != 3 {
		t.Errorf("next called %d times, want 3", got)
	}
	want := []Outcome{Allowed, Allowed, Denied, Allowed}
	if len(outcomes) != len(want) {
		t.Fatalf("outcomes = %v, want %v", outcomes, want)
	}
	for i := range want {
		if outcomes[i] != want[i] {
			t.Errorf("outcomes = %v, want %v", outcomes, want)
		}
	}
}

func TestLimiterOptions(t *testing.T) {
	tests := []struct {
		name       string
		policy     Policy
		opts       Options
		key        string
		wantStatus int
		check      func(t *testing.T, rec *httptest.ResponseRecorder)
	}{
		{
			name:       "hidden headers",
			policy:     Policy{Limits: []ratelimiting.Limit{{Limit: 1, Window: time.Second}}},
			opts:       Options{Headers: HeaderOptions{Hide: true}},
			wantStatus: http.StatusNoContent,
			check: func(t *testing.T, rec *httptest.ResponseRecorder) {
				for k := range rec.Header() {
					if strings.Contains(strings.ToLower(k), "ratelimit") {
						t.Errorf("header %s set although hidden", k)
					}
				}
			},
		},
		{
			name:       "custom denial",
			policy:     Policy{Limits: []ratelimiting.Limit{{Limit: 1, Window: time.Second}}, Cost: 1},
			opts:       Options{DeniedStatus: http.StatusServiceUnavailable, DeniedMessage: "slow down"},
			key:        "deny-me",
			wantStatus: http.StatusServiceUnavailable,
			check: func(t *testing.T, rec *httptest.ResponseRecorder) {
				if !strings.Contains(rec.Body.String(), `"slow down"`) {
					t.Errorf("body = %q", rec.Body)
				}
			},
		},
		{
			name:       "key too long",
			policy:     Policy{Limits: []ratelimiting.Limit{{Limit: 1, Window: time.Second}}},
			opts:       Options{MaxKeyBytes: 4},
			key:        "12345",
			wantStatus: http.StatusBadRequest,
			check: func(t *testing.T, rec *httptest.ResponseRecorder) {
				if got := rec.Header().Get("Content-Type"); got != "application/problem+json" {
					t.Errorf("Content-Type = %q", got)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := newInstance(t)
			key, _ := ParseKey([]string{"header:X-Api-Key"}, KeyOptions{})
			tt.policy.Key = key
			lim, err := New(in, tt.policy, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			h := lim.Handler(&next{})
			rec := serve(h, request(tt.key))
			if tt.key == "deny-me" {
				rec = serve(h, request(tt.key))
			}
			if rec.Code != tt.wantStatus {
				t.Fatalf("status = %d, want %d; body %s", rec.Code, tt.wantStatus, rec.Body)
			}
			tt.check(t, rec)
		})
	}
}

func TestLimiterFaults(t *testing.T) {
	tests := []struct {
		name       string
		failOpen   bool
		wantStatus int
		wantNext   int64
	}{
		{"closed instance: 503", false, http.StatusServiceUnavailable, 0},
		{"closed instance, fail open: passes", true, http.StatusNoContent, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := newInstance(t)
			lim, err := New(in, Policy{Limits: []ratelimiting.Limit{{Limit: 5, Window: time.Second}}}, Options{FailOpen: tt.failOpen})
			if err != nil {
				t.Fatal(err)
			}
			if err := in.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			nx := &next{}
			rec := serve(lim.Handler(nx), request(""))
			if rec.Code != tt.wantStatus || nx.calls.Load() != tt.wantNext {
				t.Errorf("status %d, next called %d times; want %d, %d", rec.Code, nx.calls.Load(), tt.wantStatus, tt.wantNext)
			}
			if rec.Code == http.StatusServiceUnavailable && rec.Header().Get("Retry-After") != "1" {
				t.Errorf("Retry-After = %q", rec.Header().Get("Retry-After"))
			}
		})
	}
}

func TestLimiterStoreDown(t *testing.T) {
	tests := []struct {
		name       string
		mode       StoreDown
		wantStatus int
	}{
		{"local keeps deciding", StoreDownLocal, http.StatusNoContent},
		{"deny refuses", StoreDownDeny, http.StatusServiceUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := strategytest.NewFaulty(memory.New())
			in := ratelimiting.NewInstance("test")
			t.Cleanup(func() { store.SetDown(false); _ = in.Close(context.Background()) })
			err := in.New(namespace.Config{Name: "shared", SyncRate: time.Hour, Strategy: store, WindowSizes: []time.Duration{time.Minute}})
			if err != nil {
				t.Fatal(err)
			}
			lim, err := New(in, Policy{Namespace: "shared", Limits: []ratelimiting.Limit{{Limit: 100, Window: time.Minute}}, StoreDown: tt.mode}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			h := lim.Handler(&next{})
			if rec := serve(h, request("")); rec.Code != http.StatusNoContent {
				t.Fatalf("store up: status %d", rec.Code)
			}
			store.SetDown(true)
			if err := in.Sync(context.Background(), "shared"); err == nil {
				t.Fatal("Sync with the store down succeeded")
			}
			var rec *httptest.ResponseRecorder
			waitFor(t, func() bool {
				rec = serve(h, request(""))
				return rec.Code == tt.wantStatus
			})
			if tt.mode == StoreDownDeny && !strings.Contains(rec.Body.String(), "store-unavailable") {
				t.Errorf("body = %s", rec.Body)
			}
			store.SetDown(false)
			if err := in.Sync(context.Background(), "shared"); err != nil {
				t.Fatal(err)
			}
			waitFor(t, func() bool { return serve(h, request("")).Code == http.StatusNoContent })
		})
	}
}

// waitFor polls cond until it holds, failing the test after 5 seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestNewErrors(t *testing.T) {
	in := newInstance(t)
	ok := []ratelimiting.Limit{{Limit: 1, Window: time.Second}}
	tests := []struct {
		name   string
		in     *ratelimiting.Instance
		policy Policy
		want   string
	}{
		{"nil instance", nil, Policy{Limits: ok}, "nil"},
		{"unknown namespace", in, Policy{Namespace: "nope", Limits: ok}, "not found"},
		{"no limits", in, Policy{}, "at least one limit"},
		{"window not in namespace", in, Policy{Limits: []ratelimiting.Limit{{Limit: 1, Window: time.Hour}}}, "window sizes"},
		{"limit zero", in, Policy{Limits: []ratelimiting.Limit{{Limit: 0, Window: time.Second}}}, "limits[0].limit"},
		{"cost above limit", in, Policy{Limits: ok, Cost: 2}, "cost"},
		{"negative cost", in, Policy{Limits: ok, Cost: -1}, "cost"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.in, tt.policy, Options{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New = %v, want an error containing %q", err, tt.want)
			}
		})
	}
	if _, err := New(in, Policy{Namespace: "nope", Limits: ok}, Options{}); !errors.Is(err, ratelimiting.ErrNamespaceNotFound) {
		t.Errorf("unknown namespace: %v, want ErrNamespaceNotFound", err)
	}
}

func TestOutcomeString(t *testing.T) {
	for o, want := range map[Outcome]string{Allowed: "allowed", Denied: "denied", StoreDeny: "store_down", Failed: "error", 9: "outcome(9)"} {
		if got := o.String(); got != want {
			t.Errorf("Outcome(%d) = %q, want %q", o, got, want)
		}
	}
}
