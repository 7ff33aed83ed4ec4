package middleware

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
)

// Errors a Limiter reports to Options.ErrorHandler (and in Result.Err).
var (
	// ErrKeyTooLong: the request's key is longer than Options.MaxKeyBytes.
	ErrKeyTooLong = errors.New("middleware: key too long")
	// ErrStoreDown: the policy denies requests while its namespace's store
	// is unreachable (StoreDownDeny), and it is.
	ErrStoreDown = errors.New("middleware: rate-limit store unreachable")
)

// DefaultMaxKeyBytes is the longest key a Limiter accepts by default.
const DefaultMaxKeyBytes = 1024

// DefaultDeniedMessage is the message of a denied request's body.
const DefaultDeniedMessage = "API rate limit exceeded"

// StoreDown is what a policy does while its namespace's store is
// unreachable (ratelimiting's Stats: Sync.StoreUp false).
type StoreDown uint8

// StoreDown behaviours.
const (
	// StoreDownLocal keeps deciding from this node's counts, as the library
	// does (fail open to local limits; counts are pushed once the store is
	// back). Each node then admits up to the full limit on its own. The
	// default.
	StoreDownLocal StoreDown = iota
	// StoreDownDeny refuses every request of the policy with 503 and
	// Retry-After while the store is unreachable, and counts nothing:
	// strict limits at the price of availability.
	StoreDownDeny
)

// Policy is what a Limiter enforces.
type Policy struct {
	// Name names the policy in the RateLimit headers and in Results; the
	// namespace's name when empty.
	Name string
	// Namespace is the instance's namespace counting the requests;
	// "default" when empty.
	Namespace string
	// Limits are checked all or nothing; at least one. The window of a
	// window limit must be one of the namespace's window sizes (for a
	// SlidingWindow with Precision, the Precision must be); a bucket's,
	// an anchored window's or a sliding log's is any whole number of
	// milliseconds. Validate lists every rule.
	Limits []ratelimiting.Limit
	// Key names the client; nil selects the peer's IP address.
	Key KeyFunc
	// Cost is what one request counts; 1 when 0.
	Cost float64
	// Penalty counts denied requests too (Kong's default): a client that
	// keeps hammering stays denied. Default false: a denied request counts
	// nothing, so a client regains quota as its window slides.
	Penalty bool
	// StoreDown is what to do while the namespace's store is unreachable.
	StoreDown StoreDown
}

// Options configures how a Limiter answers. The zero value writes both
// header families, denies with 429 {"message":"API rate limit exceeded"},
// and answers faults with a 503 application/problem+json.
type Options struct {
	Headers HeaderOptions
	// DeniedStatus is the status of a denied request; 429 when 0.
	DeniedStatus int
	// DeniedMessage is the "message" of a denied request's JSON body;
	// DefaultDeniedMessage when empty.
	DeniedMessage string
	// MaxKeyBytes bounds the key's length; DefaultMaxKeyBytes when 0. A
	// longer key is a fault (ErrKeyTooLong, 400 by default): it would let a
	// client make the node hold arbitrary amounts of memory.
	MaxKeyBytes int
	// FailOpen passes a request the limiter could not decide (a fault,
	// not a denial) to the next handler, without rate-limit headers.
	// Default false: ErrorHandler answers it.
	FailOpen bool
	// ErrorHandler answers a request the limiter could not decide: err is
	// ErrKeyTooLong, ErrStoreDown, or an error of ratelimiting's Check.
	// nil: DefaultErrorHandler.
	ErrorHandler func(w http.ResponseWriter, r *http.Request, err error)
	// Observe, when set, is called once per request with its Result, before
	// the response is written (for metrics and logs). It must not block.
	Observe func(r *http.Request, res Result)
}

// Outcome classifies a Result.
type Outcome uint8

// Outcomes.
const (
	Allowed   Outcome = iota // the request passed every limit
	Denied                   // a limit denied the request
	StoreDeny                // refused: the store is unreachable and the policy says StoreDownDeny
	Failed                   // the limiter could not decide (Err says why)
)

var outcomeNames = [...]string{"allowed", "denied", "store_down", "error"}

