// Package rlsload is a closed-loop load driver for Envoy's rate limit
// service (envoy.service.ratelimit.v3 ShouldRateLimit) over gRPC: a fixed
// number of workers, each sending its next request when the last one is
// answered, on one descriptor whose value is drawn from a set of keys. It
// counts the answers (OK, OVER_LIMIT, errors) and their latencies. It owns
// no server: it asks whatever listens at the target, the node's rls
// section or any other implementation. Used by the benchmarks of bench/
// and by the bench/rlsload command.
package rlsload

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Config is one run. Requests and Duration bound it; at least one must be
// set, and the run ends at whichever comes first.
type Config struct {
	Target   string        // host:port of the service; required
	Workers  int           // concurrent callers; default 16
	Conns    int           // gRPC connections, workers spread over them round-robin; default 1 (Envoy: one per worker thread)
	Requests int           // stop after this many requests in all; 0: no bound
	Duration time.Duration // stop after this long; 0: no bound
	Keys     int           // distinct descriptor values, drawn uniformly; default 1
	Domain   string        // default "bench"
	Key      string        // the descriptor entry's key; default "key"
	Timeout  time.Duration // per request; default 5s
	Seed     uint64        // seed of the key draws
}

// Result is what a run saw.
type Result struct {
	Requests int64         // answered or failed
	OK, Over int64         // overall codes of the answers
	Errors   int64         // failed requests (transport or status errors, unknown codes)
	FirstErr error         // the first failure, if any
	Elapsed  time.Duration // from the first request sent to the last answer
	P50, P99 time.Duration // latency of the answered requests
}

// PerSecond is the run's requests per second.
func (r Result) PerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Requests) / r.Elapsed.Seconds()
}

func (r Result) String() string {
	s := fmt.Sprintf("%d requests in %v: %.0f/s, p50 %v, p99 %v, OK %d, OVER_LIMIT %d, errors %d",
		r.Requests, r.Elapsed.Round(time.Millisecond), r.PerSecond(), r.P50, r.P99, r.OK, r.Over, r.Errors)
	if r.FirstErr != nil {
		s += " (first: " + r.FirstErr.Error() + ")"
	}
	return s
}

// Driver holds the connections and prepared requests of runs of one
// Config shape; Run may be called again on the same connections (a warm-up
// then a measurement). A Driver is not safe for concurrent Runs; Close it
// when done.
type Driver struct {
	cfg   Config
	conns []*grpc.ClientConn
	reqs  []*pb.RateLimitRequest
}

// ErrConfig reports a Config that cannot run.
var ErrConfig = errors.New("rlsload: bad config")

// New connects to cfg.Target (connections open lazily, on the first
// request) and prepares one request per key.
func New(cfg Config) (*Driver, error) {
	switch {
	case cfg.Target == "":
		return nil, fmt.Errorf("%w: Target is empty", ErrConfig)
	case cfg.Workers < 0, cfg.Conns < 0, cfg.Keys < 0, cfg.Requests < 0, cfg.Duration < 0:
		return nil, fmt.Errorf("%w: Workers %d, Conns %d, Keys %d, Requests %d, Duration %v: none may be negative",
			ErrConfig, cfg.Workers, cfg.Conns, cfg.Keys, cfg.Requests, cfg.Duration)
	}
	if cfg.Workers == 0 {
		cfg.Workers = 16
	}
	if cfg.Conns == 0 {
		cfg.Conns = 1
	}
	cfg.Conns = min(cfg.Conns, cfg.Workers)
	if cfg.Keys == 0 {
		cfg.Keys = 1
	}
	if cfg.Domain == "" {
		cfg.Domain = "bench"
	}
	if cfg.Key == "" {
		cfg.Key = "key"
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	d := &Driver{cfg: cfg}
	for range cfg.Conns {
		c, err := grpc.NewClient(cfg.Target, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			d.Close()
			return nil, fmt.Errorf("rlsload: connect %s: %w", cfg.Target, err)
		}
		d.conns = append(d.conns, c)
	}
	d.reqs = make([]*pb.RateLimitRequest, cfg.Keys)
	for i := range d.reqs {
		d.reqs[i] = &pb.RateLimitRequest{Domain: cfg.Domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: cfg.Key, Value: "k" + strconv.Itoa(i)}},
		}}}
	}
	return d, nil
}

// Config returns the driver's configuration with its defaults filled in.
func (d *Driver) Config() Config { return d.cfg }

// Close closes the connections.
func (d *Driver) Close() {
	for _, c := range d.conns {
		_ = c.Close()
	}
}

// worker is what one worker saw.
type worker struct {
	lat             []time.Duration
	ok, over, fails int64
	firstErr        error
}

// Run sends requests until the Config's bound is met or ctx ends, and
// returns what it saw. A run with neither Requests nor Duration set is
// refused.
func (d *Driver) Run(ctx context.Context) (Result, error) {
	cfg := d.cfg
	if cfg.Requests == 0 && cfg.Duration == 0 {
		return Result{}, fmt.Errorf("%w: set Requests or Duration", ErrConfig)
	}
	var deadline time.Time // no request is sent after it; those in flight finish
	var sent atomic.Int64
	ws := make([]worker, cfg.Workers)
	var wg sync.WaitGroup
	start := time.Now()
	if cfg.Duration > 0 {
		deadline = start.Add(cfg.Duration)
	}
	for w := range ws {
		client := pb.NewRateLimitServiceClient(d.conns[w%len(d.conns)])
		rng := rand.New(rand.NewPCG(cfg.Seed, uint64(w)))
		me := &ws[w]
		wg.Go(func() {
			for ctx.Err() == nil {
				if cfg.Requests > 0 && sent.Add(1) > int64(cfg.Requests) {
					return
				}
				if !deadline.IsZero() && !time.Now().Before(deadline) {
					return
				}
				req := d.reqs[rng.IntN(len(d.reqs))]
				rctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
				t := time.Now()
				resp, err := client.ShouldRateLimit(rctx, req)
				lat := time.Since(t)
				cancel()
				if err != nil && ctx.Err() != nil {
					return // the caller ended the run: not counted
				}
				switch {
				case err != nil:
				case resp.GetOverallCode() == pb.RateLimitResponse_OK:
					me.ok++
				case resp.GetOverallCode() == pb.RateLimitResponse_OVER_LIMIT:
					me.over++
				default:
					err = fmt.Errorf("rlsload: overall code %v", resp.GetOverallCode())
				}
				if err != nil {
					me.fails++
					if me.firstErr == nil {
						me.firstErr = err
					}
					continue
				}
				me.lat = append(me.lat, lat)
			}
		})
	}
	wg.Wait()
	res := Result{Elapsed: time.Since(start)}
	var lat []time.Duration
	for _, w := range ws {
		res.OK += w.ok
		res.Over += w.over
		res.Errors += w.fails
		if res.FirstErr == nil {
			res.FirstErr = w.firstErr
		}
		lat = append(lat, w.lat...)
	}
	res.Requests = res.OK + res.Over + res.Errors
	slices.Sort(lat)
	res.P50, res.P99 = quantile(lat, 0.50), quantile(lat, 0.99)
	return res, nil
}

// quantile returns the q-quantile of sorted (nearest rank), 0 when empty.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}
