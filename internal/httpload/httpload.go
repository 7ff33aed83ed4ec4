// Package httpload is a closed-loop HTTP/1.1 load driver: a fixed number of
// keep-alive connections over raw TCP, each with one request in flight,
// sending its next request when the last one is answered. Requests are
// built once, as bytes, one per key; responses are read no further than
// their framing needs (the status line, Content-Length or chunked
// encoding) and their bodies are discarded, so that the driver costs the
// machine it shares with the server little. It counts the answers by status
// and measures their latencies. It owns no server: it asks whatever listens
// at the target. Used by the benchmarks of bench/ and by the bench/httpload
// command.
package httpload

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// KeyPlaceholder is replaced by the key's number (0 to Keys-1) in a
// request's path, header values and body.
const KeyPlaceholder = "{key}"

// Order is how each connection picks the key of its next request.
type Order int

const (
	Uniform    Order = iota // drawn uniformly, from a seeded generator of the connection's own
	RoundRobin              // each key in turn, every connection starting at its own offset
)

func (o Order) String() string {
	switch o {
	case Uniform:
		return "uniform"
	case RoundRobin:
		return "round-robin"
	}
	return "Order(" + strconv.Itoa(int(o)) + ")"
}

// ParseOrder reads an Order by its name: "uniform" or "round-robin".
func ParseOrder(s string) (Order, error) {
	for _, o := range []Order{Uniform, RoundRobin} {
		if s == o.String() {
			return o, nil
		}
	}
	return 0, fmt.Errorf("%w: order %q: want uniform or round-robin", ErrConfig, s)
}

// Config is one driver's requests and load. Requests and Duration bound a
// run; at least one must be set, and the run ends at whichever comes first.
type Config struct {
	Target   string        // host:port of the server; required
	Method   string        // default GET, or POST when Body is set
	Path     string        // the request target; default "/"
	Header   http.Header   // sent with every request, names in sorted order; Host defaults to Target, Content-Length is the driver's
	Body     string        // the request body; default none
	Keys     int           // distinct requests, KeyPlaceholder set to 0..Keys-1; default 1 (Keys > 1 needs a placeholder)
	Order    Order         // how a connection picks its next key; default Uniform
	Conns    int           // connections, each with one request in flight; default 32
	Requests int           // stop after this many requests in all; 0: no bound
	Duration time.Duration // stop sending after this long; 0: no bound
	Timeout  time.Duration // a request's bound, from its write to the end of its answer; default 5s
	Seed     uint64        // seed of the Uniform draws
}

// ErrConfig reports a Config that cannot run.
var ErrConfig = errors.New("httpload: bad config")

// Result is what a run saw.
type Result struct {
	Requests int64         // answered or failed
	Status   map[int]int64 // answers by status code
	Errors   int64         // requests without an answer: connection failures, timeouts, malformed answers
	FirstErr error         // the first failure, if any
	Dials    int64         // connections opened during the run
	Elapsed  time.Duration // from the run's start to its last answer
	P50      time.Duration // latency of the answered requests, within 1/64
	P90, P99 time.Duration
}

// PerSecond is the run's requests per second.
func (r Result) PerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Requests) / r.Elapsed.Seconds()
}

func (r Result) String() string {
	var codes []string
	for _, c := range slices.Sorted(maps.Keys(r.Status)) {
		codes = append(codes, fmt.Sprintf("%d: %d", c, r.Status[c]))
	}
	s := fmt.Sprintf("%d requests in %v: %.0f/s, p50 %v, p90 %v, p99 %v, status {%s}, errors %d, dials %d",
		r.Requests, r.Elapsed.Round(time.Millisecond), r.PerSecond(), r.P50, r.P90, r.P99, strings.Join(codes, ", "), r.Errors, r.Dials)
	if r.FirstErr != nil {
		s += " (first: " + r.FirstErr.Error() + ")"
	}
	return s
}

