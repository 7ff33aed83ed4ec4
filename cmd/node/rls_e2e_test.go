package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratesync/ratesync/internal/node/config"
	"github.com/ratesync/ratesync/internal/testenv"
)

// The compatibility cases: envoyproxy/ratelimit's documented behaviour,
// written as configurations and request sequences of our own, asked of the
// node process over gRPC with a synchronous Redis namespace.

// compatConfig is one domain with a rule for each behaviour. Every limit
// is per hour, so that no case crosses a window during the test.
const compatConfig = `
domain: compat
descriptors:
  - key: basic
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: small
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: large
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: free
    rate_limit: {unlimited: true}
  - key: trial
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 5, name: per-tenant}
    descriptors:
      - key: method
        value: GET
        rate_limit: {unit: hour, requests_per_unit: 4}
  - key: premium
    rate_limit:
      unit: hour
      requests_per_unit: 100
      name: premium
      replaces: [{name: per-tenant}]
  - key: path
    value: /api/*
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: path
    value: /files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: quota_a
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: quota_b
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 2}
`

// rlsNode is a node process with an rls section, and a gRPC client of it.
type rlsNode struct {
	*process
	client pb.RateLimitServiceClient
	conn   *grpc.ClientConn
}

var rlsListeningRE = regexp.MustCompile(`msg="rls listening" address=(\S+)`)

