package node

import (
	"bytes"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/ratesync/ratesync/internal/node/config"
	"github.com/ratesync/ratesync/middleware"
	"github.com/ratesync/ratesync/ratelimiting"
)

// checkBody is the JSON body of POST /v1/check, in one of two forms:
//
//	{"namespace":"default","key":"user:42","cost":1,"limits":[{"limit":100,"window":"1m"},{"limit":10,"window":"1s","type":"fixed"}]}
//	{"policy":"api","key":"user:42"}
//
// A limit's type is sliding (the default), fixed, anchored, sliding_log,
// token_bucket or leaky_bucket; burst, a bucket's capacity, only for
// buckets; precision, the sub-window a sliding limit counts in, only for
// sliding:
//
//	{"key":"user:42","limits":[{"limit":1000,"window":"1h","precision":"1m"},{"limit":3,"window":"15m","type":"anchored"}]}
type checkBody struct {
	Namespace string      `json:"namespace"`
	Policy    string      `json:"policy"`
	Key       string      `json:"key"`
	Cost      float64     `json:"cost"`    // NaN before decoding: absent
	Penalty   bool        `json:"penalty"` // namespace form only
	Limits    []limitBody `json:"limits"`  // namespace form only
}

type limitBody struct {
	Limit     float64   `json:"limit"`
	Window    string    `json:"window"`
	Type      string    `json:"type"`
	Burst     optNumber `json:"burst"`
	Precision string    `json:"precision"`
}

var checkSchema = []jsonField{
	{name: "namespace", kind: kString},
	{name: "policy", kind: kString},
	{name: "key", kind: kString},
	{name: "cost", kind: kNumber},
	{name: "penalty", kind: kBool},
	{name: "limits", kind: kArray, elem: []jsonField{
		{name: "limit", kind: kNumber},
		{name: "window", kind: kString},
		{name: "type", kind: kString},
		{name: "burst", kind: kNumber},
		{name: "precision", kind: kString},
	}},
}

// checkInput is a decoded and validated check.
type checkInput struct {
	namespace string // namespace form
	policy    string // policy form
	key       string
	cost      float64 // NaN: the default (1, or the policy's cost)
	penalty   bool
	limits    []ratelimiting.Limit
}

// checkState is the per-request memory of /v1/check, pooled so that the
// hot path allocates little.
type checkState struct {
	body     checkBody
	in       checkInput
	out      []byte
	rd       bytes.Reader
	names    [8]string // recent names (fastCheck's intern)
	nextName int
}

var checkPool = sync.Pool{New: func() any {
	return &checkState{body: checkBody{Limits: make([]limitBody, 0, 4)}, out: make([]byte, 0, 512)}
}}

// checkBodyDecoder is the JSON decoder of /v1/check bodies: a variable
// only so that BenchmarkCheckJSONDecoders can run the handler with another
// in the same run.
var checkBodyDecoder = decodeCheckBody

// decodeCheckBody decodes data into st.body: fastCheck takes the plain
// subset of JSON clients send, decodeStrict everything else, errors
// included.
func decodeCheckBody(data []byte, st *checkState) *problem {
	b := &st.body
	*b = checkBody{Cost: math.NaN(), Limits: b.Limits[:0]}
	if fastCheck(data, st) {
		return nil
	}
	// encoding/json decodes into a reused slice's elements without zeroing
	// them: clear them first.
	lims := b.Limits[:cap(b.Limits)]
	clear(lims)
	*b = checkBody{Cost: math.NaN(), Limits: lims[:0]}
	return decodeStrict(data, &st.rd, b, checkSchema)
}

