package node

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

const apiYAML = `
node:
  max_key_bytes: 64
namespaces:
  - name: default
  - name: shared
    strategy: memory
    sync_rate: 1h
    window_sizes: [1s, 1m]
policies:
  - name: api
    namespace: default
    limits:
      - {limit: 2, window: 1s, type: fixed}
      - {limit: 100, window: 1m}
  - name: heavy
    namespace: shared
    cost: 3
    limits: [{limit: 10, window: 1m}]
`

// checkAnswer is the JSON answer of /v1/check.
type checkAnswer struct {
	Allowed      bool  `json:"allowed"`
	RetryAfterMS int64 `json:"retry_after_ms"`
	Limits       []struct {
		Limit     float64  `json:"limit"`
		Window    string   `json:"window"`
		Type      string   `json:"type"`
		Burst     *float64 `json:"burst"`     // buckets only
		Precision *string  `json:"precision"` // sliding limits with a precision only
		Remaining float64  `json:"remaining"`
		ResetMS   int64    `json:"reset_ms"`
	} `json:"limits"`
}

func decodeAnswer(t *testing.T, w *httptest.ResponseRecorder) checkAnswer {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type = %q; body %s", ct, w.Body)
	}
	var a checkAnswer
	dec := json.NewDecoder(w.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		t.Fatalf("answer %q: %v", w.Body, err)
	}
	return a
}

func TestCheckNamespaceForm(t *testing.T) {
	n := newTestNode(t, apiYAML, nil)
	body := `{"namespace":"default","key":"user:42","cost":1,"limits":[{"limit":100,"window":"1m"},{"limit":2,"window":"1s","type":"fixed"}]}`
	tests := []struct {
		name       string
		wantStatus int
		wantRemain string
	}{
		{"first", http.StatusOK, "1"},
		{"second", http.StatusOK, "0"},
		{"third is denied", http.StatusTooManyRequests, "0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := do(n.api, "POST", "/v1/check", body)
			if w.Code != tt.wantStatus {
				t.Fatalf("status %d, want %d; body %s", w.Code, tt.wantStatus, w.Body)
			}
			h := w.Header()
			if got := h.Get("RateLimit-Policy"); got != `"default/1m";q=100;w=60, "default/1s/fixed";q=2;w=1` {
				t.Errorf("RateLimit-Policy = %q", got)
			}
			if got := h.Get("RateLimit"); !strings.HasPrefix(got, `"default/1m";r=`) || !strings.Contains(got, `"default/1s/fixed";r=`+tt.wantRemain+";t=") {
				t.Errorf("RateLimit = %q", got)
			}
			if h.Get("X-RateLimit-Limit") != "2" || h.Get("X-RateLimit-Remaining") != tt.wantRemain || h.Get("X-RateLimit-Reset") == "" {
				t.Errorf("X-RateLimit-* = %q %q %q", h.Get("X-RateLimit-Limit"), h.Get("X-RateLimit-Remaining"), h.Get("X-RateLimit-Reset"))
			}
			a := decodeAnswer(t, w)
			if a.Allowed != (tt.wantStatus == http.StatusOK) || len(a.Limits) != 2 || a.Limits[0].Window != "1m" || a.Limits[1].Type != "fixed" {
				t.Errorf("answer %+v", a)
			}
			if tt.wantStatus == http.StatusTooManyRequests {
				if h.Get("Retry-After") != "1" || a.RetryAfterMS <= 0 || a.RetryAfterMS > 1000 {
					t.Errorf("Retry-After %q, retry_after_ms %d", h.Get("Retry-After"), a.RetryAfterMS)
				}
			} else if h.Get("Retry-After") != "" {
				t.Errorf("Retry-After on an allowed request: %q", h.Get("Retry-After"))
			}
		})
	}
}