// startRLSNode starts bin with the node config yaml (its rls.config
// relative to dir) and connects a gRPC client.
func startRLSNode(t *testing.T, bin, dir, yaml string, env ...string) *rlsNode {
	t.Helper()
	cfgFile := filepath.Join(dir, fmt.Sprintf("node-%d.yaml", time.Now().UnixNano()))
	if err := os.WriteFile(cfgFile, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startNode(t, bin, env, "-config", cfgFile, "-listen", "127.0.0.1:0", "-rls-listen", "127.0.0.1:0")
	var addr string
	waitFor(t, 10*time.Second, "the rls listening line", func() bool {
		if m := rlsListeningRE.FindStringSubmatch(p.log()); m != nil {
			addr = m[1]
			return true
		}
		return false
	})
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &rlsNode{process: p, client: pb.NewRateLimitServiceClient(conn), conn: conn}
}

// desc is a descriptor of key=value pairs.
func desc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// ask sends one request of descriptors in domain.
func (n *rlsNode) ask(t *testing.T, domain string, ds ...*ratelimitv3.RateLimitDescriptor) *pb.RateLimitResponse {
	t.Helper()
	return n.askReq(t, &pb.RateLimitRequest{Domain: domain, Descriptors: ds})
}

func (n *rlsNode) askReq(t *testing.T, req *pb.RateLimitRequest) *pb.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := n.client.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

// want is a descriptor status: code, limit (0: none), remaining; reset is
// checked against the hour whenever there is a limit.
type want struct {
	code      pb.RateLimitResponse_Code
	limit     uint32
	remaining uint32
	name      string
}

var (
	ok   = pb.RateLimitResponse_OK
	over = pb.RateLimitResponse_OVER_LIMIT
)

func checkStatus(t *testing.T, what string, st *pb.RateLimitResponse_DescriptorStatus, w want) {
	t.Helper()
	got := want{code: st.GetCode(), remaining: st.GetLimitRemaining()}
	if cl := st.GetCurrentLimit(); cl != nil {
		got.limit, got.name = cl.GetRequestsPerUnit(), cl.GetName()
		if cl.GetUnit() != pb.RateLimitResponse_RateLimit_HOUR {
			t.Errorf("%s: unit %v, want HOUR", what, cl.GetUnit())
		}
		now := time.Now().Unix()
		if r := st.GetDurationUntilReset(); r.GetNanos() != 0 || r.GetSeconds() < 1 || r.GetSeconds() > 3600 || math.Abs(float64(r.GetSeconds()-(3600-now%3600))) > 1 {
			t.Errorf("%s: duration_until_reset %v, want the whole seconds to the end of the hour (%ds)", what, r.AsDuration(), 3600-now%3600)
		}
	} else if st.GetDurationUntilReset() != nil {
		t.Errorf("%s: duration_until_reset %v without a limit", what, st.GetDurationUntilReset().AsDuration())
	}
	if got != w {
		t.Errorf("%s: %+v, want %+v", what, got, w)
	}
}

// awayFromHourEnd waits out the last seconds of an hour, so that a case
// counts in one window.
func awayFromHourEnd(t *testing.T) {
	if left := 3600 - time.Now().Unix()%3600; left < 30 {
		t.Logf("waiting %ds for the next hour", left)
		time.Sleep(time.Duration(left+1) * time.Second)
	}
}

func TestRLSCompatibility(t *testing.T) {
	bin := buildNode(t)
	for _, store := range []string{config.StrategyRedis, config.StrategyPostgres} {
		t.Run(store, func(t *testing.T) { testRLSCompatibility(t, bin, store) })
	}
}

func testRLSCompatibility(t *testing.T, bin, store string) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "rls"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rls", "compat.yaml"), []byte(compatConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	var node, env string
	switch store {
	case config.StrategyRedis:
		r := testenv.NewRedis(t)
		node = fmt.Sprintf("rls:\n  config: rls\n  strategy: redis\n  sync_rate: 0s\n  redis: {prefix: %s}\n", r.Prefix)
		env = config.EnvRedisURL + "=" + r.URL
	case config.StrategyPostgres:
		node = "rls:\n  config: rls\n  strategy: postgres\n  sync_rate: 0s\n"
		env = config.EnvPostgresURL + "=" + testenv.NewPostgres(t).URL
	}
	a := startRLSNode(t, bin, dir, node, env)
	b := startRLSNode(t, bin, dir, node, env)
	awayFromHourEnd(t)

	t.Run("a limit counts across nodes and answers OVER_LIMIT past it", func(t *testing.T) {
		for i, n := range []*rlsNode{a, b, a} {
			resp := n.ask(t, "compat", desc("basic", "k1"))
			if resp.OverallCode != ok {
				t.Fatalf("request %d: %v", i+1, resp.OverallCode)
			}
			checkStatus(t, fmt.Sprintf("request %d", i+1), resp.Statuses[0], want{ok, 3, uint32(2 - i), ""})
		}
		resp := b.ask(t, "compat", desc("basic", "k1"))
		if resp.OverallCode != over {
			t.Fatalf("request 4: %v", resp.OverallCode)
		}
		checkStatus(t, "request 4", resp.Statuses[0], want{over, 3, 0, ""})
	})

	t.Run("counts grow past the limit, and a descriptor under its limit keeps counting", func(t *testing.T) {
		for i := range 3 {
			resp := a.ask(t, "compat", desc("small", "s"), desc("large", "s"))
			checkStatus(t, fmt.Sprintf("request %d small", i+1), resp.Statuses[0], want{map[bool]pb.RateLimitResponse_Code{true: over, false: ok}[i == 2], 2, uint32(max(0, 1-i)), ""})
			checkStatus(t, fmt.Sprintf("request %d large", i+1), resp.Statuses[1], want{ok, 10, uint32(9 - i), ""})
			if wantCode := map[bool]pb.RateLimitResponse_Code{true: over, false: ok}[i == 2]; resp.OverallCode != wantCode {
				t.Errorf("request %d: overall %v, want %v", i+1, resp.OverallCode, wantCode)
			}
		}
		// A check-only descriptor (hits_addend 0) past the limit: 3 + 0 > 2.
		d := desc("small", "s")
		d.HitsAddend = wrapperspb.UInt64(0)
		resp := b.ask(t, "compat", d)
		checkStatus(t, "check only, past the limit", resp.Statuses[0], want{over, 2, 0, ""})
		// Denied requests were counted: a fourth hit makes 4.
		resp = b.ask(t, "compat", desc("large", "s"))
		checkStatus(t, "large after", resp.Statuses[0], want{ok, 10, 6, ""})
	})

	t.Run("hits_addend", func(t *testing.T) {
		resp := a.askReq(t, &pb.RateLimitRequest{Domain: "compat", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("large", "h")}, HitsAddend: 0})
		checkStatus(t, "request hits_addend 0 counts 1", resp.Statuses[0], want{ok, 10, 9, ""})
		resp = a.askReq(t, &pb.RateLimitRequest{Domain: "compat", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("large", "h")}, HitsAddend: 5})
		checkStatus(t, "request hits_addend 5", resp.Statuses[0], want{ok, 10, 4, ""})
		d := desc("large", "h")
		d.HitsAddend = wrapperspb.UInt64(2)
		resp = b.askReq(t, &pb.RateLimitRequest{Domain: "compat", Descriptors: []*ratelimitv3.RateLimitDescriptor{d, desc("basic", "h")}, HitsAddend: 3})
		checkStatus(t, "the descriptor's hits_addend wins", resp.Statuses[0], want{ok, 10, 2, ""})
		checkStatus(t, "the request's applies to the others", resp.Statuses[1], want{ok, 3, 0, ""})
		d = desc("large", "h")
		d.HitsAddend = wrapperspb.UInt64(0)
		resp = b.ask(t, "compat", d)
		checkStatus(t, "check only under the limit", resp.Statuses[0], want{ok, 10, 2, ""})
		resp = a.askReq(t, &pb.RateLimitRequest{Domain: "compat", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("large", "h")}, HitsAddend: 3})
		checkStatus(t, "a request crossing the limit", resp.Statuses[0], want{over, 10, 0, ""})
	})

	t.Run("unlimited, unmatched and unknown domains", func(t *testing.T) {
		resp := a.ask(t, "compat", desc("free", "x"), desc("nothing", "x"), desc("tenant", "t", "method", "GET", "path", "/"))
		checkStatus(t, "unlimited", resp.Statuses[0], want{ok, 0, math.MaxUint32, ""})
		checkStatus(t, "no rule", resp.Statuses[1], want{ok, 0, 0, ""})
		checkStatus(t, "longer than the configuration", resp.Statuses[2], want{ok, 0, 0, ""})
		resp = a.ask(t, "elsewhere", desc("basic", "x"))
		if resp.OverallCode != ok || resp.Statuses[0].CurrentLimit != nil {
			t.Errorf("an unknown domain: %v", resp)
		}
	})

	t.Run("shadow mode answers OK and still counts", func(t *testing.T) {
		resp := a.ask(t, "compat", desc("trial", "x"))
		checkStatus(t, "first", resp.Statuses[0], want{ok, 1, 0, ""})
		for i := range 2 {
			resp = b.ask(t, "compat", desc("trial", "x"))
			checkStatus(t, fmt.Sprintf("over %d", i+1), resp.Statuses[0], want{ok, 1, 0, ""})
			if resp.OverallCode != ok {
				t.Errorf("shadow: overall %v", resp.OverallCode)
			}
		}
	})

	t.Run("a limit override counts on the rule's counter", func(t *testing.T) {
		for range 2 {
			a.ask(t, "compat", desc("basic", "o"))
		}
		d := desc("basic", "o")
		d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_HOUR}
		resp := b.ask(t, "compat", d)
		checkStatus(t, "override over the rule's count", resp.Statuses[0], want{over, 2, 0, ""})
		d = desc("unconfigured", "o")
		d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_HOUR}
		checkStatus(t, "override without a rule", a.ask(t, "compat", d).Statuses[0], want{ok, 1, 0, ""})
		checkStatus(t, "override without a rule, again", b.ask(t, "compat", d).Statuses[0], want{over, 1, 0, ""})
		if resp := a.ask(t, "elsewhere", d); resp.Statuses[0].CurrentLimit != nil || resp.OverallCode != ok {
			t.Errorf("an override in an unknown domain applied: %v", resp)
		}
	})

	t.Run("replaces", func(t *testing.T) {
		resp := a.ask(t, "compat", desc("tenant", "r"), desc("premium", "r"))
		checkStatus(t, "replaced", resp.Statuses[0], want{ok, 0, 0, ""})
		checkStatus(t, "replacing", resp.Statuses[1], want{ok, 100, 99, "premium"})
		resp = b.ask(t, "compat", desc("tenant", "r"))
		checkStatus(t, "the replaced counter was not touched", resp.Statuses[0], want{ok, 5, 4, "per-tenant"})
	})

	t.Run("wildcards count per value unless share_threshold", func(t *testing.T) {
		a.ask(t, "compat", desc("path", "/api/a"))
		checkStatus(t, "another value", b.ask(t, "compat", desc("path", "/api/b")).Statuses[0], want{ok, 2, 1, ""})
		a.ask(t, "compat", desc("path", "/files/a"))
		checkStatus(t, "a shared wildcard", b.ask(t, "compat", desc("path", "/files/b")).Statuses[0], want{ok, 2, 0, ""})
	})

	t.Run("quota mode is over only when every quota descriptor is", func(t *testing.T) {
		a.ask(t, "compat", desc("quota_a", "q"), desc("quota_b", "q"))
		resp := a.ask(t, "compat", desc("quota_a", "q"), desc("quota_b", "q"))
		if resp.OverallCode != ok || resp.Statuses[0].Code != over {
			t.Errorf("one quota descriptor over: %v", resp)
		}
		if resp := b.ask(t, "compat", desc("quota_a", "q"), desc("quota_b", "q")); resp.OverallCode != over {
			t.Errorf("both over: %v", resp)
		}
	})

	t.Run("invalid requests", func(t *testing.T) {
		for _, tc := range []struct {
			req  *pb.RateLimitRequest
			want string
		}{
			{&pb.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("a", "b")}}, "rate limit domain must not be empty"},
			{&pb.RateLimitRequest{Domain: "compat"}, "rate limit descriptor list must not be empty"},
		} {
			_, err := a.client.ShouldRateLimit(context.Background(), tc.req)
			if st := status.Convert(err); st.Code() != codes.InvalidArgument || st.Message() != tc.want {
				t.Errorf("%v: %v, want InvalidArgument %q", tc.req, err, tc.want)
			}
		}
	})

	t.Run("health and reflection", func(t *testing.T) {
		h, err := healthpb.NewHealthClient(a.conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: pb.RateLimitService_ServiceDesc.ServiceName})
		if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health: %v %v", h, err)
		}
		stream, err := reflectionpb.NewServerReflectionClient(a.conn).ServerReflectionInfo(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, s := range resp.GetListServicesResponse().GetService() {
			names = append(names, s.Name)
		}
		if !strings.Contains(strings.Join(names, " "), pb.RateLimitService_ServiceDesc.ServiceName) {
			t.Errorf("reflection lists %v", names)
		}
	})

	t.Run("POST /json", func(t *testing.T) {
		body := `{"domain":"compat","descriptors":[{"entries":[{"key":"small","value":"j"}]}]}`
		for i, wantCode := range []int{200, 200, 429} {
			if code := post(t, a.url+"/json", body); code != wantCode {
				t.Errorf("request %d: %d, want %d", i+1, code, wantCode)
			}
		}
		if code := post(t, a.url+"/json", `{"domain":`); code != 400 {
			t.Errorf("a broken body: %d, want 400", code)
		}
	})

	t.Run("concurrent requests across nodes admit exactly the limit", func(t *testing.T) {
		var mu sync.Mutex
		admitted := 0
		var wg sync.WaitGroup
		for w := range 8 {
			n := []*rlsNode{a, b}[w%2]
			wg.Go(func() {
				for range 25 {
					resp := n.ask(t, "compat", desc("large", "race"))
					if resp.OverallCode == ok {
						mu.Lock()
						admitted++
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		if admitted != 10 {
			t.Errorf("%d admitted of 200 against a limit of 10", admitted)
		}
	})
}