// String returns "allowed", "denied", "store_down" or "error".
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// Result is the outcome of one request's check.
type Result struct {
	Outcome  Outcome
	Policy   string // the policy's name
	Key      string
	Decision ratelimiting.Decision // meaningful for Allowed and Denied
	Err      error                 // set for StoreDeny and Failed
}

// Limiter enforces one Policy on HTTP requests. It is safe for concurrent
// use; build it with New.
type Limiter struct {
	in     *ratelimiting.Instance
	p      Policy
	o      Options
	key    KeyFunc
	cost   float64
	denied []byte
	health *storeHealth
}

// New returns a Limiter of policy p on the instance's namespace. It checks
// p against the namespace as configured now (Policy.Validate): the
// namespace must exist, and each window limit's window must be one of its
// window sizes.
func New(in *ratelimiting.Instance, p Policy, o Options) (*Limiter, error) {
	if in == nil {
		return nil, errors.New("middleware: nil ratelimiting.Instance")
	}
	if p.Namespace == "" {
		p.Namespace = "default"
	}
	if p.Name == "" {
		p.Name = p.Namespace
	}
	nss := in.Namespaces()
	i := slices.IndexFunc(nss, func(c namespace.Config) bool { return c.Name == p.Namespace })
	if i < 0 {
		return nil, fmt.Errorf("middleware: policy %q: namespace %q: %w", p.Name, p.Namespace, ratelimiting.ErrNamespaceNotFound)
	}
	if err := p.Validate(nss[i]); err != nil {
		return nil, err
	}
	l := &Limiter{in: in, p: p, o: o.withDefaults(), key: p.Key, cost: p.Cost}
	l.p.Limits = slices.Clone(p.Limits)
	if l.cost == 0 {
		l.cost = 1
	}
	if l.key == nil {
		l.key = func(r *http.Request) string { return ClientIP(r, nil) }
	}
	body, _ := json.Marshal(struct {
		Message string `json:"message"`
	}{l.o.DeniedMessage})
	l.denied = append(body, '\n')
	if p.StoreDown == StoreDownDeny {
		l.health = newStoreHealth(in, p.Namespace)
	}
	return l, nil
}

// withDefaults returns o with its zero fields set to the defaults.
func (o Options) withDefaults() Options {
	if o.DeniedStatus == 0 {
		o.DeniedStatus = http.StatusTooManyRequests
	}
	if o.DeniedMessage == "" {
		o.DeniedMessage = DefaultDeniedMessage
	}
	if o.MaxKeyBytes <= 0 {
		o.MaxKeyBytes = DefaultMaxKeyBytes
	}
	if o.ErrorHandler == nil {
		o.ErrorHandler = DefaultErrorHandler
	}
	return o
}

// Policy returns the limiter's policy, defaults applied.
func (l *Limiter) Policy() Policy { return l.p }

// Handler returns next behind the limiter: a request passes to next when
// the policy allows it, with the rate-limit headers set; otherwise the
// limiter answers it. Handler is a func(http.Handler) http.Handler.
func (l *Limiter) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res := l.Check(r)
		if l.o.Observe != nil {
			l.o.Observe(r, res)
		}
		switch res.Outcome {
		case Allowed:
			WriteHeaders(w.Header(), l.p.Name, res.Decision, l.o.Headers)
			next.ServeHTTP(w, r)
		case Denied:
			l.Deny(w, res.Decision)
		default:
			if l.o.FailOpen && !errors.Is(res.Err, ErrKeyTooLong) {
				next.ServeHTTP(w, r)
				return
			}
			l.o.ErrorHandler(w, r, res.Err)
		}
	})
}

// Check decides r under the policy, with the request's key and the
// policy's cost, and counts it when the policy says so.
func (l *Limiter) Check(r *http.Request) Result {
	return l.CheckKey(r.Context(), l.key(r), l.cost)
}

