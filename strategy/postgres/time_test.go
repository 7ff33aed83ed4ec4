package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/postgres"
)

// Time is the server's clock (clock_timestamp()): the test's server runs on
// this machine, so it reads between the node's clock before and after the
// call, and each call reads it anew (not a transaction's start).
func TestTimeIsTheServers(t *testing.T) {
	st, _ := newStore(t, postgres.Config{})
	var s strategy.Clock = st
	var last time.Time
	for range 3 {
		before := time.Now()
		got, err := s.Time(context.Background())
		after := time.Now()
		if err != nil {
			t.Fatalf("Time: %v", err)
		}
		const slack = 100 * time.Millisecond // clock adjustments
		if got.Before(before.Add(-slack)) || got.After(after.Add(slack)) {
			t.Fatalf("Time = %v, not between %v and %v", got, before, after)
		}
		if !got.After(last) {
			t.Fatalf("Time = %v after %v: the server's clock did not move", got, last)
		}
		last = got
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Time(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Time with a canceled context = %v, want context.Canceled", err)
	}
}