func TestCheckPolicyForm(t *testing.T) {
	n := newTestNode(t, apiYAML, nil)
	tests := []struct {
		name       string
		body       string
		wantStatus int
		wantRemain float64 // of the first limit
	}{
		{"policy api", `{"policy":"api","key":"k"}`, http.StatusOK, 1},
		{"again", `{"policy":"api","key":"k"}`, http.StatusOK, 0},
		{"denied", `{"policy":"api","key":"k"}`, http.StatusTooManyRequests, 0},
		{"cost 0 asks without counting", `{"policy":"api","key":"k2","cost":0}`, http.StatusOK, 2},
		{"policy cost applies", `{"policy":"heavy","key":"k"}`, http.StatusOK, 7},
		{"explicit cost wins", `{"policy":"heavy","key":"k","cost":1}`, http.StatusOK, 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := do(n.api, "POST", "/v1/check", tt.body)
			if w.Code != tt.wantStatus {
				t.Fatalf("status %d, want %d; body %s", w.Code, tt.wantStatus, w.Body)
			}
			if a := decodeAnswer(t, w); a.Limits[0].Remaining != tt.wantRemain {
				t.Errorf("remaining %v, want %v", a.Limits[0].Remaining, tt.wantRemain)
			}
			if !strings.Contains(w.Header().Get("RateLimit-Policy"), `"`+strings.Split(tt.body, `"`)[3]+`/`) {
				t.Errorf("RateLimit-Policy = %q does not name the policy", w.Header().Get("RateLimit-Policy"))
			}
		})
	}
}

