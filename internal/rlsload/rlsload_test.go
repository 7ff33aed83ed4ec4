package rlsload

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fake answers OVER_LIMIT for the value "k0", an error for "k1", OK
// otherwise, and records the values it saw.
type fake struct {
	pb.UnimplementedRateLimitServiceServer
	mu     sync.Mutex
	values map[string]int
}

func (f *fake) ShouldRateLimit(_ context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	e := req.GetDescriptors()[0].GetEntries()[0]
	f.mu.Lock()
	f.values[req.GetDomain()+"/"+e.GetKey()+"="+e.GetValue()]++
	f.mu.Unlock()
	switch e.GetValue() {
	case "k0":
		return &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OVER_LIMIT}, nil
	case "k1":
		return nil, status.Error(codes.Unavailable, "down")
	}
	return &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK}, nil
}

func serve(t *testing.T) (string, *fake) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fake{values: map[string]int{}}
	srv := grpc.NewServer()
	pb.RegisterRateLimitServiceServer(srv, f)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return ln.Addr().String(), f
}

func TestRun(t *testing.T) {
	addr, f := serve(t)
	tests := []struct {
		name string
		cfg  Config
	}{
		{"one key, shared connection", Config{Workers: 4, Requests: 200, Keys: 1}},
		{"many keys, a connection per worker", Config{Workers: 4, Conns: 4, Requests: 400, Keys: 10, Domain: "d", Key: "user"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.mu.Lock()
			clear(f.values)
			f.mu.Unlock()
			tt.cfg.Target = addr
			d, err := New(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(d.Close)
			res, err := d.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			cfg := d.Config()
			if res.Requests != int64(cfg.Requests) {
				t.Errorf("requests %d, want %d", res.Requests, cfg.Requests)
			}
			f.mu.Lock()
			seen := map[string]int{}
			for k, v := range f.values {
				seen[k] = v
			}
			f.mu.Unlock()
			if len(seen) != cfg.Keys {
				t.Errorf("server saw %d values (%v), want %d", len(seen), seen, cfg.Keys)
			}
			k0, k1 := seen[cfg.Domain+"/"+cfg.Key+"=k0"], seen[cfg.Domain+"/"+cfg.Key+"=k1"]
			if res.Over != int64(k0) || res.Errors != int64(k1) || res.OK != res.Requests-int64(k0+k1) {
				t.Errorf("OK %d, OVER %d, errors %d; server saw k0 %d times and k1 %d times of %d", res.OK, res.Over, res.Errors, k0, k1, res.Requests)
			}
			if (res.Errors > 0) != (res.FirstErr != nil) {
				t.Errorf("errors %d, first error %v", res.Errors, res.FirstErr)
			}
			if res.P50 <= 0 || res.P99 < res.P50 || res.PerSecond() <= 0 {
				t.Errorf("p50 %v, p99 %v, %v/s", res.P50, res.P99, res.PerSecond())
			}
		})
	}
}

func TestRunDuration(t *testing.T) {
	addr, _ := serve(t)
	d, err := New(Config{Target: addr, Workers: 2, Keys: 100, Duration: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	res, err := d.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests == 0 || res.Elapsed < 100*time.Millisecond || res.Elapsed > 5*time.Second {
		t.Errorf("%v: want some requests in about 100ms", res)
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
	}{
		{"no target", Config{Requests: 1}},
		{"negative workers", Config{Target: "127.0.0.1:1", Workers: -1, Requests: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(tt.cfg); !errors.Is(err, ErrConfig) {
				t.Errorf("New: %v, want ErrConfig", err)
			}
		})
	}
	d, err := New(Config{Target: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	if _, err := d.Run(context.Background()); !errors.Is(err, ErrConfig) {
		t.Errorf("Run without a bound: %v, want ErrConfig", err)
	}
}

func TestQuantile(t *testing.T) {
	var s []time.Duration
	for i := 1; i <= 100; i++ {
		s = append(s, time.Duration(i))
	}
	for _, tt := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 50}, {0.99, 99}, {1, 100}, {0, 1}} {
		if got := quantile(s, tt.q); got != tt.want {
			t.Errorf("quantile(1..100, %v) = %d, want %d", tt.q, got, tt.want)
		}
	}
	if got := quantile(nil, 0.5); got != 0 {
		t.Errorf("quantile(nil) = %d", got)
	}
}
