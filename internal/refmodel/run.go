package refmodel

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratesync/ratesync/ratelimiting"
)

// Limits converts the model's limits to the library's.
func Limits(ls []Limit) []ratelimiting.Limit {
	out := make([]ratelimiting.Limit, len(ls))
	for i, l := range ls {
		a := [...]ratelimiting.Algorithm{ratelimiting.SlidingWindow, ratelimiting.FixedWindow, ratelimiting.TokenBucket, ratelimiting.LeakyBucket}[l.Kind]
		out[i] = ratelimiting.Limit{Limit: l.Limit, Window: l.Window, Algorithm: a, Burst: l.Burst}
	}
	return out
}

// Same returns what differs between the library's decision and the model's,
// "" when nothing does. It also checks that the decision does not contradict
// itself: denied exactly when a limit denies, with a RetryAfter.
func Same(got ratelimiting.Decision, want Decision) string {
	if got.Allowed != want.Allowed || got.RetryAfter != want.RetryAfter {
		return fmt.Sprintf("allowed %v retry %v, want %v retry %v", got.Allowed, got.RetryAfter, want.Allowed, want.RetryAfter)
	}
	denies := false
	for i, st := range got.Limits {
		w := want.Limits[i]
		if st.Allowed != w.Allowed || st.Remaining != w.Remaining || st.RetryAfter != w.RetryAfter {
			return fmt.Sprintf("limit %d: allowed %v remaining %v retry %v, want %v %v %v", i, st.Allowed, st.Remaining, st.RetryAfter, w.Allowed, w.Remaining, w.RetryAfter)
		}
		denies = denies || !st.Allowed
	}
	if got.Allowed == denies || (!got.Allowed && got.RetryAfter <= 0) {
		return fmt.Sprintf("contradicts itself: %+v", got)
	}
	return ""
}

// Run runs steps for key against in's namespace ns and a fresh model, and
// fails at the first decision that differs. advance moves the instance's
// clock and returns it in Unix ms. sync, when set, runs after each step (a
// periodic namespace's push and fetch: with one hit per push, a bucket diff
// dated by its first hit is exact).
func Run(t testing.TB, in *ratelimiting.Instance, advance func(time.Duration) int64, ns, key string, steps []Step, sync func()) {
	t.Helper()
	m := New()
	for i, s := range steps {
		now := advance(s.Advance)
		got, err := in.Allow(context.Background(), ns, key, s.Cost, Limits(s.Limits)...)
		if err != nil {
			t.Fatalf("step %d: Allow: %v", i, err)
		}
		want := m.Decide(now, s.Cost, s.Limits)
		if diff := Same(got, want); diff != "" {
			t.Fatalf("step %d (cost %v, limits %+v, at %d): %s", i, s.Cost, s.Limits, now, diff)
		}
		if sync != nil {
			sync()
		}
	}
}