// decodeCheck decodes and validates a /v1/check body into st.in. Every bad
// body gets a 400 problem naming the field; nothing panics (FuzzDecodeCheck).
// Whether the namespace or policy exists, and whether the windows are the
// namespace's, is for the handler to find out.
func decodeCheck(data []byte, st *checkState, maxKey int) *problem {
	if p := checkBodyDecoder(data, st); p != nil {
		return p
	}
	b, in := &st.body, &st.in
	*in = checkInput{limits: in.limits[:0], cost: math.NaN()}
	if p := in.setKeyAndCost(b, maxKey); p != nil {
		return p
	}
	if b.Policy != "" {
		return in.setPolicy(b)
	}
	return in.setLimits(b)
}

// setKeyAndCost takes b's key (required, at most maxKey bytes) and cost
// (NaN when absent).
func (in *checkInput) setKeyAndCost(b *checkBody, maxKey int) *problem {
	switch {
	case b.Key == "":
		return invalid("key", "key: required: the client's key, like \"user:42\"")
	case len(b.Key) > maxKey:
		return invalid("key", fmt.Sprintf("key: %d bytes: must be at most %d bytes", len(b.Key), maxKey))
	}
	in.key = b.Key
	if math.IsNaN(b.Cost) {
		return nil
	}
	if b.Cost < 0 || b.Cost > config.MaxNumber {
		return invalidValue("cost", formatNumber(b.Cost), fmt.Sprintf("must be >= 0 (0 asks without counting) and at most %g", float64(config.MaxNumber)))
	}
	in.cost = b.Cost
	return nil
}

// setPolicy takes the policy form: the policy names the namespace and
// holds the limits and the penalty.
func (in *checkInput) setPolicy(b *checkBody) *problem {
	switch {
	case b.Namespace != "":
		return invalid("namespace", "namespace: not with policy: the policy names its namespace")
	case len(b.Limits) > 0:
		return invalid("limits", "limits: not with policy: the policy holds its limits")
	case b.Penalty:
		return invalid("penalty", "penalty: not with policy: the policy says whether denied requests count")
	}
	in.policy = b.Policy
	return nil
}

// setLimits takes the namespace form: the namespace (default "default"),
// the penalty, and 1 to MaxLimits limits.
func (in *checkInput) setLimits(b *checkBody) *problem {
	in.namespace, in.penalty = b.Namespace, b.Penalty
	if in.namespace == "" {
		in.namespace = "default"
	}
	switch {
	case len(b.Limits) == 0:
		return invalid("limits", fmt.Sprintf("limits: required: 1 to %d limits like {\"limit\":100,\"window\":\"1m\"}, or a policy", config.MaxLimits))
	case len(b.Limits) > config.MaxLimits:
		return invalidValue("limits", strconv.Itoa(len(b.Limits))+" limits", fmt.Sprintf("at most %d", config.MaxLimits))
	}
	for i, l := range b.Limits {
		lim, p := decodeLimit(i, l)
		if p != nil {
			return p
		}
		in.limits = append(in.limits, lim)
	}
	return nil
}

// decodeLimit validates limits[i] on its own: what does not depend on the
// namespace or the cost (the library checks those).
func decodeLimit(i int, l limitBody) (ratelimiting.Limit, *problem) {
	field := func(name string) string { return fmt.Sprintf("limits[%d].%s", i, name) }
	if !(l.Limit > 0) || l.Limit > config.MaxNumber {
		return ratelimiting.Limit{}, invalidValue(field("limit"), formatNumber(l.Limit), fmt.Sprintf("must be > 0 and at most %g", float64(config.MaxNumber)))
	}
	win, p := parseWindow(l.Window, i)
	if p != nil {
		return ratelimiting.Limit{}, p
	}
	alg, ok := config.ParseLimitType(l.Type)
	if !ok {
		return ratelimiting.Limit{}, invalidValue(field("type"), strconv.Quote(l.Type), "must be one of "+config.LimitTypesText)
	}
	lim := ratelimiting.Limit{Limit: l.Limit, Window: win, Algorithm: alg}
	if l.Precision != "" {
		if lim.Precision, p = parsePrecision(l.Precision, lim, i); p != nil {
			return ratelimiting.Limit{}, p
		}
	}
	if l.Burst.set {
		if p := checkBurst(i, lim, l.Burst.v); p != nil {
			return ratelimiting.Limit{}, p
		}
		lim.Burst = l.Burst.v
	}
	return lim, nil
}