func TestCheckBadInput(t *testing.T) {
	n := newTestNode(t, apiYAML, nil)
	lim := `"limits":[{"limit":10,"window":"1m"}]`
	tests := []struct {
		name       string
		method     string
		body       string
		wantStatus int
		wantField  string
		wantDetail string
	}{
		{"malformed", "", `{"key":`, 400, "body", "malformed JSON"},
		{"not JSON", "", `key=1`, 400, "body", "malformed JSON at byte 1"},
		{"trailing data", "", `{"key":"k",` + lim + `} {}`, 400, "body", "unexpected data after the JSON object"},
		{"empty", "", ``, 400, "body", "empty"},
		{"array", "", `[1]`, 400, "body", "JSON object"},
		{"null", "", `null`, 400, "key", "required"},
		{"unknown field", "", `{"key":"k","colour":1,` + lim + `}`, 400, "colour", "unknown field"},
		{"unknown limit field", "", `{"key":"k","limits":[{"limit":1,"window":"1s","bucket":3}]}`, 400, "limits[0].bucket", "unknown field"},
		{"missing key", "", `{` + lim + `}`, 400, "key", "required"},
		{"key not a string", "", `{"key":42,` + lim + `}`, 400, "key", "must be a string"},
		{"null number beside a bad field", "", `{"cost":null,"key":"k","limits":"x"}`, 400, "limits", "must be a list"},
		{"key too long", "", `{"key":"` + strings.Repeat("k", 65) + `",` + lim + `}`, 400, "key", "65 bytes: must be at most 64"},
		{"negative cost", "", `{"key":"k","cost":-1,` + lim + `}`, 400, "cost", "must be >= 0"},
		{"NaN cost", "", `{"key":"k","cost":"NaN",` + lim + `}`, 400, "cost", "must be a number"},
		{"infinite cost", "", `{"key":"k","cost":1e400,` + lim + `}`, 400, "cost", "must be a finite number"},
		{"huge cost", "", `{"key":"k","cost":1e300,` + lim + `}`, 400, "cost", "at most 1e+15"},
		{"cost above limit", "", `{"key":"k","cost":11,` + lim + `}`, 400, "cost", "must be at most limits[0].limit"},
		{"no limits", "", `{"key":"k"}`, 400, "limits", "required"},
		{"limits not a list", "", `{"key":"k","limits":{}}`, 400, "limits", "must be a list"},
		{"limit zero", "", `{"key":"k","limits":[{"limit":0,"window":"1s"}]}`, 400, "limits[0].limit", "must be > 0"},
		{"limit negative", "", `{"key":"k","limits":[{"limit":1,"window":"1s"},{"limit":-5,"window":"1m"}]}`, 400, "limits[1].limit", "must be > 0"},
		{"limit NaN", "", `{"key":"k","limits":[{"limit":"NaN","window":"1s"}]}`, 400, "limits[0].limit", "must be a number"},
		{"window 0s", "", `{"key":"k","limits":[{"limit":1,"window":"0s"}]}`, 400, "limits[0].window", `"0s": must be > 0`},
		{"window abc", "", `{"key":"k","limits":[{"limit":1,"window":"abc"}]}`, 400, "limits[0].window", `"abc": must be a duration like 1s, 1m, 1h`},
		{"window missing", "", `{"key":"k","limits":[{"limit":1}]}`, 400, "limits[0].window", "required"},
		{"window not in namespace", "", `{"key":"k","limits":[{"limit":1,"window":"2m"}]}`, 400, "limits[0].window", "must be one of the window sizes"},
		{"window a number", "", `{"key":"k","limits":[{"limit":1,"window":60}]}`, 400, "limits[0].window", "must be a string"},
		{"type", "", `{"key":"k","limits":[{"limit":1,"window":"1s","type":"leaky"}]}`, 400, "limits[0].type", `"leaky": must be one of sliding, fixed, anchored, sliding_log, token_bucket, leaky_bucket, sliding_window, fixed_window`},
		{"burst on a sliding window", "", `{"key":"k","limits":[{"limit":1,"window":"1s","burst":3}]}`, 400, "limits[0].burst", "3: only applies to type token_bucket and leaky_bucket, not sliding"},
		{"burst 0 on a fixed window", "", `{"key":"k","limits":[{"limit":1,"window":"1s","type":"fixed","burst":0}]}`, 400, "limits[0].burst", "0: only applies to type token_bucket and leaky_bucket, not fixed"},
		{"negative burst", "", `{"key":"k","limits":[{"limit":1,"window":"1s","type":"token_bucket","burst":-1}]}`, 400, "limits[0].burst", "-1: must be >= 0 (0 means the limit) and at most 1e+15"},
		{"NaN burst", "", `{"key":"k","limits":[{"limit":1,"window":"1s","type":"leaky_bucket","burst":"NaN"}]}`, 400, "limits[0].burst", "must be a number"},
		{"infinite burst", "", `{"key":"k","limits":[{"limit":1,"window":"1s","type":"leaky_bucket","burst":1e400}]}`, 400, "limits[0].burst", "must be a finite number"},
		{"huge burst", "", `{"key":"k","limits":[{"limit":1,"window":"1s","type":"token_bucket","burst":1e16}]}`, 400, "limits[0].burst", "at most 1e+15"},
		{"cost above the burst", "", `{"key":"k","cost":3,"limits":[{"limit":10,"window":"1m","type":"token_bucket","burst":2}]}`, 400, "cost", "cost: 3: must be at most the bucket's capacity (2, limits[0].burst)"},
		{"bucket window not whole milliseconds", "", `{"key":"k","limits":[{"limit":1,"window":"1500us","type":"token_bucket"}]}`, 400, "limits[0].window", `"1500us": must be a whole number of milliseconds`},
		{"bucket window over 100 years", "", `{"key":"k","limits":[{"limit":1,"window":"876001h","type":"leaky_bucket"}]}`, 400, "limits[0].window", "at most 876000h"},
		{"bucket with penalty", "", `{"key":"k","penalty":true,"limits":[{"limit":1,"window":"1m","type":"leaky_bucket"}]}`, 400, "limits[0].type", "leaky_bucket: a bucket cannot count denied requests"},
		{"bucket too slow to refill", "", `{"key":"k","limits":[{"limit":0.0000001,"window":"876000h","type":"token_bucket","burst":1}]}`, 400, "limits[0].burst", "must let the bucket refill from empty within 876000h"},
		{"one bucket, two rates", "", `{"key":"k","limits":[{"limit":1,"window":"1m","type":"token_bucket"},{"limit":2,"window":"1m","type":"token_bucket"}]}`, 400, "limits[1].limit", "share one bucket, which has one rate"},
		{"precision on a fixed window", "", `{"key":"k","limits":[{"limit":1,"window":"1m","type":"fixed","precision":"1s"}]}`, 400, "limits[0].precision", `"1s": only applies to type sliding, not fixed`},
		{"precision 0 on a token bucket", "", `{"key":"k","limits":[{"limit":1,"window":"1m","type":"token_bucket","precision":"0s"}]}`, 400, "limits[0].precision", `"0s": only applies to type sliding, not token_bucket`},
		{"precision on a sliding log", "", `{"key":"k","limits":[{"limit":1,"window":"1m","type":"sliding_log","precision":"1s"}]}`, 400, "limits[0].precision", `"1s": only applies to type sliding, not sliding_log`},
		{"precision abc", "", `{"key":"k","limits":[{"limit":1,"window":"1m","precision":"abc"}]}`, 400, "limits[0].precision", `"abc": must be a duration like 1s, 1m, 1h`},
		{"negative precision", "", `{"key":"k","limits":[{"limit":1,"window":"1m","precision":"-1s"}]}`, 400, "limits[0].precision", `"-1s": must be >= 0 (0 means the window)`},
		{"precision not whole milliseconds", "", `{"key":"k","limits":[{"limit":1,"window":"1m","precision":"1500us"}]}`, 400, "limits[0].precision", `"1500us": must be a whole number of milliseconds`},
		{"precision a number", "", `{"key":"k","limits":[{"limit":1,"window":"1m","precision":1}]}`, 400, "limits[0].precision", "must be a string"},
		{"precision not dividing the window", "", `{"key":"k","limits":[{"limit":1,"window":"1m"},{"limit":1,"window":"1m","precision":"7s"}]}`, 400, "limits[1].precision", "7s: must divide limits[1].window (1m0s)"},
		{"too many sub-windows", "", `{"key":"k","limits":[{"limit":1,"window":"1h","precision":"1s"}]}`, 400, "limits[0].precision", "1s: must be at least limits[0].window / 60 (1m0s): a window slides over at most 60 sub-windows"},
		{"precision not a window size", "", `{"key":"k","limits":[{"limit":1,"window":"1m","precision":"10s"}]}`, 400, "limits[0].precision", `10s: must be one of the window sizes of namespace "default"`},
		{"precision with penalty", "", `{"key":"k","penalty":true,"limits":[{"limit":1,"window":"1h","precision":"1m"}]}`, 400, "limits[0].precision", "cannot be used with penalty"},
		{"sliding log in a periodic namespace", "", `{"namespace":"shared","key":"k","limits":[{"limit":1,"window":"1m","type":"sliding_log"}]}`, 400, "limits[0].type",
			`sliding_log: sliding_log is decided as a whole per key, locally or in the store, and cannot sync periodically (namespace "shared" syncs every 1h0m0s): use sliding_window with precision, or a synchronous or local-only namespace`},
		{"anchored in a periodic namespace", "", `{"namespace":"shared","key":"k","limits":[{"limit":1,"window":"1m","type":"anchored"}]}`, 400, "limits[0].type", "use fixed_window, or a synchronous or local-only namespace"},
		{"sliding log above 10000", "", `{"key":"k","limits":[{"limit":10001,"window":"1m","type":"sliding_log"}]}`, 400, "limits[0].limit", "10001: must be at most 10000 for sliding_log (a log keeps an entry per admitted millisecond): use sliding_window with a precision"},
		{"sliding log cost too fine", "", `{"key":"k","cost":0.5,"limits":[{"limit":10000,"window":"1m","type":"sliding_log"}]}`, 400, "cost", "0.5: must be 0 or at least limits[0].limit / 10000 (1) for sliding_log"},
		{"anchored with penalty", "", `{"key":"k","penalty":true,"limits":[{"limit":1,"window":"1m","type":"anchored"}]}`, 400, "limits[0].type", "anchored: only sliding_window and fixed_window can count denied requests"},
		{"burst on an anchored window", "", `{"key":"k","limits":[{"limit":1,"window":"1m","type":"anchored","burst":2}]}`, 400, "limits[0].burst", "2: only applies to type token_bucket and leaky_bucket, not anchored"},
		{"anchored window over 100 years", "", `{"key":"k","limits":[{"limit":1,"window":"876001h","type":"anchored"}]}`, 400, "limits[0].window", "at most 876000h"},
		{"cost above an anchored limit", "", `{"key":"k","cost":2,"limits":[{"limit":1,"window":"1m","type":"anchored"}]}`, 400, "cost", "must be at most limits[0].limit (1)"},
		{"17 limits", "", `{"key":"k","limits":[` + strings.Repeat(`{"limit":1,"window":"1s"},`, 16) + `{"limit":1,"window":"1s"}]}`, 400, "limits", "at most 16"},
		{"unknown namespace", "", `{"namespace":"nope","key":"k",` + lim + `}`, 404, "namespace", `namespace "nope"`},
		{"unknown policy", "", `{"policy":"nope","key":"k"}`, 404, "policy", `policy "nope"`},
		{"policy with limits", "", `{"policy":"api","key":"k",` + lim + `}`, 400, "limits", "not with policy"},
		{"policy with namespace", "", `{"policy":"api","namespace":"default","key":"k"}`, 400, "namespace", "not with policy"},
		{"oversized body", "", `{"key":"` + strings.Repeat("k", 70<<10) + `"}`, 413, "body", "at most 65536 bytes"},
		{"wrong method", "GET", ``, 405, "", "allowed: POST"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method := tt.method
			if method == "" {
				method = "POST"
			}
			w := do(n.api, method, "/v1/check", tt.body)
			if w.Code != tt.wantStatus {
				t.Fatalf("status %d, want %d; body %s", w.Code, tt.wantStatus, w.Body)
			}
			p := problemOfBody(t, w)
			if p.Field != tt.wantField || !strings.Contains(p.Detail, tt.wantDetail) {
				t.Errorf("field %q detail %q; want field %q, detail containing %q", p.Field, p.Detail, tt.wantField, tt.wantDetail)
			}
		})
	}
}

