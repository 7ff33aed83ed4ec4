package httpload

import (
	"bufio"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// server answers /s/{key} by key: 0 200 with a Content-Length body, 1
// 429 with a chunked body and a trailer, 2 204, 3 200 with a chunked body
// larger than the driver's buffer, 4 200 and Connection: close. It
// records the keys and bodies it was sent.
type server struct {
	*httptest.Server
	mu     sync.Mutex
	keys   map[string]int
	bodies map[string]int
}

func newServer(t *testing.T) *server {
	t.Helper()
	s := &server{keys: map[string]int{}, bodies: map[string]int{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		key := strings.TrimPrefix(r.URL.Path, "/s/")
		s.mu.Lock()
		s.keys[key]++
		s.bodies[string(body)]++
		s.mu.Unlock()
		switch key {
		case "0":
			w.Header().Set("Content-Length", "5")
			_, _ = io.WriteString(w, "hello")
		case "1":
			w.Header().Set("Trailer", "X-Sum")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = io.WriteString(w, "slow down")
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, " please")
			w.Header().Set("X-Sum", "1")
		case "2":
			w.WriteHeader(http.StatusNoContent)
		case "3":
			chunk := strings.Repeat("x", 7000)
			for range 10 {
				_, _ = io.WriteString(w, chunk)
				w.(http.Flusher).Flush()
			}
		case "4":
			w.Header().Set("Connection", "close")
			_, _ = io.WriteString(w, "bye")
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) target() string { return strings.TrimPrefix(s.URL, "http://") }

func (s *server) reset() {
	s.mu.Lock()
	clear(s.keys)
	clear(s.bodies)
	s.mu.Unlock()
}

func run(t *testing.T, cfg Config) (Result, *Driver) {
	t.Helper()
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	res, err := d.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return res, d
}

func TestRunCountsStatuses(t *testing.T) {
	s := newServer(t)
	// One connection walking the keys in turn: each key gets exactly
	// Requests/Keys requests, whatever the framing of its answers.
	res, _ := run(t, Config{Target: s.target(), Path: "/s/{key}", Keys: 5, Order: RoundRobin, Conns: 1, Requests: 500,
		Body: `{"key":"user:{key}"}`, Header: http.Header{"Content-Type": {"application/json"}}})
	want := map[int]int64{200: 300, 429: 100, 204: 100}
	if res.Errors != 0 || res.Requests != 500 {
		t.Fatalf("%s: want 500 requests, no errors", res)
	}
	for code, n := range want {
		if res.Status[code] != n {
			t.Errorf("status %d: %d answers, want %d (%s)", code, res.Status[code], n, res)
		}
	}
	if len(res.Status) != len(want) {
		t.Errorf("statuses %v, want %v", res.Status, want)
	}
	// Key 4's answers close the connection, the last request's among
	// them: 99 dials more than the first.
	if res.Dials != 100 {
		t.Errorf("%d dials, want 100: one, and one after each Connection: close but the last", res.Dials)
	}
	for i := range 5 {
		if n := s.bodies[`{"key":"user:`+strconv.Itoa(i)+`"}`]; n != 100 {
			t.Errorf("body of key %d sent %d times, want 100", i, n)
		}
	}
	if res.P50 <= 0 || res.P99 < res.P90 || res.P90 < res.P50 || res.Elapsed <= 0 || res.PerSecond() <= 0 {
		t.Errorf("%s: want latencies in order, a positive rate", res)
	}
}

func TestRunManyConnections(t *testing.T) {
	s := newServer(t)
	for _, order := range []Order{Uniform, RoundRobin} {
		t.Run(order.String(), func(t *testing.T) {
			s.reset()
			res, d := run(t, Config{Target: s.target(), Path: "/s/{key}", Keys: 4, Order: order, Conns: 8, Requests: 2000, Seed: 7})
			if res.Requests != 2000 || res.Errors != 0 || res.Status[200]+res.Status[429]+res.Status[204] != 2000 {
				t.Fatalf("%s: want 2,000 answers of keys 0 to 3, no errors", res)
			}
			if res.Dials != int64(d.Config().Conns) {
				t.Errorf("%d dials, want one a connection (%d)", res.Dials, d.Config().Conns)
			}
			for k := range 4 {
				if n := s.keys[strconv.Itoa(k)]; n < 300 {
					t.Errorf("key %d asked %d times of 2,000, want about 500", k, n)
				}
			}
		})
	}
}

func TestRunAgainAfterServerClosedIdleConnections(t *testing.T) {
	s := newServer(t)
	d, err := New(Config{Target: s.target(), Path: "/s/0", Conns: 4, Requests: 100})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	if res, err := d.Warm(context.Background(), 20*time.Millisecond); err != nil || res.Errors != 0 || res.Dials != 4 {
		t.Fatalf("warm-up: %s, %v: want no errors, 4 dials", res, err)
	}
	s.CloseClientConnections()
	res, err := d.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors != 0 || res.Status[200] != 100 || res.Dials != 4 {
		t.Errorf("%s: want 100 answers on 4 new connections, no errors", res)
	}
}

func TestRunFailures(t *testing.T) {
	tests := []struct {
		name   string
		answer string // what the server writes to each connection, then it closes it; "" writes nothing and keeps it
		want   string // a word of the error; "|" separates alternatives
	}{
		{"garbage", "garbage\r\n\r\n", "malformed status line"},
		{"closed at once", "\x00close", "EOF|connection reset"},
		{"truncated body", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", "EOF"},
		{"bad chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "malformed chunk size"},
		{"no answer", "", "timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := rawServer(t, tt.answer)
			res, _ := run(t, Config{Target: addr, Conns: 2, Requests: 6, Timeout: 200 * time.Millisecond})
			if res.Errors != 6 || res.Requests != 6 || len(res.Status) != 0 {
				t.Errorf("%s: want 6 errors and no answers", res)
			}
			if res.FirstErr == nil || !slices.ContainsFunc(strings.Split(tt.want, "|"), func(w string) bool { return strings.Contains(res.FirstErr.Error(), w) }) {
				t.Errorf("first error %v, want one saying %q", res.FirstErr, tt.want)
			}
		})
	}
}

// rawServer answers each connection's first request with answer and
// closes it ("\x00close": closes at once; "": never answers).
func rawServer(t *testing.T, answer string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer func() { _ = c.Close() }()
				if answer == "\x00close" {
					return
				}
				if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
					return
				}
				if answer == "" {
					_, _ = io.Copy(io.Discard, c) // until the driver gives up
					return
				}
				_, _ = io.WriteString(c, answer)
			})
		}
	})
	return ln.Addr().String()
}

