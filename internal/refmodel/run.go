package refmodel

import (
	"context"
	"fmt"
	"math"
	"math/big"
	"testing"
	"time"

	"github.com/ratesync/ratesync/ratelimiting"
)

// algorithms are the library's algorithms of the model's kinds.
var algorithms = [...]ratelimiting.Algorithm{
	Sliding:   ratelimiting.SlidingWindow,
	Fixed:     ratelimiting.FixedWindow,
	Token:     ratelimiting.TokenBucket,
	Leaky:     ratelimiting.LeakyBucket,
	Anchored:  ratelimiting.AnchoredWindow,
	Log:       ratelimiting.SlidingLog,
	Precision: ratelimiting.SlidingWindow,
}

// Limits converts the model's limits to the library's.
func Limits(ls []Limit) []ratelimiting.Limit {
	out := make([]ratelimiting.Limit, len(ls))
	for i, l := range ls {
		out[i] = ratelimiting.Limit{Limit: l.Limit, Window: l.Window, Algorithm: algorithms[l.Kind], Burst: l.Burst, Precision: l.Precision}
	}
	return out
}

// sameRate reports whether the library's rate got is the model's exact
// rate want. A sliding rate is cur + prev * weight with the weight a
// float64 quotient, three roundings: it must be within 2^-50 of want,
// relatively. Every other rate is one correctly rounded operation on exact
// operands (a bucket's level over its window) or exact: it must be want
// rounded to the nearest float64.
func sameRate(k Kind, got float64, want *big.Rat) bool {
	w, _ := want.Float64()
	if k == Sliding || k == Precision {
		return math.Abs(got-w) <= math.Abs(w)*0x1p-50
	}
	return got == w
}

// Same returns what differs between the library's decision and the model's,
// "" when nothing does: every field of the decision and of each limit's
// state. It also checks that the decision does not contradict itself:
// denied exactly when a limit denies, with a RetryAfter.
func Same(got ratelimiting.Decision, want Decision) string {
	if got.Allowed != want.Allowed || got.RetryAfter != want.RetryAfter {
		return fmt.Sprintf("allowed %v retry %v, want %v retry %v", got.Allowed, got.RetryAfter, want.Allowed, want.RetryAfter)
	}
	if len(got.Limits) != len(want.Limits) {
		return fmt.Sprintf("%d limit states, want %d", len(got.Limits), len(want.Limits))
	}
	denies := false
	for i, st := range got.Limits {
		w := want.Limits[i]
		wl := Limits([]Limit{w.Limit})[0]
		wr, _ := w.Rate.Float64()
		if st.Limit != wl || st.Allowed != w.Allowed || !sameRate(w.Limit.Kind, st.Rate, w.Rate) || st.Remaining != w.Remaining || st.Reset != w.Reset || st.RetryAfter != w.RetryAfter {
			return fmt.Sprintf("limit %d: %+v,\n\twant allowed %v rate %v (%v) remaining %v reset %v retry %v", i, st, w.Allowed, wr, w.Rate.RatString(), w.Remaining, w.Reset, w.RetryAfter)
		}
		denies = denies || !st.Allowed
	}
	if got.Allowed == denies || (!got.Allowed && got.RetryAfter <= 0) {
		return fmt.Sprintf("contradicts itself: %+v", got)
	}
	return ""
}

// Run runs steps for key against in's namespace ns and a fresh model, and
// fails at the first decision that differs. A step of one limit is asked
// with AllowOne every other time, else with Allow. advance moves the
// instance's clock and returns it in Unix ms. sync, when set, runs after each step (a
// periodic namespace's push and fetch: with one hit per push, a bucket diff
// dated by its first hit is exact).
func Run(t testing.TB, in *ratelimiting.Instance, advance func(time.Duration) int64, ns, key string, steps []Step, sync func()) {
	t.Helper()
	m := New()
	var prev *Decision
	for i, s := range steps {
		now := advance(s.Move(prev))
		got, method, err := allow(in, ns, key, s.Cost, Limits(s.Limits), i%2 == 1)
		if err != nil {
			t.Fatalf("step %d: %s: %v", i, method, err)
		}
		want := m.Decide(now, s.Cost, s.Limits)
		prev = &want
		if diff := Same(got, want); diff != "" {
			t.Fatalf("step %d (cost %v, limits %+v, at %d): %s", i, s.Cost, s.Limits, now, diff)
		}
		if sync != nil {
			sync()
		}
	}
}

// allow asks in for a decision: with AllowOne when one is set and there is
// one limit, else with Allow; it returns the method's name too, and a
// panic of the caller's goroutine as an error.
func allow(in *ratelimiting.Instance, ns, key string, cost float64, limits []ratelimiting.Limit, one bool) (d ratelimiting.Decision, method string, err error) {
	method = "Allow"
	if one && len(limits) == 1 {
		method = "AllowOne"
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	if method == "Allow" {
		d, err = in.Allow(context.Background(), ns, key, cost, limits...)
		return d, method, err
	}
	st, err := in.AllowOne(context.Background(), ns, key, cost, limits[0])
	d = ratelimiting.Decision{Allowed: st.Allowed, RetryAfter: st.RetryAfter, Limits: []ratelimiting.LimitState{st}}
	return d, method, err
}