func TestIncrementAndWindow(t *testing.T) {
	n := newTestNode(t, apiYAML, nil)
	type window struct {
		Namespace     string  `json:"namespace"`
		Key           string  `json:"key"`
		Window        string  `json:"window"`
		WindowStartMS int64   `json:"window_start_ms"`
		Rate          float64 `json:"rate"`
		Current       float64 `json:"current"`
		Previous      float64 `json:"previous"`
		Weight        float64 `json:"weight"`
	}
	tests := []struct {
		name        string
		method      string
		target      string
		body        string
		wantCurrent float64
	}{
		{"increment by default 1", "POST", "/v1/increment", `{"key":"k","window":"1m"}`, 1},
		{"increment by 2.5", "POST", "/v1/increment", `{"namespace":"default","key":"k","window":"1m","value":2.5}`, 3.5},
		{"refund", "POST", "/v1/increment", `{"key":"k","window":"1m","value":-0.5}`, 3},
		{"read", "GET", "/v1/window?namespace=default&key=k&window=1m", "", 3},
		{"read another key", "GET", "/v1/window?key=other&window=1m", "", 0},
		{"memory namespace", "POST", "/v1/increment", `{"namespace":"shared","key":"k","window":"1s","value":4}`, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := do(n.api, tt.method, tt.target, tt.body)
			if w.Code != http.StatusOK {
				t.Fatalf("status %d; body %s", w.Code, w.Body)
			}
			var got window
			if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			if got.Current != tt.wantCurrent || got.Rate < got.Current || got.Weight <= 0 || got.Weight > 1 || got.WindowStartMS <= 0 || got.Key == "" {
				t.Errorf("window %+v, want current %v", got, tt.wantCurrent)
			}
		})
	}
}