func TestRunEndsWithContext(t *testing.T) {
	s := newServer(t)
	d, err := New(Config{Target: s.target(), Path: "/s/0", Conns: 2, Duration: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	res, err := d.Run(ctx)
	if err != nil || res.Errors != 0 || res.Status[200] == 0 {
		t.Errorf("%s, %v: want answers, no errors, when the context ends the run", res, err)
	}
}

func TestReadResponse(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		head     bool
		code     int
		keep     bool
		rest     string // what must remain unread
		errorHas string
	}{
		{"content-length", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcNEXT", false, 200, true, "NEXT", ""},
		{"chunked with extension and trailer", "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3;x=y\r\nabc\r\nA\r\n0123456789\r\n0\r\nX-T: 1\r\n\r\nNEXT", false, 200, true, "NEXT", ""},
		{"no body: 204", "HTTP/1.1 204 No Content\r\n\r\nNEXT", false, 204, true, "NEXT", ""},
		{"no body: HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\nNEXT", true, 200, true, "NEXT", ""},
		{"interim answer first", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\nNEXT", false, 201, true, "NEXT", ""},
		{"connection close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", false, 200, false, "", ""},
		{"HTTP/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", false, 200, false, "", ""},
		{"HTTP/1.0 keep-alive", "HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n", false, 200, true, "", ""},
		{"body to the end", "HTTP/1.1 200 OK\r\n\r\nall of it", false, 200, false, "", ""},
		{"LF line breaks", "HTTP/1.1 503 Service Unavailable\nContent-Length: 2\n\nokNEXT", false, 503, true, "NEXT", ""},
		{"bad status line", "HTTP/2 200 OK\r\n\r\n", false, 0, false, "", "malformed status line"},
		{"bad length", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", false, 0, false, "", "malformed Content-Length"},
		{"bad header", "HTTP/1.1 200 OK\r\nnocolon\r\n\r\n", false, 0, false, "", "malformed header line"},
		{"chunk without its line break", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n0\r\n\r\n", false, 0, false, "", "not followed by a line break"},
		{"switching protocols", "HTTP/1.1 101 Switching Protocols\r\n\r\n", false, 0, false, "", "switched protocols"},
		{"cut short", "HTTP/1.1 200 OK\r\nContent-Le", false, 0, false, "", "unexpected EOF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			br := bufio.NewReader(strings.NewReader(tt.in))
			code, keep, err := readResponse(br, tt.head)
			if tt.errorHas != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errorHas) {
					t.Fatalf("error %v, want one saying %q", err, tt.errorHas)
				}
				return
			}
			if err != nil || code != tt.code || keep != tt.keep {
				t.Fatalf("got %d, keep %v, %v; want %d, keep %v", code, keep, err, tt.code, tt.keep)
			}
			if rest, _ := io.ReadAll(br); string(rest) != tt.rest {
				t.Errorf("left %q unread, want %q", rest, tt.rest)
			}
		})
	}
}

func TestRequestBytes(t *testing.T) {
	d, err := New(Config{Target: "127.0.0.1:9", Path: "/v1/{key}", Keys: 2, Body: `{"k":"{key}"}`,
		Header: http.Header{"X-Consumer-Id": {"c{key}"}, "Content-Type": {"application/json"}}})
	if err != nil {
		t.Fatal(err)
	}
	want := "POST /v1/1 HTTP/1.1\r\nHost: 127.0.0.1:9\r\nContent-Type: application/json\r\nX-Consumer-Id: c1\r\nContent-Length: 9\r\n\r\n{\"k\":\"1\"}"
	if got := string(d.reqs[1]); got != want {
		t.Errorf("request of key 1:\n%q\nwant\n%q", got, want)
	}
	d, err = New(Config{Target: "127.0.0.1:9", Header: http.Header{"Host": {"example.com"}}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(d.reqs[0]), "GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"; got != want {
		t.Errorf("GET: %q, want %q", got, want)
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no target", Config{}, `Target ""`},
		{"target without port", Config{Target: "localhost"}, `Target "localhost": want host:port`},
		{"negative", Config{Target: "h:1", Conns: -1}, "Conns -1: must not be negative"},
		{"keys without placeholder", Config{Target: "h:1", Keys: 10, Body: "{}"}, "Keys 10: no {key}"},
		{"method", Config{Target: "h:1", Method: "GE T"}, `Method "GE T"`},
		{"path", Config{Target: "h:1", Path: "v1/check"}, `Path "v1/check": want an absolute path`},
		{"header name", Config{Target: "h:1", Header: http.Header{"Bad Name": {"x"}}}, `Header "Bad Name": not a valid header name`},
		{"header set by the driver", Config{Target: "h:1", Header: http.Header{"Content-Length": {"3"}}}, `Header "Content-Length": set by the driver`},
		{"header value", Config{Target: "h:1", Header: http.Header{"X-A": {"a\r\nb"}}}, `value "a\r\nb" holds a line break`},
		{"order", Config{Target: "h:1", Order: 7}, "Order 7: want Uniform or RoundRobin"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg)
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want ErrConfig saying %q", err, tt.want)
			}
		})
	}
	d, err := New(Config{Target: "127.0.0.1:9"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Run(context.Background()); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "set Requests or Duration") {
		t.Errorf("Run without a bound: %v", err)
	}
	if _, err := d.Warm(context.Background(), 0); !errors.Is(err, ErrConfig) {
		t.Errorf("Warm(0): %v, want ErrConfig", err)
	}
	if _, err := ParseOrder("random"); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), `order "random"`) {
		t.Errorf("ParseOrder(random): %v", err)
	}
	if o, err := ParseOrder("round-robin"); o != RoundRobin || err != nil {
		t.Errorf("ParseOrder(round-robin): %v, %v", o, err)
	}
}

func TestHist(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		d := time.Duration(rng.Int64N(int64(time.Hour)))
		if v := value(bucket(d)); float64(absDur(v-d)) > float64(d)/64+1 {
			t.Fatalf("%v is counted as %v: more than 1/64 off", d, v)
		}
	}
	if b := bucket(time.Duration(1<<63 - 1)); b >= histBuckets {
		t.Fatalf("the largest duration's bucket %d is out of %d", b, histBuckets)
	}
	var h hist
	if h.quantile(0.5) != 0 {
		t.Error("an empty histogram's median is not 0")
	}
	for i := 1; i <= 100; i++ {
		h.add(time.Duration(i) * time.Millisecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 50 * time.Millisecond}, {0.99, 99 * time.Millisecond}, {1, 100 * time.Millisecond}, {0, time.Millisecond}} {
		if got := h.quantile(c.q); absDur(got-c.want) > c.want/64 {
			t.Errorf("quantile %.2f: %v, want %v", c.q, got, c.want)
		}
	}
}

func absDur(d time.Duration) time.Duration { return max(d, -d) }
