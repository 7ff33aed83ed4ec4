package rls

import (
	"context"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
	"github.com/ratesync/ratesync/strategy/memory"
)

// timeStore is a memory store whose clock reads the node's plus skew.
type timeStore struct {
	*memory.Store
	now  func() time.Time
	skew time.Duration
}

func (s timeStore) Time(context.Context) (time.Time, error) { return s.now().Add(s.skew), nil }

// duration_until_reset follows the namespace's clock: on the store's clock
// (1.5 s behind this node's here), the store's window, not the node's.
func TestResetFollowsTheNamespaceClock(t *testing.T) {
	node := func() time.Time { return time.Date(2030, 1, 1, 0, 0, 31, 700_000_000, time.UTC) } // the store reads 00:00:30.2
	for _, tt := range []struct {
		clock namespace.Clock
		want  int64 // seconds until the minute's reset
	}{
		{namespace.StoreClock, 30},
		{namespace.NodeClock, 29},
	} {
		t.Run(tt.clock.String(), func(t *testing.T) {
			in := ratelimiting.NewInstance("t", ratelimiting.WithClock(node))
			t.Cleanup(func() { _ = in.Close(context.Background()) })
			store := timeStore{Store: memory.New(), now: node, skew: -1500 * time.Millisecond}
			if err := in.New(namespace.Config{Name: "rls", SyncRate: time.Hour, Strategy: store, WindowSizes: Units(), Clock: tt.clock}); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for !in.Stats()[0].Sync.ClockMeasured {
				if time.Now().After(deadline) {
					t.Fatal("the store's clock was not measured within 10s")
				}
				time.Sleep(2 * time.Millisecond)
			}
			cfg, err := Load([]File{{Name: "s.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 10}\n")}})
			if err != nil {
				t.Fatal(err)
			}
			s := NewService(in, cfg, Options{Namespace: "rls"})
			resp, err := s.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "d",
				Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.Statuses[0].DurationUntilReset.GetSeconds(); got != tt.want {
				t.Fatalf("duration_until_reset %ds, want %ds", got, tt.want)
			}
		})
	}
}