// CheckKey decides a request of the given key and cost under the policy:
// what Check does once the key is known. cost 0 asks without counting.
func (l *Limiter) CheckKey(ctx context.Context, key string, cost float64) Result {
	res := Result{Policy: l.p.Name, Key: key}
	if len(key) > l.o.MaxKeyBytes {
		res.Outcome, res.Err = Failed, fmt.Errorf("%w: %d bytes, at most %d", ErrKeyTooLong, len(key), l.o.MaxKeyBytes)
		return res
	}
	if l.health != nil && !l.health.up() {
		res.Outcome, res.Err = StoreDeny, fmt.Errorf("%w: namespace %q", ErrStoreDown, l.p.Namespace)
		return res
	}
	d, err := l.in.Check(ctx, ratelimiting.Request{
		Namespace: l.p.Namespace,
		Key:       key,
		Cost:      cost,
		Limits:    l.p.Limits,
		Penalty:   l.p.Penalty,
	})
	switch {
	case err != nil:
		res.Outcome, res.Err = Failed, err
	case d.Allowed:
		res.Outcome, res.Decision = Allowed, d
	default:
		res.Outcome, res.Decision = Denied, d
	}
	return res
}

// WriteHeaders sets the policy's rate-limit headers of d on h, as the
// options say.
func (l *Limiter) WriteHeaders(h http.Header, d ratelimiting.Decision) {
	WriteHeaders(h, l.p.Name, d, l.o.Headers)
}

// Deny answers a denied request: the headers, then the denied status and
// body.
func (l *Limiter) Deny(w http.ResponseWriter, d ratelimiting.Decision) {
	h := w.Header()
	WriteHeaders(h, l.p.Name, d, l.o.Headers)
	h["Content-Type"] = jsonContentType
	w.WriteHeader(l.o.DeniedStatus)
	_, _ = w.Write(l.denied)
}

var (
	jsonContentType    = []string{"application/json"}
	problemContentType = []string{"application/problem+json"}
)

// DefaultErrorHandler answers a request the limiter could not decide with
// an RFC 9457 application/problem+json body: 400 for ErrKeyTooLong, 503
// with Retry-After: 1 for anything else (an unreachable store, a closing
// instance, a canceled request).
func DefaultErrorHandler(w http.ResponseWriter, _ *http.Request, err error) {
	status, title, typ := http.StatusServiceUnavailable, "Rate limiting unavailable", "urn:ratesync:problem:limiter-unavailable"
	switch {
	case errors.Is(err, ErrKeyTooLong):
		status, title, typ = http.StatusBadRequest, "Rate-limit key too long", "urn:ratesync:problem:key-too-long"
	case errors.Is(err, ErrStoreDown):
		title, typ = "Rate-limit store unreachable", "urn:ratesync:problem:store-unavailable"
	}
	h := w.Header()
	h["Content-Type"] = problemContentType
	if status == http.StatusServiceUnavailable {
		h.Set("Retry-After", "1")
	}
	w.WriteHeader(status)
	body, _ := json.Marshal(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}{typ, title, status, err.Error()})
	_, _ = w.Write(append(body, '\n'))
}

// storeHealth tells whether a namespace's store is reachable, from the
// instance's Stats, refreshed at most every storeHealthEvery so the hot
// path reads one atomic.
type storeHealth struct {
	in   *ratelimiting.Instance
	ns   string
	next atomic.Int64 // UnixNano of the next refresh
	down atomic.Bool
}

const storeHealthEvery = 100 * time.Millisecond

func newStoreHealth(in *ratelimiting.Instance, ns string) *storeHealth {
	h := &storeHealth{in: in, ns: ns}
	h.refresh(time.Now())
	return h
}

func (h *storeHealth) up() bool {
	now := time.Now()
	if next := h.next.Load(); now.UnixNano() >= next && h.next.CompareAndSwap(next, now.Add(storeHealthEvery).UnixNano()) {
		h.refresh(now)
	}
	return !h.down.Load()
}

func (h *storeHealth) refresh(now time.Time) {
	h.next.Store(now.Add(storeHealthEvery).UnixNano())
	for _, st := range h.in.Stats() {
		if st.Config.Name == h.ns {
			h.down.Store(!st.Config.Local() && !st.Sync.StoreUp)
			return
		}
	}
}