func TestIncrementAndWindowBadInput(t *testing.T) {
	n := newTestNode(t, apiYAML, nil)
	tests := []struct {
		name       string
		method     string
		target     string
		body       string
		wantStatus int
		wantField  string
	}{
		{"increment: no key", "POST", "/v1/increment", `{"window":"1m"}`, 400, "key"},
		{"increment: no window", "POST", "/v1/increment", `{"key":"k"}`, 400, "window"},
		{"increment: bad window", "POST", "/v1/increment", `{"key":"k","window":"1x"}`, 400, "window"},
		{"increment: window not in namespace", "POST", "/v1/increment", `{"key":"k","window":"1h","namespace":"shared"}`, 400, "window"},
		{"increment: NaN value", "POST", "/v1/increment", `{"key":"k","window":"1m","value":"NaN"}`, 400, "value"},
		{"increment: huge value", "POST", "/v1/increment", `{"key":"k","window":"1m","value":-1e99}`, 400, "value"},
		{"increment: unknown field", "POST", "/v1/increment", `{"key":"k","window":"1m","cost":1}`, 400, "cost"},
		{"increment: unknown namespace", "POST", "/v1/increment", `{"namespace":"x","key":"k","window":"1m"}`, 404, "namespace"},
		{"increment: GET", "GET", "/v1/increment", ``, 405, ""},
		{"window: no key", "GET", "/v1/window?window=1m", "", 400, "key"},
		{"window: no window", "GET", "/v1/window?key=k", "", 400, "window"},
		{"window: unknown parameter", "GET", "/v1/window?key=k&window=1m&colour=red", "", 400, "colour"},
		{"window: repeated parameter", "GET", "/v1/window?key=k&key=j&window=1m", "", 400, "key"},
		{"window: unknown namespace", "GET", "/v1/window?namespace=x&key=k&window=1m", "", 404, "namespace"},
		{"window: POST", "POST", "/v1/window", "", 405, ""},
		{"unknown endpoint", "GET", "/v2/check", "", 404, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := do(n.api, tt.method, tt.target, tt.body)
			if w.Code != tt.wantStatus {
				t.Fatalf("status %d, want %d; body %s", w.Code, tt.wantStatus, w.Body)
			}
			if p := problemOfBody(t, w); p.Field != tt.wantField {
				t.Errorf("field %q, want %q (%s)", p.Field, tt.wantField, p.Detail)
			}
		})
	}
}

