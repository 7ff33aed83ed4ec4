package node

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	jsonv2 "github.com/go-json-experiment/json"

	"github.com/ratesync/ratesync/internal/node/config"
)

// benchBodies are /v1/check bodies over 1024 keys, with limits too high
// to deny: the benchmark measures the allowed path.
func benchBodies() [][]byte {
	bodies := make([][]byte, 1024)
	for i := range bodies {
		bodies[i] = fmt.Appendf(nil, `{"namespace":"default","key":"user:%d","cost":1,"limits":[{"limit":1e12,"window":"1m"},{"limit":1e12,"window":"1s","type":"fixed"}]}`, i)
	}
	return bodies
}

// floorHandler is the floor: a plain net/http handler that decodes the
// same JSON and answers 200 with a small JSON body, the least any JSON
// endpoint does.
var floorHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Namespace string  `json:"namespace"`
		Key       string  `json:"key"`
		Cost      float64 `json:"cost"`
		Limits    []struct {
			Limit  float64 `json:"limit"`
			Window string  `json:"window"`
			Type   string  `json:"type"`
		} `json:"limits"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	w.Header()["Content-Type"] = jsonContentType
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(floorAnswer)
})

var floorAnswer = []byte(`{"allowed":true}` + "\n")

func serveN(b *testing.B, h http.Handler, bodies [][]byte, n int) {
	for i := range n {
		r := httptest.NewRequest("POST", "/v1/check", bytes.NewReader(bodies[i%len(bodies)]))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
}

// benchChunk is how many requests each side serves before the other takes
// over: alternating in small chunks spreads the noise of a shared machine
// (other processes, GC of the other side's garbage) over both sides.
const benchChunk = 256

// BenchmarkCheckVsFloor runs /v1/check through the node's handler and the
// floor handler on the same bodies in the same run, alternating in chunks,
// and reports the check's requests/s as a percentage of the floor's
// (%floor; the target is at least 70). ns/op is the check's.
//
//	go test -run=^$ -bench=CheckVsFloor -benchtime=200000x ./internal/node
func BenchmarkCheckVsFloor(b *testing.B) {
	n := newTestNode(b, "", nil)
	bodies := benchBodies()
	serveN(b, n.api, bodies, len(bodies)) // warm: counters exist, pools filled
	serveN(b, floorHandler, bodies, len(bodies))
	b.ReportAllocs()
	b.ResetTimer()
	var floor, check time.Duration
	for done := 0; done < b.N; done += benchChunk {
		c := min(benchChunk, b.N-done)
		t0 := time.Now()
		serveN(b, floorHandler, bodies, c)
		t1 := time.Now()
		serveN(b, n.api, bodies, c)
		floor, check = floor+t1.Sub(t0), check+time.Since(t1)
	}
	report(b, floor, check)
}

func report(b *testing.B, floor, check time.Duration) {
	b.ReportMetric(float64(check.Nanoseconds())/float64(b.N), "ns/op")
	b.ReportMetric(float64(floor.Nanoseconds())/float64(b.N), "floor-ns/op")
	b.ReportMetric(100*floor.Seconds()/check.Seconds(), "%floor")
}

// BenchmarkCheckVsFloorParallel is BenchmarkCheckVsFloor with concurrent
// requests (GOMAXPROCS goroutines), as a server sees them.
func BenchmarkCheckVsFloorParallel(b *testing.B) {
	n := newTestNode(b, "", nil)
	bodies := benchBodies()
	serveN(b, n.api, bodies, len(bodies))
	b.ReportAllocs()
	b.ResetTimer()
	var floor, check, floorN, checkN atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for {
			for _, side := range []struct {
				h        http.Handler
				sum, cnt *atomic.Int64
			}{{floorHandler, &floor, &floorN}, {n.api, &check, &checkN}} {
				t0 := time.Now()
				for range benchChunk / 8 {
					if !pb.Next() {
						side.sum.Add(int64(time.Since(t0)))
						return
					}
					side.cnt.Add(1)
					r := httptest.NewRequest("POST", "/v1/check", bytes.NewReader(bodies[i%len(bodies)]))
					w := httptest.NewRecorder()
					side.h.ServeHTTP(w, r)
					if w.Code != http.StatusOK {
						b.Errorf("status %d", w.Code)
						return
					}
					i++
				}
				side.sum.Add(int64(time.Since(t0)))
			}
		}
	})
	// Each side served about half of b.N: compare the time per request.
	perReq := func(sum, cnt *atomic.Int64) float64 { return float64(sum.Load()) / float64(max(cnt.Load(), 1)) }
	f, c := perReq(&floor, &floorN), perReq(&check, &checkN)
	b.ReportMetric(c, "ns/op")
	b.ReportMetric(f, "floor-ns/op")
	b.ReportMetric(100*f/c, "%floor")
}

// BenchmarkCheckVsFloorLoopback serves both handlers over real HTTP on
// loopback, with one keep-alive client, alternating in chunks: what a
// client of the node sees (BENCHMARKS.md section 12 measures the node
// and the floor each in a process of its own under HTTP load).
func BenchmarkCheckVsFloorLoopback(b *testing.B) {
	n := newTestNode(b, "", nil)
	bodies := benchBodies()
	floorSrv, checkSrv := httptest.NewServer(floorHandler), httptest.NewServer(n.api)
	b.Cleanup(floorSrv.Close)
	b.Cleanup(checkSrv.Close)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}, Timeout: 10 * time.Second}
	b.Cleanup(client.CloseIdleConnections)
	i := 0
	post := func(url string, c int) {
		for range c {
			resp, err := client.Post(url, "application/json", bytes.NewReader(bodies[i%len(bodies)]))
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("status %d", resp.StatusCode)
			}
			i++
		}
	}
	post(checkSrv.URL+"/v1/check", len(bodies))
	post(floorSrv.URL, len(bodies))
	b.ReportAllocs()
	b.ResetTimer()
	var floor, check time.Duration
	for done := 0; done < b.N; done += benchChunk {
		c := min(benchChunk, b.N-done)
		t0 := time.Now()
		post(floorSrv.URL, c)
		t1 := time.Now()
		post(checkSrv.URL+"/v1/check", c)
		floor, check = floor+t1.Sub(t0), check+time.Since(t1)
	}
	report(b, floor, check)
}

// BenchmarkDecodeCheck is the decoder alone.
func BenchmarkDecodeCheck(b *testing.B) {
	bodies := benchBodies()
	st := &checkState{}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if p := decodeCheck(bodies[i%len(bodies)], st, config.DefaultMaxKeyBytes); p != nil {
			b.Fatal(p.Detail)
		}
		i++
	}
}

// BenchmarkCheckKeys is the key check of decodeStrict alone (no field
// twice, none misspelled), on the bodies of BenchmarkDecodeCheck.
func BenchmarkCheckKeys(b *testing.B) {
	bodies := benchBodies()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if p, ok := checkKeys(bodies[i%len(bodies)], checkSchema); p != nil || !ok {
			b.Fatal(p, ok)
		}
		i++
	}
}

// BenchmarkCheckJSONDecoders runs /v1/check through the node's handler
// with its own body decoder (fastCheck, else encoding/json and checkKeys)
// and with go-json-experiment/json (the basis of encoding/json/v2, which
// refuses duplicate and case-mismatched names itself), alternating in
// chunks on the same bodies in the same run. ns/op is the node's own;
// v2-ns/op the other's; %v2 the other's requests/s as a percentage of the
// node's own.
//
//	go test -run=^$ -bench=CheckJSONDecoders -benchtime=200000x -count=6 ./internal/node
func BenchmarkCheckJSONDecoders(b *testing.B) {
	n := newTestNode(b, "", nil)
	bodies := benchBodies()
	b.Cleanup(func() { checkBodyDecoder = decodeCheckBody })
	for _, dec := range []func([]byte, *checkState) *problem{decodeCheckBody, decodeCheckBodyV2} {
		checkBodyDecoder = dec
		serveN(b, n.api, bodies, len(bodies)) // warm: counters exist, pools filled
	}
	b.ReportAllocs()
	b.ResetTimer()
	var ours, v2 time.Duration
	for done := 0; done < b.N; done += benchChunk {
		c := min(benchChunk, b.N-done)
		checkBodyDecoder = decodeCheckBody
		t0 := time.Now()
		serveN(b, n.api, bodies, c)
		t1 := time.Now()
		checkBodyDecoder = decodeCheckBodyV2
		serveN(b, n.api, bodies, c)
		ours, v2 = ours+t1.Sub(t0), v2+time.Since(t1)
	}
	b.ReportMetric(float64(ours.Nanoseconds())/float64(b.N), "ns/op")
	b.ReportMetric(float64(v2.Nanoseconds())/float64(b.N), "v2-ns/op")
	b.ReportMetric(100*ours.Seconds()/v2.Seconds(), "%v2")
}

// BenchmarkCheckJSONDecodersLoopback is BenchmarkCheckJSONDecoders over
// real HTTP on loopback, with one keep-alive client: the decoder's share of
// what a client of the node sees.
//
//	go test -run=^$ -bench=CheckJSONDecodersLoopback -benchtime=50000x -count=6 ./internal/node
func BenchmarkCheckJSONDecodersLoopback(b *testing.B) {
	n := newTestNode(b, "", nil)
	bodies := benchBodies()
	srv := httptest.NewServer(n.api)
	b.Cleanup(srv.Close)
	b.Cleanup(func() { checkBodyDecoder = decodeCheckBody })
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}, Timeout: 10 * time.Second}
	b.Cleanup(client.CloseIdleConnections)
	i := 0
	post := func(c int) {
		for range c {
			resp, err := client.Post(srv.URL+"/v1/check", "application/json", bytes.NewReader(bodies[i%len(bodies)]))
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("status %d", resp.StatusCode)
			}
			i++
		}
	}
	for _, dec := range []func([]byte, *checkState) *problem{decodeCheckBody, decodeCheckBodyV2} {
		checkBodyDecoder = dec
		post(len(bodies))
	}
	b.ReportAllocs()
	b.ResetTimer()
	var ours, v2 time.Duration
	for done := 0; done < b.N; done += benchChunk {
		c := min(benchChunk, b.N-done)
		checkBodyDecoder = decodeCheckBody
		t0 := time.Now()
		post(c)
		t1 := time.Now()
		checkBodyDecoder = decodeCheckBodyV2
		post(c)
		ours, v2 = ours+t1.Sub(t0), v2+time.Since(t1)
	}
	b.ReportMetric(float64(ours.Nanoseconds())/float64(b.N), "ns/op")
	b.ReportMetric(float64(v2.Nanoseconds())/float64(b.N), "v2-ns/op")
	b.ReportMetric(100*ours.Seconds()/v2.Seconds(), "%v2")
}

// BenchmarkDecodeCheckBody is each body decoder alone, on the bodies of
// BenchmarkCheckJSONDecoders.
func BenchmarkDecodeCheckBody(b *testing.B) {
	for _, bc := range []struct {
		name string
		dec  func([]byte, *checkState) *problem
	}{{"ours", decodeCheckBody}, {"jsonv2", decodeCheckBodyV2}} {
		b.Run(bc.name, func(b *testing.B) {
			bodies := benchBodies()
			st := checkPool.Get().(*checkState)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if p := bc.dec(bodies[i%len(bodies)], st); p != nil {
					b.Fatal(p.Detail)
				}
				i++
			}
		})
	}
}

// jsonv2Options are go-json-experiment/json's options for a body: unknown
// names refused; names given twice, and names in another case, it refuses
// by default.
var jsonv2Options = jsonv2.RejectUnknownMembers(true)

// decodeCheckBodyV2 is decodeCheckBody with go-json-experiment/json.
func decodeCheckBodyV2(data []byte, st *checkState) *problem {
	b := &st.body
	lims := b.Limits[:cap(b.Limits)]
	clear(lims)
	*b = checkBody{Cost: math.NaN(), Limits: lims[:0]}
	if err := jsonv2.Unmarshal(data, b, jsonv2Options); err != nil {
		return invalid("body", err.Error())
	}
	return nil
}

// The two decoders agree on the benchmark's bodies, and go-json-experiment
// refuses what decodeStrict refuses besides unknown fields.
func TestJSONv2DecoderAgrees(t *testing.T) {
	var a, c checkState
	for _, body := range append(benchBodies()[:4],
		[]byte(`{"key":"k","limits":[{"limit":1,"window":"1s","burst":null,"type":"token_bucket"}]}`),
		[]byte(`{"policy":"p","key":"k","penalty":true}`)) {
		if p := decodeCheckBody(body, &a); p != nil {
			t.Fatalf("%s: %s", body, p.Detail)
		}
		if p := decodeCheckBodyV2(body, &c); p != nil {
			t.Fatalf("%s: v2: %s", body, p.Detail)
		}
		if !sameBody(a.body, c.body) {
			t.Errorf("%s: ours %+v, v2 %+v", body, a.body, c.body)
		}
	}
	for _, body := range []string{
		`{"key":"k","key":"j","limits":[{"limit":1,"window":"1s"}]}`,
		`{"Key":"k","limits":[{"limit":1,"window":"1s"}]}`,
		`{"key":"k","limits":[{"limit":1,"window":"1s","Window":"1m"}]}`,
	} {
		if decodeCheckBodyV2([]byte(body), &c) == nil {
			t.Errorf("%s: v2 took it", body)
		}
		if decodeCheckBody([]byte(body), &a) == nil {
			t.Errorf("%s: ours took it", body)
		}
	}
}
