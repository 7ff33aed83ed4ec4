package rls

import (
	"context"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
)

func TestCounterKeysNeverCollide(t *testing.T) {
	seen := map[string]string{}
	for _, tc := range []struct {
		domain  string
		entries []Entry
	}{
		{"a", []Entry{{"b", "c"}}},
		{"a|b=c", nil},
		{"a", []Entry{{"b", "c|d=e"}}},
		{"a", []Entry{{"b", "c"}, {"d", "e"}}},
		{"a", []Entry{{"b=c", ""}}},
		{"a", []Entry{{"b", "=c"}}},
		{"a", []Entry{{"b\\", "c"}}},
		{"a", []Entry{{"b", "\\c"}}},
	} {
		k := counterKey(tc.domain, tc.entries, nil)
		if prev, dup := seen[k]; dup {
			t.Errorf("%q %v and %s share the key %q", tc.domain, tc.entries, prev, k)
		}
		seen[k] = tc.domain
	}
	if got := counterKey("d", []Entry{{"path", "/files/x"}}, []string{"/files/*"}); got != "d|path=/files/*" {
		t.Errorf("a shared wildcard: %q", got)
	}
}

// The stats follow upstream's arithmetic: a request crossing the near
// threshold (80%) counts only its hits above it as near, one crossing the
// limit its hits above the limit as over and those between as near.
func TestStatsArithmetic(t *testing.T) {
	in := ratelimiting.NewInstance("t", ratelimiting.WithClock(func() time.Time { return time.Date(2030, 1, 1, 0, 0, 30, 0, time.UTC) }))
	t.Cleanup(func() { _ = in.Close(context.Background()) })
	if err := in.New(namespace.Config{Name: "rls", SyncRate: namespace.LocalOnly, WindowSizes: Units()}); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load([]File{{Name: "s.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 10}\n")}})
	if err != nil {
		t.Fatal(err)
	}
	var got []Stats
	s := NewService(in, cfg, Options{Namespace: "rls", Observe: func(st Stats) { got = append(got, st) }})
	ask := func(hits uint32) *pb.RateLimitResponse {
		resp, err := s.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "d", HitsAddend: hits,
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	ask(7) // 0 -> 7: within, none near
	ask(2) // 7 -> 9: 1 near (above 8)
	ask(3) // 9 -> 12: 2 over, 1 near
	ask(1) // 12 -> 13: 1 over
	want := []Stats{
		{TotalHits: 7, WithinLimit: 7},
		{TotalHits: 2, WithinLimit: 2, NearLimit: 1},
		{TotalHits: 3, OverLimit: 2, NearLimit: 1},
		{TotalHits: 1, OverLimit: 1},
	}
	for i, w := range want {
		w.Domain, w.Key, w.Rule = "d", "d.k", "d.k"
		if got[i] != w {
			t.Errorf("request %d: %+v, want %+v", i+1, got[i], w)
		}
	}
	if resp := ask(1); resp.Statuses[0].DurationUntilReset.GetSeconds() < 1 {
		t.Errorf("reset %v", resp.Statuses[0].DurationUntilReset)
	}
}

func TestHeadersAreStructuredFields(t *testing.T) {
	ds := []descriptor{
		{status: &pb.RateLimitResponse_DescriptorStatus{CurrentLimit: &pb.RateLimitResponse_RateLimit{Name: `a"b\c`, RequestsPerUnit: 10, Unit: pb.RateLimitResponse_RateLimit_MINUTE}, LimitRemaining: 4}},
		{status: &pb.RateLimitResponse_DescriptorStatus{}},
		{status: &pb.RateLimitResponse_DescriptorStatus{CurrentLimit: &pb.RateLimitResponse_RateLimit{RequestsPerUnit: 1, Unit: pb.RateLimitResponse_RateLimit_DAY}}},
	}
	ds[0].status.DurationUntilReset = wholeSeconds(1500 * time.Millisecond)
	h := headers(ds)
	if len(h) != 2 || h[0].Value != `"a\"b\\c";q=10;w=60, "descriptors[2]";q=1;w=86400` || h[1].Value != `"a\"b\\c";r=4;t=2, "descriptors[2]";r=0;t=0` {
		t.Errorf("headers %v", h)
	}
}