// A body without a declared length (chunked) is cut at the limit too.
func TestCheckChunkedBodyTooLarge(t *testing.T) {
	n := newTestNode(t, "", nil)
	body := io.MultiReader(strings.NewReader(`{"key":"`), strings.NewReader(strings.Repeat("k", 70<<10)), strings.NewReader(`"}`))
	r := httptest.NewRequest("POST", "/v1/check", body)
	if r.ContentLength != -1 {
		t.Fatalf("ContentLength %d, want -1 (chunked)", r.ContentLength)
	}
	w := httptest.NewRecorder()
	n.api.ServeHTTP(w, r)
	if w.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	if p := problemOfBody(t, w); p.Field != "body" {
		t.Errorf("field %q", p.Field)
	}
}

const bucketYAML = `
namespaces:
  - name: default
  - name: shared
    strategy: memory
    sync_rate: 0
    window_sizes: [1s]
policies:
  - name: uploads
    limits: [{limit: 2, window: 1h, type: leaky_bucket, burst: 1}]
  - name: shared
    namespace: shared
    limits: [{limit: 1, window: 1h, type: token_bucket, burst: 2}]
`

// Token and leaky buckets through /v1/check, in both forms: the answer
// names each limit's type and burst, and the headers carry its numbers.
func TestCheckBuckets(t *testing.T) {
	n := newTestNode(t, bucketYAML, nil)
	tb := `{"key":"u","limits":[{"limit":1,"window":"1h","type":"token_bucket","burst":2}]}`
	tests := []struct {
		name       string
		body       string
		wantStatus int
		wantType   string
		wantBurst  float64
		wantRemain float64
		wantRetry  int64 // ms, at most; 0: allowed
	}{
		{"token bucket: full at first", tb, 200, "token_bucket", 2, 1, 0},
		{"token bucket: empty", tb, 200, "token_bucket", 2, 0, 0},
		{"token bucket: a token an hour", tb, 429, "token_bucket", 2, 0, 3_600_000},
		{"leaky bucket policy", `{"policy":"uploads","key":"u"}`, 200, "leaky_bucket", 1, 0, 0},
		{"leaky bucket policy: drains one in 30m", `{"policy":"uploads","key":"u"}`, 429, "leaky_bucket", 1, 0, 1_800_000},
		{"burst 0 is the limit", `{"key":"z","limits":[{"limit":3,"window":"90s","type":"leaky_bucket","burst":0}]}`, 200, "leaky_bucket", 3, 2, 0},
		{"a synchronous store decides", `{"policy":"shared","key":"u","cost":2}`, 200, "token_bucket", 2, 0, 0},
		{"a synchronous store denies", `{"policy":"shared","key":"u"}`, 429, "token_bucket", 2, 0, 3_600_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := do(n.api, "POST", "/v1/check", tt.body)
			if w.Code != tt.wantStatus {
				t.Fatalf("status %d, want %d; body %s", w.Code, tt.wantStatus, w.Body)
			}
			h := w.Header()
			a := decodeAnswer(t, w)
			l := a.Limits[0]
			if l.Type != tt.wantType || l.Burst == nil || *l.Burst != tt.wantBurst || l.Remaining != tt.wantRemain {
				t.Errorf("limit %+v (burst %v), want type %s burst %v remaining %v", l, l.Burst, tt.wantType, tt.wantBurst, tt.wantRemain)
			}
			if tt.wantRetry == 0 && (a.RetryAfterMS != 0 || h.Get("Retry-After") != "") {
				t.Errorf("allowed, with retry_after_ms %d, Retry-After %q", a.RetryAfterMS, h.Get("Retry-After"))
			}
			if tt.wantRetry > 0 && (a.RetryAfterMS > tt.wantRetry || a.RetryAfterMS < tt.wantRetry-60_000) {
				t.Errorf("retry_after_ms %d, want about %d", a.RetryAfterMS, tt.wantRetry)
			}
			pol := "default"
			if p := strings.Split(tt.body, `"`); p[1] == "policy" {
				pol = p[3]
			}
			checkHeadersMatch(t, h, pol, a)
		})
	}
	w := do(n.api, "POST", "/v1/check", `{"key":"v","limits":[{"limit":100,"window":"1m","type":"sliding_window"},{"limit":1,"window":"90s","type":"leaky_bucket"},{"limit":5,"window":"1s","type":"fixed_window"}]}`)
	a := decodeAnswer(t, w)
	if w.Code != 200 || a.Limits[0].Type != "sliding" || a.Limits[0].Burst != nil || a.Limits[1].Type != "leaky_bucket" || a.Limits[2].Type != "fixed" {
		t.Errorf("status %d, answer %+v", w.Code, a)
	}
	if got := w.Header().Get("RateLimit-Policy"); got != `"default/1m";q=100;w=60, "default/90s/leaky_bucket";q=1;w=90, "default/1s/fixed";q=5;w=1` {
		t.Errorf("RateLimit-Policy = %q", got)
	}
}

