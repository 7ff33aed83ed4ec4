package integration

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/ratesync/ratesync/internal/arith"
	"github.com/ratesync/ratesync/ratelimiting"
)

// Spread says which node an arrival goes to.
type Spread int

// Spreads.
const (
	RoundRobin Spread = iota // arrival i to node i mod N
	Random                   // a node at random
	Sticky                   // a key always to the same node (hash of the key)
)

// ParseSpread reads "round-robin", "random" or "sticky".
func ParseSpread(s string) (Spread, error) {
	switch s {
	case "round-robin", "roundrobin", "rr":
		return RoundRobin, nil
	case "random":
		return Random, nil
	case "sticky":
		return Sticky, nil
	}
	return 0, fmt.Errorf("integration: spread %q: must be round-robin, random or sticky", s)
}

// Load is an open-loop offered load: arrivals come at their times whatever
// the answers, as traffic from many clients does.
type Load struct {
	Rate     float64       // offered hits per second, all keys together
	Poisson  bool          // exponential inter-arrival times instead of constant
	Keys     int           // distinct keys (1: one hot key)
	Zipf     float64       // > 1: key i drawn with weight 1/(i+1)^Zipf; otherwise uniform
	Spread   Spread        // which node gets each arrival
	Duration time.Duration // how long arrivals come
	Workers  int           // concurrent callers (32 when 0)
	Limits   []ratelimiting.Limit
	Cost     float64   // cost of each hit (1 when 0)
	Seed     uint64    // random seed (fixed runs are repeatable up to timing)
	Start    time.Time // first arrival (in 20ms when zero)
}

// Decision is one answered arrival.
type Decision struct {
	At      time.Time // when the node was asked (true clock; a node skewed by d reads At+d)
	Due     time.Time // the arrival's scheduled time
	Node    int
	Key     int
	Allowed bool
	Err     error
	Latency time.Duration
	// Reset is the first limit's Reset in the node's answer: for a fixed
	// window, the time from the node's decision to the end of the window it
	// counted the hit in. Run records it; RunWith leaves it 0.
	Reset time.Duration
}

// Result is every decision of a run.
type Result struct {
	Load      Load
	Start     time.Time
	End       time.Time
	Decisions []Decision
}

type arrival struct {
	at   time.Time
	key  int
	node int
}

// KeyName is the key string of key index i.
func KeyName(i int) string { return "key-" + strconv.Itoa(i) }

// schedule draws the arrivals of l for nodes nodes, from start.
func schedule(l Load, nodes int, start time.Time) []arrival {
	r := rand.New(rand.NewPCG(l.Seed, l.Seed^0x5eed))
	var zipf *rand.Zipf
	if l.Keys > 1 && l.Zipf > 1 {
		zipf = rand.NewZipf(r, l.Zipf, 1, uint64(l.Keys-1))
	}
	var out []arrival
	for t, i := 0.0, 0; t < l.Duration.Seconds(); i++ {
		a := arrival{at: start.Add(time.Duration(t * float64(time.Second)))}
		switch {
		case zipf != nil:
			a.key = int(zipf.Uint64())
		case l.Keys > 1:
			a.key = r.IntN(l.Keys)
		}
		switch l.Spread {
		case RoundRobin:
			a.node = i % nodes
		case Random:
			a.node = r.IntN(nodes)
		case Sticky:
			h := fnv.New32a()
			h.Write([]byte(KeyName(a.key)))
			a.node = int(h.Sum32() % uint32(nodes))
		}
		out = append(out, a)
		if l.Poisson {
			t += r.ExpFloat64() / l.Rate
		} else {
			t += 1 / l.Rate
		}
	}
	return out
}

// Run offers l to the cluster's nodes and records every decision. A node's
// error is recorded in its Decision, never hidden.
func Run(ctx context.Context, c *Cluster, l Load) (*Result, error) {
	return run(ctx, len(c.Nodes), l, func(ctx context.Context, node int, key string, cost float64) (answer, error) {
		d, err := c.Nodes[node].Allow(ctx, c.Namespace(), key, cost, l.Limits...)
		a := answer{allowed: d.Allowed}
		if len(d.Limits) > 0 {
			a.reset = d.Limits[0].Reset
		}
		return a, err
	})
}

// RunWith offers l to nodes through ask (an in-process Allow, an HTTP
// call...) and records every decision.
func RunWith(ctx context.Context, nodes int, l Load, ask func(ctx context.Context, node int, key string, cost float64) (bool, error)) (*Result, error) {
	return run(ctx, nodes, l, func(ctx context.Context, node int, key string, cost float64) (answer, error) {
		ok, err := ask(ctx, node, key, cost)
		return answer{allowed: ok}, err
	})
}

// answer is a node's answer to one arrival: the decision, and the first
// limit's Reset when known.
type answer struct {
	allowed bool
	reset   time.Duration
}

