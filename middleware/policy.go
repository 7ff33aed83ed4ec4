package middleware

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
	"github.com/ratesync/ratesync/strategy"
)

// PolicyError is a Policy that Validate (and so New) rejects: it names the
// field, the value given and what is allowed.
type PolicyError struct {
	Policy  string
	Field   string // the Go field: "Limits[1].Window"
	Key     string // the same field as configuration files name it: "limits[1].window"
	Value   string
	Allowed string
}

func (e *PolicyError) Error() string {
	return fmt.Sprintf("middleware: policy %q: %s %s: %s", e.Policy, e.Key, e.Value, e.Allowed)
}

// Validate reports every field of p that cannot work on the namespace ns,
// each a *PolicyError, joined with errors.Join (errors.As finds the
// first), or nil. The rules are ratelimiting's, which Check applies to
// each request, stated here for the whole policy at once:
//   - at least one limit, each a finite number > 0;
//   - a window limit (SlidingWindow, FixedWindow) over one of the
//     namespace's window sizes, without Burst;
//   - a SlidingWindow with Precision: Precision whole milliseconds that
//     divide Window into at most ratelimiting.MaxPrecisionWindows
//     sub-windows, and one of the namespace's window sizes (Window then
//     need not be one, and is at most namespace.MaxWindowSize); not with
//     Penalty. Precision 0, or equal to Window, is Kong's two windows; any
//     other algorithm has none;
//   - a bucket (TokenBucket, LeakyBucket) over a window of whole
//     milliseconds, at most namespace.MaxWindowSize (the namespace's window
//     sizes do not apply), with a Burst that is finite and not negative (0
//     means Limit) and lets the bucket refill from empty within
//     namespace.MaxWindowSize (Burst / Limit × Window), not Fixed, not with
//     Penalty, on a namespace whose store keeps buckets
//     (strategy.BucketStore; a synchronous one also a strategy.Checker);
//     bucket limits of one algorithm and window share one bucket, so they
//     must have one Limit;
//   - an AnchoredWindow or SlidingLog over a window as a bucket's, without
//     Burst, not Fixed, not with Penalty, in a local-only namespace or a
//     synchronous one whose store keeps and decides them (a namespace that
//     syncs periodically cannot hold them); a SlidingLog's Limit at most
//     ratelimiting.MaxLogLimit, and the cost at least Limit /
//     ratelimiting.MaxLogLimit;
//   - a cost (0 means 1) that is finite, not negative, within every window
//     limit and every bucket's capacity;
//   - StoreDownDeny only on a namespace with a store.
//
// It does not check that p.Namespace names ns.
func (p Policy) Validate(ns namespace.Config) error {
	v := policyCheck{name: p.Name, ns: ns, cost: p.Cost}
	if v.name == "" {
		v.name = ns.Name
	}
	if v.cost == 0 {
		v.cost = 1
	}
	v.costOK = finite(v.cost) && v.cost >= 0
	if len(p.Limits) == 0 {
		v.bad("Limits", "limits", "[]", "at least one limit is required")
	}
	if !v.costOK {
		v.bad("Cost", "cost", fmt.Sprint(p.Cost), "must be a finite number > 0")
	}
	if p.StoreDown == StoreDownDeny && ns.Local() {
		v.bad("StoreDown", "on_store_down", "deny", fmt.Sprintf("namespace %q has no store (it is local only)", ns.Name))
	}
	for i, l := range p.Limits {
		v.limit(i, l, p.Penalty)
	}
	v.sharedBuckets(p.Limits)
	return errors.Join(v.errs...)
}

// policyCheck is Validate's state: the errors found so far.
type policyCheck struct {
	name    string
	ns      namespace.Config
	cost    float64 // the cost in force: 1 for 0
	costOK  bool    // false once the cost is reported: one error about it
	penalty bool    // Penalty reported
	errs    []error
}

func (v *policyCheck) bad(field, key, value, allowed string) {
	v.errs = append(v.errs, &PolicyError{Policy: v.name, Field: field, Key: key, Value: value, Allowed: allowed})
}

