package rls

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
)

// newTestService returns a Service over yaml, on a local namespace, at
// 00:00:30 of a day.
func newTestService(t *testing.T, yaml string, observe func(Stats)) *Service {
	t.Helper()
	in := ratelimiting.NewInstance("t", ratelimiting.WithClock(func() time.Time { return time.Date(2030, 1, 1, 0, 0, 30, 0, time.UTC) }))
	t.Cleanup(func() { _ = in.Close(context.Background()) })
	if err := in.New(namespace.Config{Name: "rls", SyncRate: namespace.LocalOnly, WindowSizes: Units()}); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load([]File{{Name: "s.yaml", Data: []byte(yaml)}})
	if err != nil {
		t.Fatal(err)
	}
	return NewService(in, cfg, Options{Namespace: "rls", Observe: observe, Now: func() time.Time { return time.Date(2030, 1, 1, 0, 0, 30, 0, time.UTC) }})
}

// one is a descriptor of one entry.
func one(k, v string) *ratelimitv3.RateLimitDescriptor {
	return &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: k, Value: v}}}
}

// Upstream takes an unlimited rule out before it applies replaces: a
// named unlimited rule is never replaced and answers MaxUint32.
func TestAnUnlimitedRuleIsNeverReplaced(t *testing.T) {
	s := newTestService(t, `domain: d
descriptors:
  - key: a
    rate_limit: {unlimited: true, name: free}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 5, replaces: [{name: free}]}
`, nil)
	resp, err := s.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{one("a", "x"), one("b", "y")}})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Statuses[0].LimitRemaining; got != math.MaxUint32 {
		t.Errorf("replaced unlimited: limit_remaining %d, upstream %d", got, uint32(math.MaxUint32))
	}
}

// Upstream leaves unlimited descriptors out of quota mode's count.
func TestUnlimitedDescriptorsAreNotQuotaDescriptors(t *testing.T) {
	s := newTestService(t, `domain: d
descriptors:
  - key: a
    quota_mode: true
    rate_limit: {unlimited: true}
  - key: b
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 0}
`, nil)
	resp, err := s.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{one("a", "x"), one("b", "y")}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
		t.Errorf("overall %v, upstream OVER_LIMIT (the only counted quota descriptor is over)", resp.OverallCode)
	}
}

// detailed_metric names a descriptor as upstream does: domain.key_value for
// each entry, "key_" for an empty value; with share_threshold, the pattern.
func TestDetailedMetricKeysAreUpstreams(t *testing.T) {
	var got []Stats
	s := newTestService(t, `domain: d
descriptors:
  - key: k
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: p
    value: files*
    share_threshold: true
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5}
`, func(st Stats) { got = append(got, st) })
	for _, d := range []*ratelimitv3.RateLimitDescriptor{one("k", ""), one("p", "files/a"), one("p", "files/b")} {
		if _, err := s.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}}); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"d.k_", "d.p_files*", "d.p_files*"}
	for i, w := range want {
		if got[i].Key != w {
			t.Errorf("stats key %d: %q, upstream %q", i, got[i].Key, w)
		}
	}
}

// Hits no limit can take, and hostile descriptors, get answers, not
// errors or panics: an error lets Envoy's default failure_mode_deny:false
// admit the request.
func TestHugeHitsAndHostileDescriptorsAreAnswered(t *testing.T) {
	var got []Stats
	s := newTestService(t, `domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: e
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: sliding}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: token_bucket, burst: 8}
`, func(st Stats) { got = append(got, st) })
	for _, k := range []string{"k", "e", "b"} {
		for _, h := range []uint64{math.MaxUint64, 1 << 60, 9} {
			d := one(k, "v")
			d.HitsAddend = wrapperspb.UInt64(h)
			resp, err := s.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
			if err != nil || resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].LimitRemaining != 0 {
				t.Errorf("%s with %d hits: %v %v, want OVER_LIMIT", k, h, resp, err)
			}
		}
	}
	for _, st := range got {
		if st.OverLimit > st.TotalHits || st.NearLimit > st.TotalHits || st.OverLimit == 0 {
			t.Errorf("stats %+v: over limit must be the hits, at most", st)
		}
	}
	// The denied hits of the sliding rule were not counted: 5 still pass.
	for i := range 5 {
		if resp, _ := s.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{one("e", "v")}}); resp.OverallCode != pb.RateLimitResponse_OK {
			t.Fatalf("hit %d after the refused ones: %v", i+1, resp)
		}
	}
	resp, err := s.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{nil, {}, {Entries: []*ratelimitv3.RateLimitDescriptor_Entry{nil}}}})
	if err != nil || len(resp.Statuses) != 3 || resp.OverallCode != pb.RateLimitResponse_OK {
		t.Errorf("nil and empty descriptors: %v %v, want OK for each", resp, err)
	}
	_, err = s.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Limit: &ratelimitv3.RateLimitDescriptor_RateLimitOverride{Unit: 99}}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "descriptors[0].limit.unit") {
		t.Errorf("an override with an unknown unit: %v", err)
	}
}

// A denied hit of a rule with an algorithm is over the limit as a whole.
func TestDeniedHitsOfAnAlgorithmAreAllOverTheLimit(t *testing.T) {
	var got []Stats
	s := newTestService(t, `domain: d
descriptors:
  - key: e
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: fixed}
`, func(st Stats) { got = append(got, st) })
	for range 2 {
		d := one("e", "v")
		d.HitsAddend = wrapperspb.UInt64(3)
		if _, err := s.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}}); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 2 || got[0].WithinLimit != 3 || got[1].OverLimit != 3 || got[1].NearLimit != 0 {
		t.Errorf("stats %+v, want 3 within, then 3 over", got)
	}
}

// A descriptor whose key is longer than the bound is counted under a
// digest of it: it gets its answer, and the request's other descriptors
// theirs.
func TestLongKeysAreCountedUnderADigest(t *testing.T) {
	s := newTestService(t, `domain: d
descriptors:
  - key: global
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
`, nil)
	s.SetOptions(Options{MaxKeyBytes: 1024})
	long, other := strings.Repeat("a", 2000), strings.Repeat("a", 1999)+"b"
	ask := func(ds ...*ratelimitv3.RateLimitDescriptor) *pb.RateLimitResponse {
		resp, err := s.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "d", Descriptors: ds})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if resp := ask(one("global", ""), one("user", long)); resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT || resp.Statuses[1].Code != pb.RateLimitResponse_OK {
		t.Errorf("a long value beside a descriptor over its limit: %v", resp)
	}
	if resp := ask(one("user", long)); resp.Statuses[0].Code != pb.RateLimitResponse_OVER_LIMIT {
		t.Errorf("the long value's second hit: %v", resp)
	}
	if resp := ask(one("user", other)); resp.Statuses[0].Code != pb.RateLimitResponse_OK {
		t.Errorf("another long value shares the first's counter: %v", resp)
	}
	if k := digestKey("d", counterKey("d", []Entry{{"user", long}}, nil)); len(k) > 64 || strings.Contains(k, "=") {
		t.Errorf("digest key %q", k)
	}
}