// checkBurst checks limits[i].burst, b, of limit l: for buckets only, in
// range.
func checkBurst(i int, l ratelimiting.Limit, b float64) *problem {
	field := func() string { return fmt.Sprintf("limits[%d].burst", i) }
	switch typ := config.LimitType(l); {
	case !config.IsBucket(typ):
		return invalidValue(field(), formatNumber(b), fmt.Sprintf("only applies to type %s and %s, not %s", config.TypeTokenBucket, config.TypeLeakyBucket, typ))
	case b < 0 || b > config.MaxNumber:
		return invalidValue(field(), formatNumber(b), fmt.Sprintf("must be >= 0 (0 means the limit) and at most %g", float64(config.MaxNumber)))
	}
	return nil
}

// parseWindow parses limits[i].window, naming the field only on the error
// path.
func parseWindow(s string, i int) (time.Duration, *problem) {
	field := func() string { return fmt.Sprintf("limits[%d].window", i) }
	if s == "" {
		return 0, invalid(field(), field()+": required: a duration like 1s, 1m, 1h")
	}
	return parseWindowField(s, field)
}

// parseWindowField parses a window size: a Go duration > 0 in whole
// milliseconds.
func parseWindowField(s string, field func() string) (time.Duration, *problem) {
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return 0, invalidValue(field(), strconv.Quote(s), "must be a duration like 1s, 1m, 1h")
	case d <= 0:
		return 0, invalidValue(field(), strconv.Quote(s), "must be > 0")
	case d%time.Millisecond != 0:
		return 0, invalidValue(field(), strconv.Quote(s), "must be a whole number of milliseconds")
	}
	return d, nil
}

// parsePrecision parses limits[i].precision, s, of limit l: a duration
// >= 0 in whole milliseconds (0 means the window), for type sliding only.
// What it may be besides (a divisor of the window, one of the namespace's
// window sizes...) the library checks.
func parsePrecision(s string, l ratelimiting.Limit, i int) (time.Duration, *problem) {
	field := fmt.Sprintf("limits[%d].precision", i)
	d, err := time.ParseDuration(s)
	switch typ := config.LimitType(l); {
	case typ != config.TypeSliding:
		return 0, invalidValue(field, strconv.Quote(s), fmt.Sprintf("only applies to type %s, not %s", config.TypeSliding, typ))
	case err != nil:
		return 0, invalidValue(field, strconv.Quote(s), "must be a duration like 1s, 1m, 1h")
	case d < 0:
		return 0, invalidValue(field, strconv.Quote(s), "must be >= 0 (0 means the window)")
	case d%time.Millisecond != 0:
		return 0, invalidValue(field, strconv.Quote(s), "must be a whole number of milliseconds")
	}
	return d, nil
}