// badCost reports a cost above most, the field of a limit and its value.
func (v *policyCheck) badCost(most string) {
	v.bad("Cost", "cost", fmt.Sprint(v.cost), fmt.Sprintf("must be at most %s: a larger cost can never pass", most))
	v.costOK = false
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// limit checks limit i.
func (v *policyCheck) limit(i int, l ratelimiting.Limit, penalty bool) {
	field, key := fmt.Sprintf("Limits[%d]", i), fmt.Sprintf("limits[%d]", i)
	limitOK := finite(l.Limit) && l.Limit > 0
	if !limitOK {
		v.bad(field+".Limit", key+".limit", fmt.Sprint(l.Limit), "must be a finite number > 0")
	}
	switch l.Algorithm {
	case ratelimiting.SlidingWindow, ratelimiting.FixedWindow:
		v.windowLimit(i, l, limitOK, penalty)
	case ratelimiting.TokenBucket, ratelimiting.LeakyBucket:
		v.bucketLimit(i, l, limitOK, penalty)
	case ratelimiting.AnchoredWindow, ratelimiting.SlidingLog:
		v.keyedLimit(i, l, limitOK, penalty)
	default:
		v.bad(field+".Algorithm", key+".type", l.Algorithm.String(), "must be one of "+algorithmNames())
	}
	if l.Precision != 0 && (l.Algorithm != ratelimiting.SlidingWindow || l.Fixed) {
		v.bad(field+".Precision", key+".precision", FormatWindow(l.Precision), "only applies to sliding_window, not "+effective(l).String())
	}
}

// algorithmNames lists the algorithms as the library names them.
func algorithmNames() string {
	var names []string
	for a := ratelimiting.SlidingWindow; a <= ratelimiting.LeakyBucket; a++ {
		names = append(names, a.String())
	}
	return strings.Join(names, ", ")
}

// effective returns the algorithm l counts with: FixedWindow for a
// SlidingWindow with Fixed.
func effective(l ratelimiting.Limit) ratelimiting.Algorithm {
	if l.Fixed && l.Algorithm == ratelimiting.SlidingWindow {
		return ratelimiting.FixedWindow
	}
	return l.Algorithm
}

// windowLimit checks window limit i.
func (v *policyCheck) windowLimit(i int, l ratelimiting.Limit, limitOK, penalty bool) {
	field, key := fmt.Sprintf("Limits[%d]", i), fmt.Sprintf("limits[%d]", i)
	if l.Burst != 0 {
		v.bad(field+".Burst", key+".burst", fmt.Sprint(l.Burst), "only applies to token_bucket and leaky_bucket, not "+effective(l).String())
	}
	if limitOK && v.costOK && v.cost > l.Limit {
		v.badCost(fmt.Sprintf("%s.limit (%v)", key, l.Limit))
	}
	size, sizeField, sizeKey := l.Window, field+".Window", key+".window"
	if l.Precision != 0 && l.Algorithm == ratelimiting.SlidingWindow && !l.Fixed {
		if !v.precision(i, l, penalty) {
			return
		}
		if l.Precision < l.Window { // the sub-windows are the namespace's windows, not the window itself
			size, sizeField, sizeKey = l.Precision, field+".Precision", key+".precision"
		}
	}
	if !containsWindow(v.ns.WindowSizes, size) {
		v.bad(sizeField, sizeKey, FormatWindow(size), fmt.Sprintf("must be one of the window sizes of namespace %q: %s", v.ns.Name, formatWindows(v.ns.WindowSizes)))
	}
}

// precision checks the Precision of sliding window limit i, apart from
// being one of the namespace's window sizes, and reports whether it is
// valid.
func (v *policyCheck) precision(i int, l ratelimiting.Limit, penalty bool) bool {
	field, key := fmt.Sprintf("Limits[%d]", i), fmt.Sprintf("limits[%d]", i)
	p, w := l.Precision, l.Window
	bad := func(allowed string) bool {
		v.bad(field+".Precision", key+".precision", FormatWindow(p), allowed)
		return false
	}
	switch {
	case p < 0 || p%time.Millisecond != 0:
		return bad("must be whole milliseconds > 0 (0 means the window)")
	case w <= 0 || w%p != 0:
		return bad(fmt.Sprintf("must divide %s.window (%s)", key, FormatWindow(w)))
	case w/p > ratelimiting.MaxPrecisionWindows:
		return bad(fmt.Sprintf("must be at least %s.window / %d (%s): a window slides over at most %d sub-windows",
			key, ratelimiting.MaxPrecisionWindows, FormatWindow(w/ratelimiting.MaxPrecisionWindows), ratelimiting.MaxPrecisionWindows))
	case w > namespace.MaxWindowSize:
		v.bad(field+".Window", key+".window", FormatWindow(w), "must be at most "+FormatWindow(namespace.MaxWindowSize))
		return false
	case penalty && p < w:
		return bad("cannot be used with penalty (Kong's penalty counts in its two windows): drop one of them")
	}
	return true
}

// bucketLimit checks bucket limit i.
func (v *policyCheck) bucketLimit(i int, l ratelimiting.Limit, limitOK, penalty bool) {
	field, key := fmt.Sprintf("Limits[%d]", i), fmt.Sprintf("limits[%d]", i)
	if l.Fixed {
		v.bad(field+".Fixed", key+".fixed", "true", "only applies to sliding_window and fixed_window, not "+l.Algorithm.String())
	}
	burstOK := finite(l.Burst) && l.Burst >= 0
	if !burstOK {
		v.bad(field+".Burst", key+".burst", fmt.Sprint(l.Burst), "must be a finite number >= 0 (0 means the limit)")
	}
	windowOK := wholeWindow(l.Window)
	if !windowOK {
		v.bad(field+".Window", key+".window", FormatWindow(l.Window), fmt.Sprintf("must be whole milliseconds, > 0 and at most %s", FormatWindow(namespace.MaxWindowSize)))
	}
	capacity := l.Burst
	if capacity == 0 {
		capacity = l.Limit
	}
	if fill := capacity / l.Limit * float64(l.Window); burstOK && limitOK && windowOK && !(fill <= float64(namespace.MaxWindowSize)) {
		v.bad(field+".Burst", key+".burst", fmt.Sprint(l.Burst), fmt.Sprintf("must let the bucket refill from empty within %s: burst / limit × window is longer", FormatWindow(namespace.MaxWindowSize)))
	}
	switch {
	case !v.costOK:
	case l.Burst > 0 && burstOK && v.cost > l.Burst:
		v.badCost(fmt.Sprintf("%s.burst (%v), the bucket's capacity", key, l.Burst))
	case l.Burst == 0 && limitOK && v.cost > l.Limit:
		v.badCost(fmt.Sprintf("%s.limit (%v), the bucket's capacity when burst is 0", key, l.Limit))
	}
	if penalty && !v.penalty {
		v.penalty = true
		v.bad("Penalty", "penalty", "true", fmt.Sprintf("%s is a %s, and a bucket cannot count denied requests: drop penalty, or use a window type", key, l.Algorithm))
	}
	if err := bucketsAllowed(v.ns); err != "" {
		v.bad(field+".Algorithm", key+".type", l.Algorithm.String(), err)
	}
}

// keyedLimit checks anchored window or sliding log limit i.
func (v *policyCheck) keyedLimit(i int, l ratelimiting.Limit, limitOK, penalty bool) {
	field, key := fmt.Sprintf("Limits[%d]", i), fmt.Sprintf("limits[%d]", i)
	if l.Fixed {
		v.bad(field+".Fixed", key+".fixed", "true", "only applies to sliding_window and fixed_window, not "+l.Algorithm.String())
	}
	if l.Burst != 0 {
		v.bad(field+".Burst", key+".burst", fmt.Sprint(l.Burst), "only applies to token_bucket and leaky_bucket, not "+l.Algorithm.String())
	}
	if !wholeWindow(l.Window) {
		v.bad(field+".Window", key+".window", FormatWindow(l.Window), fmt.Sprintf("must be whole milliseconds, > 0 and at most %s", FormatWindow(namespace.MaxWindowSize)))
	}
	logLimitOK := limitOK
	if l.Algorithm == ratelimiting.SlidingLog && limitOK && l.Limit > ratelimiting.MaxLogLimit {
		logLimitOK = false
		v.bad(field+".Limit", key+".limit", fmt.Sprint(l.Limit), fmt.Sprintf("must be at most %d for sliding_log (a log keeps an entry per admitted millisecond): use sliding_window with precision%s",
			ratelimiting.MaxLogLimit, v.suggestPrecision(l.Window)))
	}
	switch {
	case !v.costOK || !logLimitOK:
	case v.cost > l.Limit:
		v.badCost(fmt.Sprintf("%s.limit (%v)", key, l.Limit))
	case l.Algorithm == ratelimiting.SlidingLog && v.cost < l.Limit/ratelimiting.MaxLogLimit:
		v.bad("Cost", "cost", fmt.Sprint(v.cost), fmt.Sprintf("must be at least %s.limit / %d (%v) for sliding_log: a log holds at most %d entries per key; use sliding_window with precision for finer costs",
			key, ratelimiting.MaxLogLimit, l.Limit/ratelimiting.MaxLogLimit, ratelimiting.MaxLogLimit))
		v.costOK = false
	}
	if penalty && !v.penalty {
		v.penalty = true
		v.bad("Penalty", "penalty", "true", fmt.Sprintf("%s is %s, and only sliding_window and fixed_window can count denied requests: drop penalty, or use one of them", key, l.Algorithm))
	}
	if err := keyedAllowed(v.ns, l.Algorithm); err != "" {
		v.bad(field+".Algorithm", key+".type", l.Algorithm.String(), err)
	}
}

// wholeWindow reports whether w is a window a bucket, an anchored window
// or a sliding log may have: whole milliseconds, > 0, at most
// namespace.MaxWindowSize.
func wholeWindow(w time.Duration) bool {
	return w > 0 && w%time.Millisecond == 0 && w <= namespace.MaxWindowSize
}

// suggestPrecision returns ", e.g. precision P" for the finest of the
// namespace's window sizes that could be the precision of a sliding window
// over w, or "" when none could.
func (v *policyCheck) suggestPrecision(w time.Duration) string {
	best := time.Duration(0)
	for _, p := range v.ns.WindowSizes {
		if p > 0 && p < w && w%p == 0 && w/p <= ratelimiting.MaxPrecisionWindows && (best == 0 || p < best) {
			best = p
		}
	}
	if best == 0 {
		return ""
	}
	return ", e.g. precision " + FormatWindow(best)
}

// keyedAllowed says why the namespace ns cannot hold anchored windows or
// sliding logs of algorithm a, or "": they are decided as a whole per key,
// so not in a namespace that syncs periodically unless it is leased, and a
// namespace that syncs needs a store that keeps and decides them.
func keyedAllowed(ns namespace.Config, a ratelimiting.Algorithm) string {
	if ns.Local() {
		return ""
	}
	if ns.SyncRate > 0 && !ns.Leases {
		instead := "sliding_window with precision"
		if a == ratelimiting.AnchoredWindow {
			instead = "fixed_window"
		}
		return fmt.Sprintf("%s is decided as a whole per key, locally or in the store, and cannot sync periodically (namespace %q syncs every %s): use %s, or a synchronous or local-only namespace",
			a, ns.Name, FormatWindow(ns.SyncRate), instead)
	}
	_, keeps := ns.Strategy.(strategy.BucketStore)
	_, decides := ns.Strategy.(strategy.Checker)
	if ns.Strategy != nil && (!keeps || !decides) {
		return fmt.Sprintf("%s needs a store that keeps and decides it (memory, Redis, PostgreSQL); the store of namespace %q does not", a, ns.Name)
	}
	return ""
}

// bucketsAllowed says why the namespace ns cannot hold buckets, or "".
func bucketsAllowed(ns namespace.Config) string {
	if ns.Local() || ns.Strategy == nil {
		return ""
	}
	if _, ok := ns.Strategy.(strategy.BucketStore); !ok {
		return fmt.Sprintf("the store of namespace %q does not keep buckets", ns.Name)
	}
	if _, ok := ns.Strategy.(strategy.Checker); !ok && ns.SyncRate == 0 {
		return fmt.Sprintf("namespace %q is synchronous, and its store does not decide checks", ns.Name)
	}
	return ""
}

// sharedBuckets reports bucket limits of one algorithm and window (one
// bucket) with different Limits: a bucket has one rate.
func (v *policyCheck) sharedBuckets(limits []ratelimiting.Limit) {
	for j, l := range limits {
		if !bucket(l) {
			continue
		}
		for i, o := range limits[:j] {
			if o.Algorithm == l.Algorithm && o.Window == l.Window && o.Limit != l.Limit {
				v.bad(fmt.Sprintf("Limits[%d].Limit", j), fmt.Sprintf("limits[%d].limit", j), fmt.Sprint(l.Limit),
					fmt.Sprintf("limits[%d] is the same %s with limit %v: bucket limits of one type and window share one bucket, which has one rate", i, l.Algorithm, o.Limit))
				break
			}
		}
	}
}

func containsWindow(sizes []time.Duration, w time.Duration) bool {
	for _, s := range sizes {
		if s == w {
			return true
		}
	}
	return false
}

func formatWindows(sizes []time.Duration) string {
	s := make([]string, len(sizes))
	for i, d := range sizes {
		s[i] = FormatWindow(d)
	}
	return strings.Join(s, ", ")
}
