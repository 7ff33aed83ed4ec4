package ratelimiting

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/ratesync/ratesync/namespace"
)

// Algorithm is how a Limit counts.
type Algorithm uint8

const (
	SlidingWindow  Algorithm = iota // default: Kong's sliding window counter
	FixedWindow                     // epoch-aligned fixed window; Limit.Fixed = true means the same
	AnchoredWindow                  // fixed window that starts at a key's first counted hit
	SlidingLog                      // moving window: each admitted hit weighs for exactly Window
	TokenBucket                     // refills Limit per Window, up to Burst tokens; GCRA inside
	LeakyBucket                     // a level that drains Limit per Window, capacity Burst
)

var algorithmNames = [...]string{"sliding_window", "fixed_window", "anchored", "sliding_log", "token_bucket", "leaky_bucket"}

// String returns the algorithm's name as the node's configuration spells it.
func (a Algorithm) String() string {
	if int(a) < len(algorithmNames) {
		return algorithmNames[a]
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// ParseAlgorithm returns the algorithm of a name String returns; "" is
// SlidingWindow.
func ParseAlgorithm(s string) (Algorithm, bool) {
	if s == "" {
		return SlidingWindow, true
	}
	for i, n := range algorithmNames {
		if n == s {
			return Algorithm(i), true
		}
	}
	return 0, false
}

// bucket reports whether the algorithm is a bucket.
func (a Algorithm) bucket() bool { return a == TokenBucket || a == LeakyBucket }

// keyed reports whether the algorithm keeps a state per key decided as a
// whole: an anchored window or a sliding log.
func (a Algorithm) keyed() bool { return a == AnchoredWindow || a == SlidingLog }

// MaxLogLimit is the largest Limit of a SlidingLog, and MaxLogLimit
// entries the most a log holds per key: a log keeps one entry per
// millisecond with admitted hits, 16 bytes each, and a cost below
// Limit / MaxLogLimit is refused, so that its admitted entries weigh at
// least that much each. Larger limits belong to SlidingWindow with a
// Precision, which keeps Window / Precision + 1 counters per key.
const MaxLogLimit = 10_000

// MaxPrecisionWindows is the most sub-windows a SlidingWindow with
// Precision slides over: Window / Precision is at most this. A decision
// reads Window / Precision + 1 counters.
const MaxPrecisionWindows = 60

// Limit is one limit a request is checked against.
type Limit struct {
	// Limit is the hits allowed per Window; for buckets the sustained
	// rate, Limit per Window.
	Limit float64
	// Window is the window size, whole milliseconds: for SlidingWindow
	// and FixedWindow one of the namespace's window sizes; for buckets any
	// duration up to namespace.MaxWindowSize.
	Window time.Duration
	// Fixed counts in fixed windows: with Algorithm SlidingWindow (the
	// zero value) or FixedWindow it means FixedWindow.
	Fixed     bool
	Algorithm Algorithm
	// Burst is a bucket's capacity (TokenBucket, LeakyBucket); 0 means
	// Limit. It must be 0 for window algorithms.
	Burst float64
	// Precision is, for SlidingWindow, the size of the sub-windows it is
	// counted in: a divisor of Window, at most MaxPrecisionWindows of them,
	// and one of the namespace's window sizes (Window itself then need not
	// be). The rate is the counts of the sub-windows that start after
	// now - Window plus the one holding now - Window, weighted by its share
	// still inside. 0, or Window itself, is Kong's two-window estimate.
	// A node keeps Window / Precision + 1 sub-windows from the first
	// request that names the precision: until then it keeps two, as for
	// any window size, so counts made before it (Increment, plain limits of
	// that size) older than the previous sub-window are not in its rate.
	Precision time.Duration
}

// span returns the sub-window size of a precision limit, 0 for any other.
func (l *Limit) span() time.Duration {
	if l.Precision > 0 && l.Precision < l.Window {
		return l.Precision
	}
	return 0
}

// fixed reports whether a window limit counts in fixed windows.
func (l *Limit) fixed() bool { return l.Fixed || l.Algorithm == FixedWindow }

// burst returns a bucket's capacity.
func (l *Limit) burst() float64 {
	if l.Burst == 0 {
		return l.Limit
	}
	return l.Burst
}

// LimitState is one limit's part of a Decision.
type LimitState struct {
	Limit Limit
	// Rate is what counts against the limit after the decision (the
	// request's cost included when it was counted): a window's sliding (or
	// fixed) count; a bucket's level, Burst minus its tokens, which is
	// above Burst while the bucket is in debt.
	Rate float64
	// Remaining is the largest whole cost that would pass this limit now:
	// for windows floor(Limit - Rate), for buckets floor(tokens), never
	// negative.
	Remaining float64
	// Reset is the time until the hits counted against this limit no longer
	// weigh on it, if no more come: the end of the window for a fixed
	// window; for a sliding window, the end of the next window while the
	// current one has hits, else the end of the current one; for a bucket,
	// until it is full again (empty, for a leaky bucket).
	Reset time.Duration
	// RetryAfter is the time until this limit alone would let the same
	// request pass, if no more hits come, to the millisecond: retried then
	// it passes, 1 ms earlier it does not. 0 when it lets it pass now.
	RetryAfter time.Duration
	// Allowed reports whether this limit lets the request pass.
	Allowed bool
}

// Decision is the answer to Allow and Check.
type Decision struct {
	Allowed bool
	// RetryAfter is when the same request could pass, if no more hits come:
	// the largest RetryAfter of the limits that deny it, to the
	// millisecond. 0 when allowed.
	RetryAfter time.Duration
	Limits     []LimitState // one per limit, in the order given
}

// Request is a decision to make: Check's argument.
type Request struct {
	Namespace string
	Key       string
	Cost      float64 // >= 0; 0 asks without counting
	Limits    []Limit
	// Penalty counts denied requests too, as Kong does by default: limits
	// are taken by ascending Limit, and the request is counted in each
	// window up to and including the first that denies it. Without it a
	// denied request is not counted at all. Window limits only.
	Penalty bool
}

func limitField(i int, name string) string { return fmt.Sprintf("limits[%d].%s", i, name) }

// validateLimit checks limit i of req on its own: what every namespace
// refuses. A valid limit passes each step at the cost of a few comparisons
// (each step inlines): the limit and algorithm, the burst, a bucket's or
// keyed limit's own window, penalty, a log's bounds, the precision, a
// bucket's refill time, and the cost. limitError names the first step a
// limit fails.
func validateLimit(i int, l *Limit, cost float64, penalty bool) error {
	if kindOK(l) && burstOK(l) && ownWindowOK(l) && penaltyOK(l, penalty) && logOK(l, cost) &&
		(l.Precision == 0 || validatePrecision(i, l, penalty) == nil) && refillOK(l) && costOK(l, cost) {
		return nil
	}
	return limitError(i, l, cost, penalty)
}

// limitError returns the error of the first step of validateLimit that
// limit i fails, naming the field, its value and what is allowed.
func limitError(i int, l *Limit, cost float64, penalty bool) error {
	switch {
	case !kindOK(l):
		return kindError(i, l)
	case !burstOK(l):
		return burstError(i, l)
	case !ownWindowOK(l):
		return badLimit(i, "window", l.Window.String(), fmt.Sprintf("must be whole milliseconds, > 0 and at most %v", namespace.MaxWindowSize))
	case !penaltyOK(l, penalty):
		return penaltyError(i, l)
	case !logOK(l, cost):
		return logError(i, l, cost)
	}
	if err := validatePrecision(i, l, penalty); err != nil {
		return err
	}
	switch {
	case !refillOK(l):
		return refillError(i, l)
	case !costOK(l, cost):
		return costError(i, l, cost)
	}
	return nil
}

// badLimit is limit i's field with value, and what is allowed.
func badLimit(i int, field, value, allowed string) error {
	return &InputError{Field: limitField(i, field), Value: value, Allowed: allowed}
}

// kindOK: the limit is finite and > 0, the algorithm known, and fixed set
// only on a window algorithm.
func kindOK(l *Limit) bool {
	return l.Limit-l.Limit == 0 && l.Limit > 0 && l.Algorithm <= LeakyBucket &&
		(!l.Fixed || l.Algorithm == SlidingWindow || l.Algorithm == FixedWindow)
}

func kindError(i int, l *Limit) error {
	switch {
	case l.Limit-l.Limit != 0 || l.Limit <= 0: // NaN, ±Inf, <= 0
		return badLimit(i, "limit", fmt.Sprint(l.Limit), "must be a finite number > 0")
	case l.Algorithm > LeakyBucket:
		return badLimit(i, "algorithm", l.Algorithm.String(), "must be one of "+strings.Join(algorithmNames[:], ", "))
	}
	return badLimit(i, "fixed", "true", fmt.Sprintf("only applies to sliding_window and fixed_window, not %s", l.Algorithm))
}

// burstOK: the burst is 0, or finite, > 0 and on a bucket.
func burstOK(l *Limit) bool {
	return l.Burst == 0 || l.Burst > 0 && l.Burst <= math.MaxFloat64 && l.Algorithm.bucket()
}

func burstError(i int, l *Limit) error {
	if !(l.Burst > 0 && l.Burst <= math.MaxFloat64) { // NaN, ±Inf, < 0
		return badLimit(i, "burst", fmt.Sprint(l.Burst), "must be a finite number >= 0 (0 means the limit)")
	}
	return badLimit(i, "burst", fmt.Sprint(l.Burst), fmt.Sprintf("only applies to token_bucket and leaky_bucket, not %s", l.Algorithm))
}

// ownWindowOK: a bucket's, an anchored window's or a log's window (which
// need not be a namespace's window size) is whole milliseconds, > 0 and at
// most the longest window.
func ownWindowOK(l *Limit) bool {
	return !l.Algorithm.bucket() && !l.Algorithm.keyed() ||
		l.Window > 0 && l.Window%time.Millisecond == 0 && l.Window <= namespace.MaxWindowSize
}

// penaltyOK: penalty only with an algorithm that can count denied
// requests.
func penaltyOK(l *Limit, penalty bool) bool {
	return !penalty || !l.Algorithm.bucket() && !l.Algorithm.keyed()
}

func penaltyError(i int, l *Limit) error {
	if l.Algorithm.bucket() {
		return badLimit(i, "algorithm", l.Algorithm.String(), "a bucket cannot count denied requests: drop penalty, or use a window algorithm")
	}
	return badLimit(i, "algorithm", l.Algorithm.String(), "only sliding_window and fixed_window can count denied requests: drop penalty, or use one of them")
}

// logOK: a sliding log's limit and the least cost its entries allow.
func logOK(l *Limit, cost float64) bool {
	return l.Algorithm != SlidingLog || l.Limit <= MaxLogLimit && !(cost > 0 && cost < l.Limit/MaxLogLimit)
}

func logError(i int, l *Limit, cost float64) error {
	if l.Limit > MaxLogLimit {
		return badLimit(i, "limit", fmt.Sprint(l.Limit), fmt.Sprintf("must be at most %d for sliding_log (a log keeps an entry per admitted millisecond): use sliding_window with a precision, one of the namespace's window sizes that divides the window into at most %d sub-windows", MaxLogLimit, MaxPrecisionWindows))
	}
	return &InputError{Field: "cost", Value: fmt.Sprint(cost), Allowed: fmt.Sprintf("must be 0 or at least %s / %d (%v) for sliding_log: a log holds at most %d entries per key; use sliding_window with precision for finer costs", limitField(i, "limit"), MaxLogLimit, l.Limit/MaxLogLimit, MaxLogLimit)}
}

// refillOK: a bucket refills from empty within the longest window.
func refillOK(l *Limit) bool {
	return !l.Algorithm.bucket() || l.burst()/l.Limit*float64(l.Window) <= float64(namespace.MaxWindowSize)
}

func refillError(i int, l *Limit) error {
	fill := l.burst() / l.Limit * float64(l.Window)
	return badLimit(i, "burst", fmt.Sprint(l.Burst), fmt.Sprintf("must let the bucket refill from empty within %v: burst / limit × window is %v", namespace.MaxWindowSize, time.Duration(min(fill, math.MaxInt64))))
}

// costOK: the cost can pass the limit: at most a bucket's capacity, or a
// window's limit.
func costOK(l *Limit, cost float64) bool {
	if l.Algorithm.bucket() {
		return !(cost > l.burst())
	}
	return !(cost > l.Limit)
}

func costError(i int, l *Limit, cost float64) error {
	if l.Algorithm.bucket() {
		field := limitField(i, "burst")
		if l.Burst == 0 {
			field = limitField(i, "limit") + ", the capacity when burst is 0"
		}
		return &InputError{Field: "cost", Value: fmt.Sprint(cost), Allowed: fmt.Sprintf("must be at most the bucket's capacity (%v, %s): a larger cost can never pass", l.burst(), field)}
	}
	return &InputError{Field: "cost", Value: fmt.Sprint(cost), Allowed: fmt.Sprintf("must be at most %s (%v): a larger cost can never pass", limitField(i, "limit"), l.Limit)}
}

// validatePrecision checks limit i's Precision on its own (that it is a
// window size of the namespace is prepare's part).
func validatePrecision(i int, l *Limit, penalty bool) error {
	p := l.Precision
	if p == 0 {
		return nil
	}
	bad := func(allowed string) error { return badLimit(i, "precision", p.String(), allowed) }
	switch {
	case l.Algorithm != SlidingWindow || l.Fixed:
		return bad(fmt.Sprintf("only applies to sliding_window, not %s", l.effective()))
	case p < 0 || p%time.Millisecond != 0:
		return bad("must be whole milliseconds > 0 (0 means the window)")
	case l.Window <= 0 || l.Window%p != 0:
		return bad(fmt.Sprintf("must divide %s (%v)", limitField(i, "window"), l.Window))
	case l.Window/p > MaxPrecisionWindows:
		return bad(fmt.Sprintf("must be at least %s / %d (%v): a window slides over at most %d sub-windows", limitField(i, "window"), MaxPrecisionWindows, l.Window/MaxPrecisionWindows, MaxPrecisionWindows))
	case l.Window > namespace.MaxWindowSize:
		return &InputError{Field: limitField(i, "window"), Value: l.Window.String(), Allowed: fmt.Sprintf("must be at most %v", namespace.MaxWindowSize)}
	case penalty && p < l.Window:
		return bad("cannot be used with penalty (Kong's penalty counts in its two windows): drop one of them")
	}
	return nil
}

// effective returns the algorithm the limit counts with (Fixed included).
func (l *Limit) effective() Algorithm {
	if l.fixed() {
		return FixedWindow
	}
	return l.Algorithm
}
