package main

import (
	"encoding/json"
	"math"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/ratesync/ratesync/ratelimiting"
)

// FuzzDecodeCheck feeds arbitrary bodies to the /v1/check decoder and
// handler. The decoder must never panic, must answer every bad body with a
// 4xx problem naming a field or the body, must give the same answer with a
// pooled state as with a fresh one, and what it accepts must be valid. The
// handler must never answer 5xx. Seeds: testdata/fuzz/FuzzDecodeCheck.
//
//	go test -run=^$ -fuzz=FuzzDecodeCheck -fuzztime=60s ./cmd/node
func FuzzDecodeCheck(f *testing.F) {
	f.Add([]byte(`{"namespace":"default","key":"user:42","cost":1,"limits":[{"limit":100,"window":"1m"},{"limit":10,"window":"1s","type":"fixed"}]}`))
	f.Add([]byte(`{"policy":"api","key":"user:42"}`))
	f.Add([]byte(`{"key":"user:42","limits":[{"limit":10,"window":"1m","type":"token_bucket","burst":20}]}`))
	f.Add([]byte(`{"key":"user:42","limits":[{"limit":1000,"window":"1h","precision":"1m"},{"limit":3,"window":"15m","type":"anchored"},{"limit":5,"window":"1m","type":"sliding_log"}]}`))
	n := newTestNode(f, `
policies:
  - name: api
    limits: [{limit: 5, window: 1s}]
`, nil)
	pooled := &checkState{}
	f.Fuzz(func(t *testing.T, data []byte) {
		fresh := &checkState{}
		p := decodeCheck(data, fresh, DefaultMaxKeyBytes)
		if p2 := decodeCheck(data, pooled, DefaultMaxKeyBytes); !reflect.DeepEqual(p, p2) ||
			(p == nil && !reflect.DeepEqual(fresh.in.limits, pooled.in.limits) && len(fresh.in.limits)+len(pooled.in.limits) > 0) {
			t.Fatalf("pooled state answers differently: %+v / %+v; limits %v / %v", p, p2, fresh.in.limits, pooled.in.limits)
		}
		if p != nil {
			if p.Status < 400 || p.Status > 499 || p.Field == "" || p.Detail == "" || p.Type == "" {
				t.Fatalf("problem %+v", p)
			}
			if _, err := json.Marshal(p); err != nil {
				t.Fatal(err)
			}
		} else {
			in := fresh.in
			if in.key == "" || len(in.key) > DefaultMaxKeyBytes {
				t.Fatalf("accepted key %q", in.key)
			}
			if !math.IsNaN(in.cost) && (in.cost < 0 || in.cost > maxNumber) {
				t.Fatalf("accepted cost %v", in.cost)
			}
			if in.policy == "" {
				if len(in.limits) == 0 || len(in.limits) > MaxLimits {
					t.Fatalf("accepted %d limits", len(in.limits))
				}
				for _, l := range in.limits {
					if !(l.Limit > 0) || l.Limit > maxNumber || l.Window <= 0 || l.Window%time.Millisecond != 0 {
						t.Fatalf("accepted limit %+v", l)
					}
					bucket := l.Algorithm == ratelimiting.TokenBucket || l.Algorithm == ratelimiting.LeakyBucket
					if l.Algorithm > ratelimiting.LeakyBucket || l.Fixed || !(l.Burst >= 0) || l.Burst > maxNumber || (l.Burst != 0 && !bucket) ||
						l.Precision < 0 || l.Precision%time.Millisecond != 0 || (l.Precision != 0 && l.Algorithm != ratelimiting.SlidingWindow) {
						t.Fatalf("accepted limit %+v", l)
					}
				}
			}
		}
		w := do(n.api, "POST", "/v1/check", string(data))
		switch w.Code {
		case http.StatusOK, http.StatusTooManyRequests, http.StatusBadRequest, http.StatusNotFound, http.StatusRequestEntityTooLarge:
		default:
			t.Fatalf("status %d for %q: %s", w.Code, data, w.Body)
		}
		if p != nil && w.Code != p.Status && len(data) <= DefaultMaxBodyBytes {
			t.Fatalf("decoder rejected %q with %d but the handler answered %d", data, p.Status, w.Code)
		}
	})
}