func run(ctx context.Context, nodes int, l Load, ask func(ctx context.Context, node int, key string, cost float64) (answer, error)) (*Result, error) {
	if l.Rate <= 0 || l.Duration <= 0 {
		return nil, fmt.Errorf("integration: load rate %v and duration %v: both must be > 0", l.Rate, l.Duration)
	}
	if l.Keys <= 0 {
		l.Keys = 1
	}
	if l.Workers <= 0 {
		l.Workers = 32
	}
	if l.Cost == 0 {
		l.Cost = 1
	}
	start := l.Start
	if start.IsZero() {
		start = time.Now().Add(20 * time.Millisecond)
	}
	arrivals := schedule(l, nodes, start)
	res := &Result{Load: l, Start: start, Decisions: make([]Decision, len(arrivals))}
	work := make(chan int, l.Workers)
	var wg sync.WaitGroup
	for range l.Workers {
		wg.Go(func() {
			for i := range work {
				a := arrivals[i]
				t0 := time.Now()
				ans, err := ask(ctx, a.node, KeyName(a.key), l.Cost)
				res.Decisions[i] = Decision{At: t0, Due: a.at, Node: a.node, Key: a.key, Allowed: ans.allowed && err == nil, Err: err, Latency: time.Since(t0), Reset: ans.reset}
			}
		})
	}
	for i, a := range arrivals {
		if d := time.Until(a.at); d > time.Millisecond {
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			res.Decisions = res.Decisions[:i]
			break
		}
		work <- i
	}
	close(work)
	wg.Wait()
	res.End = start.Add(l.Duration)
	if err := ctx.Err(); err != nil {
		return res, err
	}
	return res, nil
}

// Admitted returns the number of allowed decisions.
func (r *Result) Admitted() int {
	n := 0
	for _, d := range r.Decisions {
		if d.Allowed {
			n++
		}
	}
	return n
}

// Errors returns the decisions that failed, and the first error.
func (r *Result) Errors() (int, error) {
	n := 0
	var first error
	for _, d := range r.Decisions {
		if d.Err != nil {
			if first == nil {
				first = d.Err
			}
			n++
		}
	}
	return n, first
}

// WindowCount is the admitted hits of one key in one epoch-aligned window.
type WindowCount struct {
	Key      int
	Start    time.Time
	Admitted int
}

// PerWindow counts admitted hits per key and epoch-aligned window of size,
// by the arrivals' true time, for the windows wholly inside the run.
func (r *Result) PerWindow(size time.Duration) []WindowCount {
	return r.perWindow(size, func(d *Decision) int64 { return arith.WindowStart(d.At, size).UnixMilli() })
}

// PerDecidedWindow counts admitted hits per key and window of size as the
// nodes counted them, for a run (Run) whose first limit is a fixed window
// of size: a hit asked at At and answered Latency later was decided in
// between, in the window that ends Reset after that instant, the multiple
// of size nearest At + Latency/2 + Reset while half the latency plus the
// nodes' clock error stays under half a window. A hit asked just before a
// window's end may be decided in the next window; PerWindow, by the true
// time of the asking, counts it in the window before.
func (r *Result) PerDecidedWindow(size time.Duration) []WindowCount {
	return r.perWindow(size, func(d *Decision) int64 { return d.DecidedWindow(size).UnixMilli() })
}

// DecidedWindow returns the start of the fixed window of size that d was
// counted in (see PerDecidedWindow).
func (d *Decision) DecidedWindow(size time.Duration) time.Time {
	end := arith.WindowStart(d.At.Add(d.Latency/2+d.Reset+size/2), size) // the nearest window end
	return end.Add(-size)
}

// perWindow counts admitted hits per key and the window start (Unix ms)
// startOf gives each, for the windows wholly inside the run.
func (r *Result) perWindow(size time.Duration, startOf func(d *Decision) int64) []WindowCount {
	type id struct {
		key   int
		start int64
	}
	counts := make(map[id]int)
	for i := range r.Decisions {
		if d := &r.Decisions[i]; d.Allowed {
			counts[id{d.Key, startOf(d)}]++
		}
	}
	var out []WindowCount
	for k, n := range counts {
		s := time.UnixMilli(k.start)
		if s.Before(r.Start) || s.Add(size).After(r.End) {
			continue
		}
		out = append(out, WindowCount{Key: k.key, Start: s, Admitted: n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Admitted != out[j].Admitted {
			return out[i].Admitted > out[j].Admitted
		}
		return out[i].Start.Before(out[j].Start)
	})
	return out
}

// MaxPerWindow returns the most hits of one key admitted in one whole
// window of size (0 when the run holds no whole window).
func (r *Result) MaxPerWindow(size time.Duration) int {
	if w := r.PerWindow(size); len(w) > 0 {
		return w[0].Admitted
	}
	return 0
}

// AdmittedPerKey returns the allowed decisions of each key.
func (r *Result) AdmittedPerKey() map[int]float64 {
	out := make(map[int]float64)
	for _, d := range r.Decisions {
		if d.Allowed {
			out[d.Key]++
		}
	}
	return out
}

// WindowStarts returns the starts of the epoch-aligned windows of size
// that a decision of the run may have been counted in: those that meet the
// span from its first asking to its last answer, widened by slack (the
// nodes' clock error) at both ends. A hit asked just before a window's end
// may be counted in the next, so a count per window by the time of the
// asking can be off by such hits where the sum over these windows is not.
func (r *Result) WindowStarts(size, slack time.Duration) []time.Time {
	var first, last time.Time
	for _, d := range r.Decisions {
		if first.IsZero() || d.At.Before(first) {
			first = d.At
		}
		if end := d.At.Add(d.Latency); end.After(last) {
			last = end
		}
	}
	if first.IsZero() {
		return nil
	}
	var out []time.Time
	for s, to := arith.WindowStart(first.Add(-slack), size), last.Add(slack); !s.After(to); s = s.Add(size) {
		out = append(out, s)
	}
	return out
}

// OfferedRate returns the offered rate of key, hits per second.
func (r *Result) OfferedRate(key int) float64 {
	n := 0
	for _, d := range r.Decisions {
		if d.Key == key {
			n++
		}
	}
	return float64(n) / r.Load.Duration.Seconds()
}