func formatNumber(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// handleCheck is POST /v1/check: decide a request against limits or a
// policy. 200 allowed, 429 denied, with the rate-limit headers; 4xx
// problem+json for bad input; 503 when the limiter cannot decide.
func (n *Node) handleCheck(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		writeProblem(w, methodNotAllowed(r, http.MethodPost))
		return
	}
	l := n.state()
	buf, p := readBody(w, r, l.cfg.Node.MaxBodyBytes)
	if p != nil {
		writeProblem(w, p)
		return
	}
	st := checkPool.Get().(*checkState)
	defer checkPool.Put(st)
	p = decodeCheck(buf.Bytes(), st, l.cfg.Node.MaxKeyBytes)
	putBody(buf)
	if p != nil {
		writeProblem(w, p)
		return
	}
	in := &st.in
	var (
		d    ratelimiting.Decision
		name string
		oc   *outcomeCounters
	)
	if in.policy != "" {
		pol := l.policies[in.policy]
		if pol == nil {
			writeProblem(w, notFound("policy", fmt.Sprintf("policy %q: no such policy", in.policy)))
			return
		}
		cost := in.cost
		if math.IsNaN(cost) {
			cost = pol.cfg.Cost
		}
		name, oc = pol.cfg.Name, pol.outcomes
		res := pol.lim.CheckKey(r.Context(), in.key, cost)
		oc.add(res.Outcome)
		switch res.Outcome {
		case middleware.StoreDeny:
			writeProblem(w, unavailable(res.Err.Error()))
			return
		case middleware.Failed:
			writeProblem(w, problemOf(res.Err, pol.cfg.Namespace))
			return
		}
		d = res.Decision
	} else {
		cost := in.cost
		if math.IsNaN(cost) {
			cost = 1
		}
		name, oc = in.namespace, l.nsOutcomes[in.namespace]
		var err error
		d, err = n.in.Check(r.Context(), ratelimiting.Request{
			Namespace: in.namespace, Key: in.key, Cost: cost, Limits: in.limits, Penalty: in.penalty,
		})
		if err != nil {
			oc.add(middleware.Failed)
			writeProblem(w, problemOf(err, in.namespace))
			return
		}
		if d.Allowed {
			oc.add(middleware.Allowed)
		} else {
			oc.add(middleware.Denied)
		}
	}
	h := w.Header()
	middleware.WriteHeaders(h, name, d, l.headers)
	h["Content-Type"] = jsonContentType
	st.out = appendDecision(st.out[:0], d)
	if d.Allowed {
		w.WriteHeader(http.StatusOK)
	} else {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	_, _ = w.Write(st.out)
}

// appendDecision appends the JSON answer of /v1/check:
//
//	{"allowed":true,"retry_after_ms":0,"limits":[{"limit":100,"window":"1m","type":"sliding","remaining":99,"reset_ms":60000}]}
//
// A bucket's limit also shows its burst in force (its limit when 0), and
// a sliding limit with a precision shows it:
//
//	{"limit":10,"window":"1m","type":"token_bucket","burst":20,"remaining":19,"reset_ms":6000}
//	{"limit":1000,"window":"1h","type":"sliding","precision":"1m","remaining":999,"reset_ms":3600000}
func appendDecision(buf []byte, d ratelimiting.Decision) []byte {
	buf = append(buf, `{"allowed":`...)
	buf = strconv.AppendBool(buf, d.Allowed)
	buf = append(buf, `,"retry_after_ms":`...)
	buf = strconv.AppendInt(buf, d.RetryAfter.Milliseconds(), 10)
	buf = append(buf, `,"limits":[`...)
	for i, s := range d.Limits {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, `{"limit":`...)
		buf = appendFloat(buf, s.Limit.Limit)
		buf = append(buf, `,"window":"`...)
		buf = middleware.AppendWindow(buf, s.Limit.Window)
		buf = append(buf, `","type":"`...)
		typ := config.LimitType(s.Limit)
		buf = append(buf, typ...)
		buf = append(buf, '"')
		if config.IsBucket(typ) {
			burst := s.Limit.Burst
			if burst == 0 {
				burst = s.Limit.Limit
			}
			buf = append(buf, `,"burst":`...)
			buf = appendFloat(buf, burst)
		}
		if s.Limit.Precision != 0 {
			buf = append(buf, `,"precision":"`...)
			buf = middleware.AppendWindow(buf, s.Limit.Precision)
			buf = append(buf, '"')
		}
		buf = append(buf, `,"remaining":`...)
		buf = appendFloat(buf, s.Remaining)
		buf = append(buf, `,"reset_ms":`...)
		buf = strconv.AppendInt(buf, s.Reset.Milliseconds(), 10)
		buf = append(buf, '}')
	}
	return append(buf, "]}\n"...)
}