// Driver holds the prepared requests and the connections of runs of one
// Config. Connections open on the first request and stay open across runs
// (a warm-up, then a measurement). A Driver is not safe for concurrent
// runs; Close it when done.
type Driver struct {
	cfg   Config
	head  bool     // HEAD requests: answers have no body
	reqs  [][]byte // one a key
	conns []*conn
}

// New checks cfg and builds one request per key.
func New(cfg Config) (*Driver, error) {
	if err := fill(&cfg); err != nil {
		return nil, err
	}
	d := &Driver{cfg: cfg, head: cfg.Method == http.MethodHead, reqs: make([][]byte, cfg.Keys)}
	for i := range d.reqs {
		d.reqs[i] = build(cfg, strconv.Itoa(i))
	}
	d.conns = make([]*conn, cfg.Conns)
	for i := range d.conns {
		d.conns[i] = &conn{target: cfg.Target}
	}
	return d, nil
}

// fill checks cfg and sets its defaults.
func fill(cfg *Config) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if _, _, err := net.SplitHostPort(cfg.Target); err != nil {
		bad("Target %q: want host:port", cfg.Target)
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"Keys", int64(cfg.Keys)}, {"Conns", int64(cfg.Conns)}, {"Requests", int64(cfg.Requests)}, {"Duration", int64(cfg.Duration)}, {"Timeout", int64(cfg.Timeout)}} {
		if f.v < 0 {
			bad("%s %d: must not be negative", f.name, f.v)
		}
	}
	if cfg.Order != Uniform && cfg.Order != RoundRobin {
		bad("Order %d: want Uniform or RoundRobin", int(cfg.Order))
	}
	if cfg.Method == "" {
		cfg.Method = http.MethodGet
		if cfg.Body != "" {
			cfg.Method = http.MethodPost
		}
	}
	if !isToken(cfg.Method) {
		bad("Method %q: want a token such as GET or POST", cfg.Method)
	}
	if cfg.Path == "" {
		cfg.Path = "/"
	}
	if !strings.HasPrefix(cfg.Path, "/") || strings.ContainsAny(cfg.Path, " \t\r\n") {
		bad("Path %q: want an absolute path, without spaces or line breaks", cfg.Path)
	}
	for name, vs := range cfg.Header {
		switch {
		case !isToken(name):
			bad("Header %q: not a valid header name", name)
		case http.CanonicalHeaderKey(name) == "Content-Length", http.CanonicalHeaderKey(name) == "Transfer-Encoding":
			bad("Header %q: set by the driver from Body", name)
		}
		for _, v := range vs {
			if strings.ContainsAny(v, "\r\n") {
				bad("Header %q: value %q holds a line break", name, v)
			}
		}
	}
	if cfg.Keys == 0 {
		cfg.Keys = 1
	}
	if cfg.Keys > 1 && !strings.Contains(cfg.Path+cfg.Body+headerValues(cfg.Header), KeyPlaceholder) {
		bad("Keys %d: no %s in Path, Header values or Body, so every request would be the same", cfg.Keys, KeyPlaceholder)
	}
	if cfg.Conns == 0 {
		cfg.Conns = 32
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrConfig, errors.Join(errs...))
	}
	return nil
}

func headerValues(h http.Header) string {
	var b strings.Builder
	for _, vs := range h {
		for _, v := range vs {
			b.WriteString(v)
		}
	}
	return b.String()
}

// isToken reports whether s is an HTTP token (RFC 9110 5.6.2): a method
// or a header name.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// build writes the request of key: the request line, Host, the headers in
// name order, Content-Length when there is a body or the method usually
// has one, and the body.
func build(cfg Config, key string) []byte {
	sub := func(s string) string { return strings.ReplaceAll(s, KeyPlaceholder, key) }
	body := sub(cfg.Body)
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\n", cfg.Method, sub(cfg.Path))
	if cfg.Header.Get("Host") == "" {
		fmt.Fprintf(&b, "Host: %s\r\n", cfg.Target)
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Header)) {
		for _, v := range cfg.Header[name] {
			fmt.Fprintf(&b, "%s: %s\r\n", name, sub(v))
		}
	}
	switch cfg.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(body))
	default:
		if body != "" {
			fmt.Fprintf(&b, "Content-Length: %d\r\n", len(body))
		}
	}
	b.WriteString("\r\n")
	b.WriteString(body)
	return []byte(b.String())
}

