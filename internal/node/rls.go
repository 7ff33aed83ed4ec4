package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"sync"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/ratesync/ratesync/internal/node/config"
	"github.com/ratesync/ratesync/rls"
)

// maxDetailedSeries bounds the descriptor label values that
// detailed_metric rules add to the rls metrics; past it, a detailed
// descriptor is counted under its rule.
const maxDetailedSeries = 1000

// newRLS returns the node's Envoy rate limit service, or nil without an
// rls section.
func (n *Node) newRLS() *rls.Service {
	if n.cfg.RLS == nil {
		return nil
	}
	return rls.NewService(n.in, n.cfg.RLS.Rules, n.rlsOptions(n.cfg))
}

// rlsOptions returns the options of the rls service of cfg.
func (n *Node) rlsOptions(cfg config.Config) rls.Options {
	return rls.Options{
		Namespace:   config.RLSNamespace,
		Headers:     cfg.RLS.ResponseHeaders,
		MaxKeyBytes: cfg.Node.MaxKeyBytes,
		Observe:     n.metrics.rls.observe,
	}
}

// rlsServer is the gRPC server of the rls section: ShouldRateLimit, the
// gRPC health service and server reflection.
type rlsServer struct {
	srv    *grpc.Server
	health *health.Server
}

func (n *Node) newRLSServer() *rlsServer {
	srv := grpc.NewServer(grpc.UnaryInterceptor(n.metrics.rls.interceptor))
	pb.RegisterRateLimitServiceServer(srv, n.rls)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(pb.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	reflection.Register(srv)
	return &rlsServer{srv: srv, health: hs}
}

// stop drains the server within ctx, then closes what is left.
func (s *rlsServer) stop(ctx context.Context) {
	s.health.Shutdown()
	done := make(chan struct{})
	go func() { s.srv.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		s.srv.Stop()
	}
}

// handleJSON is POST /json: a RateLimitRequest as protobuf JSON, answered
// with the RateLimitResponse, 200 OK or 429 OVER_LIMIT, as upstream.
func (n *Node) handleJSON(w http.ResponseWriter, r *http.Request) {
	if n.rls == nil {
		writeProblem(w, notFound("", "POST /json: the node has no rls section"))
		return
	}
	buf, p := readBody(w, r, n.state().cfg.Node.MaxBodyBytes)
	if p != nil {
		writeProblem(w, p)
		return
	}
	defer putBody(buf)
	var req pb.RateLimitRequest
	if err := protojson.Unmarshal(buf.Bytes(), &req); err != nil {
		writeProblem(w, rlsBodyProblem(buf.Bytes(), err))
		return
	}
	resp, err := n.metrics.rls.decide(r.Context(), n.rls, &req)
	if err != nil {
		st := status.Convert(err)
		if st.Code() == codes.InvalidArgument {
			writeProblem(w, invalid("body", st.Message()))
		} else {
			writeProblem(w, unavailable(st.Message()))
		}
		return
	}
	out, err := protojson.Marshal(resp)
	if err != nil {
		writeProblem(w, unavailable("the response could not be encoded: "+err.Error()))
		return
	}
	// protojson puts a space after some separators, differently from one
	// build to another (on purpose: its output is not to be relied on
	// byte for byte); compacted, the answer is the same bytes every time.
	var compact bytes.Buffer
	if json.Compact(&compact, out) == nil {
		out = compact.Bytes()
	}
	w.Header().Set("Content-Type", "application/json")
	if resp.OverallCode == pb.RateLimitResponse_OVER_LIMIT {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	_, _ = w.Write(out)
}

// rlsSchema is RateLimitRequest's fields, by their protobuf JSON names
// and their proto names (protojson takes both).
var rlsSchema = protoSchema((&pb.RateLimitRequest{}).ProtoReflect().Descriptor(), maxScanDepth)

// protoSchema describes the JSON form of messages md for checkKeys, depth
// levels deep: lists of messages and messages are described field by
// field; anything else (scalars, enums, maps, the well-known types, which
// protobuf JSON writes as scalars) is a value not described further.
func protoSchema(md protoreflect.MessageDescriptor, depth int) []jsonField {
	fs := md.Fields()
	out := make([]jsonField, fs.Len())
	for i := range fs.Len() {
		fd := fs.Get(i)
		f := jsonField{name: fd.JSONName(), kind: kAny}
		if alt := fd.TextName(); alt != f.name {
			f.alt = alt
		}
		if m := fd.Message(); m != nil && !fd.IsMap() && m.FullName().Parent() != "google.protobuf" && depth > 1 {
			f.kind, f.elem = kObject, protoSchema(m, depth-1)
			if fd.IsList() {
				f.kind = kArray
			}
		}
		out[i] = f
	}
	return out
}

// rlsBodyProblem is the 400 of a POST /json body that protojson refused
// with err. protojson refuses a field given twice and a field in another
// case than its own (as unknown); checkKeys finds which, with its path and
// the expected spelling. Anything else is protojson's message.
func rlsBodyProblem(data []byte, err error) *problem {
	if json.Valid(data) {
		if p, _ := checkKeys(data, rlsSchema); p != nil {
			return p
		}
	}
	return invalid("body", "not a RateLimitRequest in protobuf JSON: "+err.Error())
}

// rlsMetrics are the rls section's metrics: requests by result, and
// upstream's per-rule stats by domain and descriptor (the rule's place in
// the configuration; with detailed_metric the descriptor's own values, at
// most maxDetailedSeries of them).
type rlsMetrics struct {
	requests                         *prometheus.CounterVec
	hits, over, near, within, shadow *prometheus.CounterVec
	mu                               sync.Mutex
	series                           map[[2]string]*rlsSeries
	detailed                         int
}

type rlsSeries struct{ hits, over, near, within, shadow prometheus.Counter }

func newRLSMetrics(reg *prometheus.Registry) *rlsMetrics {
	vec := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"domain", "descriptor"})
	}
	m := &rlsMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratesync_rls_requests_total",
			Help: "ShouldRateLimit requests (gRPC and POST /json) by result: ok, over_limit, error.",
		}, []string{"result"}),
		hits:   vec("ratesync_rls_total_hits_total", "Hits (hits_addend) of limited descriptors, by domain and descriptor."),
		over:   vec("ratesync_rls_over_limit_total", "Hits over the limit, by domain and descriptor."),
		near:   vec("ratesync_rls_near_limit_total", "Hits above 80% of the limit and within it, by domain and descriptor."),
		within: vec("ratesync_rls_within_limit_total", "Hits within the limit, by domain and descriptor."),
		shadow: vec("ratesync_rls_shadow_mode_total", "Hits over the limit of a shadow_mode rule (answered OK), by domain and descriptor."),
		series: map[[2]string]*rlsSeries{},
	}
	reg.MustRegister(m.requests, m.hits, m.over, m.near, m.within, m.shadow)
	return m
}

