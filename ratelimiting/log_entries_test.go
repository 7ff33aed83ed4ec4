package ratelimiting_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratesync/ratesync/ratelimiting"
)

// A sliding log whose entries reach the end of their array after a trim
// moves them back to its start, all of them: hits at 0, 1 and 10 ms, then
// at 1001 ms (the first two stop weighing) and 1002 ms, which finds the
// entries of 10 and 1001 ms at the array's end. The log then holds 10,
// 1001 and 1002 ms: a rate of 3.
func TestSlidingLogKeepsItsEntriesWhenTheyMove(t *testing.T) {
	clk := newClock(t0)
	in := newInstance(t, clk)
	mustNew(t, in, local("ns", time.Second))
	l := ratelimiting.Limit{Limit: 10, Window: time.Second, Algorithm: ratelimiting.SlidingLog}
	var d ratelimiting.Decision
	for _, at := range []time.Duration{0, 1, 10, 1001, 1002} {
		clk.Set(t0.Add(at * time.Millisecond))
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("Allow at %d ms panicked: %v", at, r)
				}
			}()
			var err error
			if d, err = in.Allow(context.Background(), "ns", "k", 1, l); err != nil {
				t.Fatal(err)
			}
		}()
	}
	if st := d.Limits[0]; !d.Allowed || st.Rate != 3 || st.Remaining != 7 || st.Reset != time.Second {
		t.Fatalf("the hit at 1002 ms: %+v, want allowed, rate 3, 7 remaining, reset 1s", d)
	}
}
