package node

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/node/config"
	"github.com/ratesync/ratesync/ratelimiting"
)

// FuzzDecodeCheck feeds arbitrary bodies to the /v1/check decoder and
// handler. The decoder must never panic, must answer every bad body with a
// 4xx problem naming a field or the body, must give the same answer with a
// pooled state as with a fresh one, and what it accepts must be valid, with
// every field spelled exactly and given once. The key check must find in
// any JSON object the field encoding/json's tokenizer finds (keysOracle).
// The handler must never answer 5xx. Seeds: testdata/fuzz/FuzzDecodeCheck.
//
//	go test -run=^$ -fuzz=FuzzDecodeCheck -fuzztime=60s ./internal/node
func FuzzDecodeCheck(f *testing.F) {
	f.Add([]byte(`{"namespace":"default","key":"user:42","cost":1,"limits":[{"limit":100,"window":"1m"},{"limit":10,"window":"1s","type":"fixed"}]}`))
	f.Add([]byte(`{"policy":"api","key":"user:42"}`))
	f.Add([]byte(`{"key":"user:42","limits":[{"limit":10,"window":"1m","type":"token_bucket","burst":20}]}`))
	f.Add([]byte(`{"key":"user:42","limits":[{"limit":1000,"window":"1h","precision":"1m"},{"limit":3,"window":"15m","type":"anchored"},{"limit":5,"window":"1m","type":"sliding_log"}]}`))
	f.Add([]byte(`{"key":"a","limits":[{"limit":1,"window":"1s","window":"1m"}],"key":"b"}`))
	f.Add([]byte(`{"KEY":"a","limits":[{"Limit":1,"window":"1s"}]}`))
	f.Add([]byte(`{"k\u0065y":"a","key":"b","limits":[{"limit":1,"window":"1s"}]}`))
	n := newTestNode(f, `
policies:
  - name: api
    limits: [{limit: 5, window: 1s}]
`, nil)
	pooled := &checkState{}
	f.Fuzz(func(t *testing.T, data []byte) {
		oracle, isObject := keysOracle(data, checkSchema)
		if isObject {
			kp, ok := checkKeys(data, checkSchema)
			got := ""
			if kp != nil {
				got = kp.Field
			}
			if !ok || got != oracle {
				t.Fatalf("checkKeys(%q) = %q, %v; the tokenizer finds %q", data, got, ok, oracle)
			}
		}
		fresh := &checkState{}
		p := decodeCheck(data, fresh, config.DefaultMaxKeyBytes)
		if p2 := decodeCheck(data, pooled, config.DefaultMaxKeyBytes); !reflect.DeepEqual(p, p2) ||
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
			if !isObject || oracle != "" {
				t.Fatalf("accepted %q: object %v, misspelled or repeated field %q", data, isObject, oracle)
			}
			in := fresh.in
			if in.key == "" || len(in.key) > config.DefaultMaxKeyBytes {
				t.Fatalf("accepted key %q", in.key)
			}
			if !math.IsNaN(in.cost) && (in.cost < 0 || in.cost > config.MaxNumber) {
				t.Fatalf("accepted cost %v", in.cost)
			}
			if in.policy == "" {
				if len(in.limits) == 0 || len(in.limits) > config.MaxLimits {
					t.Fatalf("accepted %d limits", len(in.limits))
				}
				for _, l := range in.limits {
					if !(l.Limit > 0) || l.Limit > config.MaxNumber || l.Window <= 0 || l.Window%time.Millisecond != 0 {
						t.Fatalf("accepted limit %+v", l)
					}
					bucket := l.Algorithm == ratelimiting.TokenBucket || l.Algorithm == ratelimiting.LeakyBucket
					if l.Algorithm > ratelimiting.LeakyBucket || l.Fixed || !(l.Burst >= 0) || l.Burst > config.MaxNumber || (l.Burst != 0 && !bucket) ||
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
		if p != nil && w.Code != p.Status && len(data) <= config.DefaultMaxBodyBytes {
			t.Fatalf("decoder rejected %q with %d but the handler answered %d", data, p.Status, w.Code)
		}
	})
}

// keysOracle walks data, when it is one valid JSON object, with
// encoding/json's tokenizer against schema, and returns the path of its
// first field (in body order) not spelled exactly as a field of schema or
// given twice, as checkKeys names it; "" when there is none. isObject is
// false when data is not one valid JSON object.
func keysOracle(data []byte, schema []jsonField) (field string, isObject bool) {
	if !json.Valid(data) || !bytes.HasPrefix(bytes.TrimLeft(data, " \t\r\n"), []byte("{")) {
		return "", false
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	var object func(path string, schema []jsonField) string
	var value func(path string, f *jsonField) string
	skip := func(tok json.Token) {
		if d, ok := tok.(json.Delim); ok && (d == '{' || d == '[') {
			for depth := 1; depth > 0; {
				tok, _ := dec.Token()
				switch tok {
				case json.Delim('{'), json.Delim('['):
					depth++
				case json.Delim('}'), json.Delim(']'):
					depth--
				}
			}
		}
	}
	object = func(path string, schema []jsonField) string { // after '{'
		seen := map[int]bool{}
		for dec.More() {
			tok, _ := dec.Token()
			key := tok.(string)
			j := slices.IndexFunc(schema, func(f jsonField) bool { return f.name == key || f.alt != "" && f.alt == key })
			if j < 0 {
				return joinJSON(path, key)
			}
			if seen[j] {
				return joinJSON(path, schema[j].name)
			}
			seen[j] = true
			if bad := value(path, &schema[j]); bad != "" {
				return bad
			}
		}
		_, _ = dec.Token() // }
		return ""
	}
	value = func(path string, f *jsonField) string {
		tok, _ := dec.Token()
		switch {
		case f.kind == kArray && f.elem != nil && tok == json.Delim('['):
			for i := 0; dec.More(); i++ {
				tok, _ := dec.Token()
				if tok == json.Delim('{') {
					if bad := object(fmt.Sprintf("%s[%d]", joinJSON(path, f.name), i), f.elem); bad != "" {
						return bad
					}
				} else {
					skip(tok)
				}
			}
			_, _ = dec.Token() // ]
		case f.kind == kObject && f.elem != nil && tok == json.Delim('{'):
			return object(joinJSON(path, f.name), f.elem)
		default:
			skip(tok)
		}
		return ""
	}
	_, _ = dec.Token() // {
	return object("", schema), true
}

// FuzzFastCheck holds fastCheck to decodeStrict: every body fastCheck
// takes, decodeStrict takes too, into the same checkBody, bit for bit; a
// pooled state (whose intern table is warm) decodes like a fresh one.
// Seeds: the bodies below.
//
//	go test -run=^$ -fuzz=FuzzFastCheck -fuzztime=60s ./internal/node
func FuzzFastCheck(f *testing.F) {
	for _, s := range []string{
		`{"namespace":"default","key":"user:42","cost":1,"limits":[{"limit":100,"window":"1m"},{"limit":10,"window":"1s","type":"fixed"}]}`,
		`{"policy":"api","key":"user:42","cost":0.5}`,
		`{"key":"user:42","limits":[{"limit":10,"window":"1m","type":"token_bucket","burst":20}]}`,
		`{"key":"user:42","penalty":true,"limits":[{"limit":1000,"window":"1h","precision":"1m"},{"limit":3e2,"window":"15m","type":"anchored"}]}`,
		` { "key" : "ключ" , "cost" : -0 , "limits" : [ ] } `,
		`{"key":"a","cost":123456789012345,"limits":[{"limit":1234567890123456789,"window":"1s"}]}`,
		`{"key":"a","cost":1e400}`,
		`{"key":"a","limits":[{"limit":1,"window":"1s","burst":null}]}`,
		`{"key":"a\u0062","limits":[{"limit":1.5E-3,"window":"1s"}]} `,
		`{"key":"a","key":"b"}`,
		`{"Key":"a"}`,
		`{}`,
		`{"key":"a"}x`,
	} {
		f.Add([]byte(s))
	}
	pooled := &checkState{}
	f.Fuzz(func(t *testing.T, data []byte) {
		fast := &checkState{body: checkBody{Cost: math.NaN()}}
		if !fastCheck(data, fast) {
			return
		}
		slow := &checkState{body: checkBody{Cost: math.NaN()}}
		if p := decodeStrict(data, nil, &slow.body, checkSchema); p != nil {
			t.Fatalf("fastCheck takes %q, decodeStrict refuses it: %s", data, p.Detail)
		}
		if !sameBody(fast.body, slow.body) {
			t.Fatalf("%q: fastCheck %+v, decodeStrict %+v", data, fast.body, slow.body)
		}
		pooled.body = checkBody{Cost: math.NaN(), Limits: pooled.body.Limits[:0]}
		if !fastCheck(data, pooled) || !sameBody(pooled.body, fast.body) {
			t.Fatalf("%q: a pooled state decodes %+v, a fresh one %+v", data, pooled.body, fast.body)
		}
	})
}

// sameBody compares decoded bodies, numbers bit for bit (NaN is the cost
// left out; -0 is not 0), an empty list of limits like none.
func sameBody(a, b checkBody) bool {
	if a.Namespace != b.Namespace || a.Policy != b.Policy || a.Key != b.Key || a.Penalty != b.Penalty ||
		math.Float64bits(a.Cost) != math.Float64bits(b.Cost) || len(a.Limits) != len(b.Limits) {
		return false
	}
	for i := range a.Limits {
		x, y := a.Limits[i], b.Limits[i]
		if math.Float64bits(x.Limit) != math.Float64bits(y.Limit) || x.Window != y.Window || x.Type != y.Type ||
			x.Precision != y.Precision || x.Burst.set != y.Burst.set || math.Float64bits(x.Burst.v) != math.Float64bits(y.Burst.v) {
			return false
		}
	}
	return true
}