// checkHeadersMatch checks that the RateLimit headers and Retry-After of a
// /v1/check answer, for the policy or namespace pol, carry the answer's
// numbers.
func checkHeadersMatch(t *testing.T, h http.Header, pol string, a checkAnswer) {
	t.Helper()
	ceilS := func(ms float64) int64 { return int64(math.Ceil(ms / 1000)) }
	var policy, rl []string
	for _, l := range a.Limits {
		win, err := time.ParseDuration(l.Window)
		if err != nil {
			t.Fatal(err)
		}
		name, q, w := `"`+pol+"/"+l.Window, l.Limit, max(1, ceilS(float64(win.Milliseconds())))
		if l.Type != "sliding" {
			name += "/" + l.Type
		}
		if l.Burst != nil {
			q, w = *l.Burst, max(1, ceilS(*l.Burst*float64(win.Milliseconds())/l.Limit))
		}
		policy = append(policy, fmt.Sprintf(`%s";q=%d;w=%d`, name, int64(q), w))
		rl = append(rl, fmt.Sprintf(`%s";r=%d;t=%d`, name, int64(l.Remaining), ceilS(float64(l.ResetMS))))
	}
	if got, want := h.Get("RateLimit-Policy"), strings.Join(policy, ", "); got != want {
		t.Errorf("RateLimit-Policy = %q, want %q", got, want)
	}
	if got, want := h.Get("RateLimit"), strings.Join(rl, ", "); got != want {
		t.Errorf("RateLimit = %q, want %q", got, want)
	}
	if !a.Allowed {
		if got, want := h.Get("Retry-After"), strconv.FormatInt(max(1, ceilS(float64(a.RetryAfterMS))), 10); got != want {
			t.Errorf("Retry-After = %q, want %q (retry_after_ms %d)", got, want, a.RetryAfterMS)
		}
	}
}

const keyedYAML = `
namespaces:
  - name: default
  - name: sync
    strategy: memory
    sync_rate: 0
    window_sizes: [1s, 1m]
policies:
  - name: feed
    namespace: sync
    limits: [{limit: 2, window: 1m, type: sliding_log}]
`

// checkStep is one /v1/check request of a sequence on a clock: what it
// answers, and its headers (checkHeadersMatch).
type checkStep struct {
	name       string
	advance    time.Duration // the clock moves first
	body       string
	wantStatus int
	wantRemain float64
	wantReset  int64 // ms
	wantRetry  int64 // ms; 0: allowed
}

// runSteps runs steps on n, whose clock is clk, in order.
func runSteps(t *testing.T, n *Node, clk *testClock, steps []checkStep) {
	t.Helper()
	for _, tt := range steps {
		clk.Advance(tt.advance)
		w := do(n.api, "POST", "/v1/check", tt.body)
		if w.Code != tt.wantStatus {
			t.Fatalf("%s: status %d, want %d; body %s", tt.name, w.Code, tt.wantStatus, w.Body)
		}
		a := decodeAnswer(t, w)
		if l := a.Limits[0]; l.Remaining != tt.wantRemain || l.ResetMS != tt.wantReset || a.RetryAfterMS != tt.wantRetry {
			t.Errorf("%s: remaining %v, reset_ms %d, retry_after_ms %d; want %v, %d, %d", tt.name, l.Remaining, l.ResetMS, a.RetryAfterMS, tt.wantRemain, tt.wantReset, tt.wantRetry)
		}
		pol := "default"
		if p := strings.Split(tt.body, `"`); p[1] == "policy" || p[1] == "namespace" {
			pol = p[3]
		}
		checkHeadersMatch(t, w.Header(), pol, a)
	}
}

