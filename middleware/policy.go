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
// first), or nil:
//   - at least one limit, each a finite number > 0;
//   - a window limit (SlidingWindow, FixedWindow) over one of the
//     namespace's window sizes, without Burst;
//   - a bucket (TokenBucket, LeakyBucket) over a window of whole
//     milliseconds, at most namespace.MaxWindowSize (the namespace's window
//     sizes do not apply), with a Burst that is finite and not negative (0
//     means Limit) and lets the bucket refill from empty within
//     namespace.MaxWindowSize (Burst / Limit × Window), not Fixed, not with Penalty, on a namespace whose store
//     keeps buckets (strategy.BucketStore; a synchronous one also a
//     strategy.Checker); bucket limits of one algorithm and window share
//     one bucket, so they must have one Limit;
//   - AnchoredWindow and SlidingLog are not available;
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
		v.windowLimit(i, l, limitOK)
	case ratelimiting.TokenBucket, ratelimiting.LeakyBucket:
		v.bucketLimit(i, l, limitOK, penalty)
	case ratelimiting.AnchoredWindow, ratelimiting.SlidingLog:
		v.bad(field+".Algorithm", key+".type", l.Algorithm.String(), "not available: use sliding_window, fixed_window, token_bucket or leaky_bucket")
	default:
		v.bad(field+".Algorithm", key+".type", l.Algorithm.String(), "must be one of sliding_window, fixed_window, token_bucket, leaky_bucket")
	}
}

// windowLimit checks window limit i.
func (v *policyCheck) windowLimit(i int, l ratelimiting.Limit, limitOK bool) {
	field, key := fmt.Sprintf("Limits[%d]", i), fmt.Sprintf("limits[%d]", i)
	if l.Burst != 0 {
		alg := l.Algorithm
		if l.Fixed {
			alg = ratelimiting.FixedWindow
		}
		v.bad(field+".Burst", key+".burst", fmt.Sprint(l.Burst), "only applies to token_bucket and leaky_bucket, not "+alg.String())
	}
	if limitOK && v.costOK && v.cost > l.Limit {
		v.badCost(fmt.Sprintf("%s.limit (%v)", key, l.Limit))
	}
	if !containsWindow(v.ns.WindowSizes, l.Window) {
		v.bad(field+".Window", key+".window", FormatWindow(l.Window), fmt.Sprintf("must be one of the window sizes of namespace %q: %s", v.ns.Name, formatWindows(v.ns.WindowSizes)))
	}
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
	windowOK := l.Window > 0 && l.Window%time.Millisecond == 0 && l.Window <= namespace.MaxWindowSize
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