// observe is the service's stats observer.
func (m *rlsMetrics) observe(st rls.Stats) {
	m.mu.Lock()
	id := [2]string{st.Domain, st.Key}
	s := m.series[id]
	if s == nil {
		if st.Detailed && m.detailed >= maxDetailedSeries {
			id[1] = st.Rule
			s = m.series[id]
		}
		if s == nil {
			s = &rlsSeries{
				hits: m.hits.WithLabelValues(id[0], id[1]), over: m.over.WithLabelValues(id[0], id[1]),
				near: m.near.WithLabelValues(id[0], id[1]), within: m.within.WithLabelValues(id[0], id[1]),
				shadow: m.shadow.WithLabelValues(id[0], id[1]),
			}
			m.series[id] = s
			if st.Detailed && id[1] == st.Key {
				m.detailed++
			}
		}
	}
	m.mu.Unlock()
	add := func(c prometheus.Counter, v uint64) {
		if v > 0 {
			c.Add(float64(v))
		}
	}
	add(s.hits, st.TotalHits)
	add(s.over, st.OverLimit)
	add(s.near, st.NearLimit)
	add(s.within, st.WithinLimit)
	add(s.shadow, st.Shadow)
}

// decide asks svc and counts the request's result.
func (m *rlsMetrics) decide(ctx context.Context, svc *rls.Service, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	resp, err := svc.ShouldRateLimit(ctx, req)
	m.count(resp, err)
	return resp, err
}

func (m *rlsMetrics) count(resp *pb.RateLimitResponse, err error) {
	switch {
	case err != nil:
		m.requests.WithLabelValues("error").Inc()
	case resp.OverallCode == pb.RateLimitResponse_OVER_LIMIT:
		m.requests.WithLabelValues("over_limit").Inc()
	default:
		m.requests.WithLabelValues("ok").Inc()
	}
}

// interceptor counts the gRPC ShouldRateLimit requests.
func (m *rlsMetrics) interceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if info.FullMethod == pb.RateLimitService_ShouldRateLimit_FullMethodName {
		r, _ := resp.(*pb.RateLimitResponse)
		if err == nil && r == nil {
			err = errors.New("no response")
		}
		m.count(r, err)
	}
	return resp, err
}

// listenRLS opens the rls section's listener, or returns nil without one.
func (n *Node) listenRLS() (net.Listener, error) {
	if n.cfg.RLS == nil {
		return nil, nil
	}
	return net.Listen("tcp", n.cfg.RLS.Listen)
}
