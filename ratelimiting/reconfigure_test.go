package ratelimiting_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/strategytest"
	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
	"github.com/ratesync/ratesync/strategy/memory"
)

// A rate change while the synchronous worker waits for the reply of a
// store call the store has already applied lets that call finish: the
// request is counted once, by the store, not again on the node; and the
// store is not taken for down.
func TestRateChangeDuringAStoreCallCountsOnce(t *testing.T) {
	limit := ratelimiting.Limit{Limit: 10, Window: time.Minute}
	for _, tc := range []struct {
		name   string
		method string
		call   func(in *ratelimiting.Instance) (float64, error)
	}{
		{"check", "CheckAndCount", func(in *ratelimiting.Instance) (float64, error) {
			d, err := in.Allow(context.Background(), "ns", "k", 1, limit)
			if err == nil && !d.Allowed {
				return 0, nil
			}
			return d.Limits[0].Rate, err
		}},
		{"hit", "PushAndCount", func(in *ratelimiting.Instance) (float64, error) {
			w, err := in.Increment(context.Background(), "ns", "k", time.Minute, 1)
			return w.Current, err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock(t0)
			store := strategytest.NewLateReply(memory.New(), 300*time.Millisecond)
			in := newInstance(t, clk, ratelimiting.WithSyncTimeout(0, 5*time.Second))
			mustNew(t, in, synced("ns", namespace.Synchronous, store, time.Minute))

			type answer struct {
				rate float64
				err  error
			}
			done := make(chan answer, 1)
			go func() {
				rate, err := tc.call(in)
				done <- answer{rate, err}
			}()
			if m := <-store.Applied(); m != tc.method {
				t.Fatalf("store call %s, want %s", m, tc.method)
			}
			// The reply is on its way: change the rate now.
			if err := in.Update(synced("ns", manual, store, time.Minute)); err != nil {
				t.Fatal(err)
			}
			a := <-done
			if a.err != nil || a.rate != 1 {
				t.Fatalf("answer: rate %v, err %v; want 1, nil", a.rate, a.err)
			}
			syncNS(t, in, "ns")
			if got := stored(t, store, "ns", "k", t0, time.Minute); got != 1 {
				t.Fatalf("store holds %v for one request, want 1", got)
			}
			st := in.Stats()[0].Sync
			if !st.StoreUp || st.LocalHits != 0 || st.PushErrors != 0 {
				t.Fatalf("stats %+v: want the store up, no local hit, no failed call", st)
			}
		})
	}
}