// Anchored windows, sliding logs and precision limits through /v1/check
// answer as the library decides, locally and in a synchronous store, to
// the millisecond: the headers carry the same numbers.
func TestCheckAnchoredSlidingLogAndPrecision(t *testing.T) {
	clk := newTestClock(time.Date(2030, 1, 1, 0, 0, 40, 0, time.UTC))
	n := newTestNode(t, keyedYAML, nil, clk.option())
	anchored := `{"key":"a","limits":[{"limit":3,"window":"1m","type":"anchored"}]}`
	feed := `{"policy":"feed","key":"l"}`
	precise := func(cost int) string {
		return fmt.Sprintf(`{"namespace":"sync","key":"s","cost":%d,"limits":[{"limit":10,"window":"3s","precision":"1s"}]}`, cost)
	}
	runSteps(t, n, clk, []checkStep{
		{"anchored: the first hit opens the window", 0, anchored, 200, 2, 60_000, 0},
		{"anchored: 10s in", 10 * time.Second, anchored, 200, 1, 50_000, 0},
		{"anchored: the third", 0, anchored, 200, 0, 50_000, 0},
		{"anchored: the fourth waits for the window's end", 0, anchored, 429, 0, 50_000, 50_000},
		{"anchored: 1ms before it", 49_999 * time.Millisecond, anchored, 429, 0, 1, 1},
		{"anchored: a new window", time.Millisecond, anchored, 200, 2, 60_000, 0},
		{"sliding log: the first hit weighs a minute", 0, feed, 200, 1, 60_000, 0},
		{"sliding log: 20s later", 20 * time.Second, feed, 200, 0, 60_000, 0},
		{"sliding log: the third waits for the first to stop weighing", 0, feed, 429, 0, 60_000, 40_000},
		{"sliding log: 1ms before", 39_999 * time.Millisecond, feed, 429, 0, 20_001, 1},
		{"sliding log: then it passes", time.Millisecond, feed, 200, 0, 60_000, 0},
		// Sub-windows of 1s, oldest first: 4, 2, 1, then the current one.
		{"precision: 4", 0, precise(4), 200, 6, 4000, 0},
		{"precision: 2", time.Second, precise(2), 200, 4, 4000, 0},
		{"precision: 1", time.Second, precise(1), 200, 3, 4000, 0},
		{"precision: 1 more, the 4 weighs whole", time.Second, precise(1), 200, 2, 4000, 0},
		// 249 ms in: 1 + 1 + 2 + 4 × 0.751 = 7.004, and 3 more do not fit until 1 ms later.
		{"precision: 3 do not fit", 249 * time.Millisecond, precise(3), 429, 2, 3751, 1},
		{"precision: 1 ms later they do", time.Millisecond, precise(3), 200, 0, 3750, 0},
	})
	w := do(n.api, "POST", "/v1/check", precise(0))
	if a := decodeAnswer(t, w); a.Limits[0].Type != "sliding" || a.Limits[0].Precision == nil || *a.Limits[0].Precision != "1s" {
		t.Errorf("a precision limit's answer: %s", w.Body)
	}
	w = do(n.api, "POST", "/v1/check", `{"key":"x","limits":[{"limit":5,"window":"1m","type":"sliding_log"},{"limit":5,"window":"1m","type":"anchored"},{"limit":5,"window":"1m","precision":"1m"}]}`)
	a := decodeAnswer(t, w)
	if w.Code != 200 || a.Limits[0].Type != "sliding_log" || a.Limits[1].Type != "anchored" || a.Limits[2].Precision == nil || a.Limits[0].Precision != nil {
		t.Errorf("status %d, answer %s", w.Code, w.Body)
	}
	if got := w.Header().Get("RateLimit-Policy"); got != `"default/1m/sliding_log";q=5;w=60, "default/1m/anchored";q=5;w=60, "default/1m";q=5;w=60` {
		t.Errorf("RateLimit-Policy = %q", got)
	}
}