// Config returns the driver's configuration with its defaults filled in.
func (d *Driver) Config() Config { return d.cfg }

// Close closes the connections; a later run opens new ones.
func (d *Driver) Close() {
	for _, c := range d.conns {
		c.close()
	}
}

// Run sends requests until the Config's bound is met or ctx ends, and
// returns what it saw. Connections left open by an earlier run are used
// again. A run with neither Requests nor Duration set is refused.
func (d *Driver) Run(ctx context.Context) (Result, error) {
	if d.cfg.Requests == 0 && d.cfg.Duration == 0 {
		return Result{}, fmt.Errorf("%w: set Requests or Duration", ErrConfig)
	}
	return d.run(ctx, d.cfg.Requests, d.cfg.Duration), nil
}

// Warm sends requests for dur, on the connections Run will use, and
// returns what it saw: connections open, and the server's pools and
// caches fill, before a measured Run.
func (d *Driver) Warm(ctx context.Context, dur time.Duration) (Result, error) {
	if dur <= 0 {
		return Result{}, fmt.Errorf("%w: warm-up %v: must be positive", ErrConfig, dur)
	}
	return d.run(ctx, 0, dur), nil
}

// tally is what one connection saw in a run.
type tally struct {
	status   [1000]int64 // by status code (100 to 999)
	fails    int64
	firstErr error
	lat      hist
}

func (d *Driver) run(ctx context.Context, requests int, dur time.Duration) Result {
	var (
		sent     atomic.Int64
		deadline time.Time // no request is sent after it; those in flight finish
		wg       sync.WaitGroup
	)
	ts := make([]tally, len(d.conns))
	dials := make([]int64, len(d.conns))
	start := time.Now()
	if dur > 0 {
		deadline = start.Add(dur)
	}
	for w, c := range d.conns {
		me := &ts[w]
		pick := d.picker(w)
		wg.Go(func() {
			defer func() { dials[w] = c.dials; c.dials = 0 }()
			for ctx.Err() == nil {
				if requests > 0 && sent.Add(1) > int64(requests) {
					return
				}
				t := time.Now()
				if !deadline.IsZero() && !t.Before(deadline) {
					return
				}
				code, err := c.do(d.reqs[pick()], d.head, t.Add(d.cfg.Timeout))
				if err != nil {
					if ctx.Err() != nil {
						return // the caller ended the run: not counted
					}
					me.fails++
					if me.firstErr == nil {
						me.firstErr = err
					}
					continue
				}
				me.status[code]++
				me.lat.add(time.Since(t))
			}
		})
	}
	wg.Wait()
	res := Result{Elapsed: time.Since(start), Status: map[int]int64{}}
	var lat hist
	for w := range ts {
		t := &ts[w]
		for code, n := range t.status {
			if n > 0 {
				res.Status[code] += n
				res.Requests += n
			}
		}
		res.Errors += t.fails
		res.Requests += t.fails
		if res.FirstErr == nil {
			res.FirstErr = t.firstErr
		}
		res.Dials += dials[w]
		lat.merge(&t.lat)
	}
	res.P50, res.P90, res.P99 = lat.quantile(0.50), lat.quantile(0.90), lat.quantile(0.99)
	return res
}

// picker returns the key chooser of connection w.
func (d *Driver) picker(w int) func() int {
	n := d.cfg.Keys
	if d.cfg.Order == RoundRobin {
		i := w * n / len(d.conns)
		return func() int {
			k := i
			i = (i + 1) % n
			return k
		}
	}
	rng := rand.New(rand.NewPCG(d.cfg.Seed, uint64(w)))
	return func() int { return rng.IntN(n) }
}
