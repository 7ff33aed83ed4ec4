package refmodel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// goldenStart is the instant the cases start from (plus an offset of
// their own): the start of a minute, so of a window of every size of
// Windows.
var goldenStart = time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()

// GenerateGolden returns the golden table: for every algorithm and a few
// limits of each, a request filled to the limit with whole and fractional
// costs, from the start, the middle and the last millisecond of a window,
// then probed 1 ms before and at its RetryAfter and Reset, with peeks
// (cost 0) between; requests of several limits that share counters; the
// exact fits of a sliding window whose weight float64 cannot hold; and
// random traces of every algorithm, one to four limits a request, with
// probes. Every quantity is on a grid of quarters, so exact in float64.
func GenerateGolden() Golden {
	g := Golden{}
	for _, w := range Windows {
		g.WindowsMS = append(g.WindowsMS, w.Milliseconds())
	}
	ms := time.Millisecond
	single := []struct {
		kind   Kind
		limits []Limit
	}{
		{Sliding, []Limit{{Limit: 4, Window: time.Second}, {Limit: 7.5, Window: 250 * ms}, {Limit: 10, Window: time.Minute}}},
		{Fixed, []Limit{{Limit: 4, Window: time.Second}, {Limit: 7.5, Window: 250 * ms}, {Limit: 10, Window: time.Minute}}},
		{Precision, []Limit{{Limit: 10, Window: 3 * time.Second, Precision: time.Second}, {Limit: 6, Window: time.Second, Precision: 250 * ms},
			{Limit: 5.5, Window: 1750 * ms, Precision: 250 * ms}, {Limit: 8, Window: 2 * time.Minute, Precision: time.Minute}}},
		{Anchored, []Limit{{Limit: 3, Window: time.Second}, {Limit: 5.5, Window: 700 * ms}, {Limit: 2, Window: time.Minute}}},
		{Log, []Limit{{Limit: 4, Window: time.Second}, {Limit: 2.5, Window: 700 * ms}, {Limit: 10, Window: 2500 * ms}}},
		{Token, []Limit{{Limit: 4, Window: time.Second}, {Limit: 4, Window: time.Second, Burst: 10}, {Limit: 1, Window: 250 * ms, Burst: 2.5}, {Limit: 10, Window: time.Minute, Burst: 3}}},
		{Leaky, []Limit{{Limit: 4, Window: time.Second}, {Limit: 4, Window: time.Second, Burst: 10}, {Limit: 1, Window: 250 * ms, Burst: 2.5}, {Limit: 10, Window: time.Minute, Burst: 3}}},
	}
	for _, s := range single {
		for _, l := range s.limits {
			l.Kind = s.kind
			w := l.Window.Milliseconds()
			if s.kind == Precision {
				w = l.Precision.Milliseconds()
			}
			for _, cost := range []float64{1, 0.75} {
				cost = min(cost, l.Limit, l.burst())
				for _, at := range []struct {
					name string
					ms   int64
				}{{"start", 0}, {"middle", w / 2}, {"last ms", w - 1}} {
					if cost != 1 && at.ms != w/2 {
						continue // fractional costs from the middle only
					}
					name := fmt.Sprintf("%v %v/%v cost %v from the %s of a window", s.kind, l.Limit, l.Window, cost, at.name)
					if l.Burst != 0 {
						name = fmt.Sprintf("%v %v/%v burst %v cost %v", s.kind, l.Limit, l.Window, l.Burst, cost)
						if at.ms != 0 {
							continue // a bucket has no window edges
						}
					}
					if l.Precision != 0 {
						name = fmt.Sprintf("%v %v/%v in %v cost %v from the %s of a sub-window", s.kind, l.Limit, l.Window, l.Precision, cost, at.name)
					}
					gap := max(1, w/10)
					switch n := int64(math.Ceil(l.Limit/cost)) + 1; {
					case l.bucket(): // slow enough that hits drain it
						gap = max(1, w/40)
					case at.ms == w/2: // filled before the window ends
						gap = max(1, min(gap, w/2/(n+1)))
					}
					b := newBuilder(name, at.ms, []Limit{l})
					b.fillAndProbe(cost, time.Duration(gap)*ms)
					g.Cases = append(g.Cases, b.c)
				}
			}
		}
	}
	g.Cases = append(g.Cases, multiLimit()...)
	g.Cases = append(g.Cases, exactFits()...)
	kinds := []Kind{Sliding, Fixed, Token, Leaky, Anchored, Log, Precision}
	for seed := range 150 {
		r := rand.New(rand.NewPCG(uint64(seed), 2031))
		x := Mix{Kinds: kinds, Most: 4, Probes: true, Subsets: seed%2 == 1}
		steps := x.Trace(r, 20)
		b := newBuilder(fmt.Sprintf("random trace %d", seed), r.Int64N(3_600_000), steps[0].Limits)
		for _, s := range steps {
			b.step(s.Move(b.prev), s.Cost, b.indexes(s.Limits)...)
		}
		g.Cases = append(g.Cases, b.c)
	}
	return g
}

// multiLimit returns cases of requests with several limits: limits that
// share a counter (two sliding windows of one size; a precision limit's
// sub-windows and a window of that size; fixed and sliding of one size),
// buckets beside windows, an anchored window beside a log, and requests
// naming some of the case's limits only.
func multiLimit() []GoldenCase {
	ms := time.Millisecond
	sets := []struct {
		name   string
		limits []Limit
	}{
		{"two sliding windows of one size", []Limit{{Kind: Sliding, Limit: 5, Window: time.Second}, {Kind: Sliding, Limit: 8, Window: time.Second}}},
		{"sliding and fixed of one size", []Limit{{Kind: Sliding, Limit: 6, Window: time.Second}, {Kind: Fixed, Limit: 4, Window: time.Second}}},
		{"sliding of two sizes", []Limit{{Kind: Sliding, Limit: 10, Window: time.Second}, {Kind: Fixed, Limit: 4, Window: 250 * ms}}},
		{"precision and its sub-window", []Limit{{Kind: Precision, Limit: 6, Window: time.Second, Precision: 250 * ms}, {Kind: Sliding, Limit: 3, Window: 250 * ms}}},
		{"token bucket and sliding window", []Limit{{Kind: Token, Limit: 4, Window: time.Second, Burst: 6}, {Kind: Sliding, Limit: 5, Window: time.Second}}},
		{"token and leaky buckets", []Limit{{Kind: Token, Limit: 2, Window: 250 * ms, Burst: 3}, {Kind: Leaky, Limit: 4, Window: time.Second}}},
		{"log, anchored window and precision", []Limit{{Kind: Log, Limit: 3, Window: time.Second}, {Kind: Anchored, Limit: 4, Window: time.Second}, {Kind: Precision, Limit: 10, Window: 3 * time.Second, Precision: time.Second}}},
		{"leaky bucket and log", []Limit{{Kind: Leaky, Limit: 2, Window: 250 * ms}, {Kind: Log, Limit: 4, Window: 700 * ms}}},
		{"two logs of one window", []Limit{{Kind: Log, Limit: 2, Window: time.Second}, {Kind: Log, Limit: 3, Window: time.Second}}},
		{"two anchored windows", []Limit{{Kind: Anchored, Limit: 3, Window: 700 * ms}, {Kind: Anchored, Limit: 2, Window: 2500 * ms}}},
		{"every algorithm", []Limit{{Kind: Sliding, Limit: 9, Window: time.Second}, {Kind: Fixed, Limit: 8, Window: 250 * ms}, {Kind: Token, Limit: 6, Window: time.Second},
			{Kind: Leaky, Limit: 7, Window: time.Second, Burst: 9}, {Kind: Anchored, Limit: 8, Window: 2500 * ms}, {Kind: Log, Limit: 7, Window: 700 * ms},
			{Kind: Precision, Limit: 10, Window: 3 * time.Second, Precision: time.Second}}},
	}
	var out []GoldenCase
	for _, s := range sets {
		for _, cost := range []float64{1, 1.25} {
			b := newBuilder(fmt.Sprintf("%s, cost %v", s.name, cost), 130, s.limits)
			b.fillAndProbe(cost, 37*ms)
			// Each limit alone, then the first and the last, twice.
			for i := range s.limits {
				b.step(13*ms, cost, i)
			}
			b.step(0, 0, 0, len(s.limits)-1)
			b.step(ms, cost, 0, len(s.limits)-1)
			b.probe(AtRetry, cost, 0, len(s.limits)-1)
			out = append(out, b.c)
		}
	}
	return out
}

// exactFits returns cases whose requests fit exactly though the sliding
// window's weight is no float64: 25 * 0.6 + 10 = 25, and 25 * 0.56 + 11 =
// 25; Kong's worked example; and a request that fits with nothing to
// spare at every window edge.
func exactFits() []GoldenCase {
	ms := time.Millisecond
	b := newBuilder("sliding exact fits with weights 0.6 and 0.56", 0, []Limit{{Kind: Sliding, Limit: 25, Window: time.Second}})
	b.step(0, 25)       // the previous window: 25
	b.step(1400*ms, 10) // 400 ms into the next: 25 * 0.6 + 10 = 25
	b.step(39*ms, 1)    // 25 * 0.561 + 10 + 1 > 25
	b.step(ms, 1)       // 25 * 0.56 + 10 + 1 = 25
	b.step(0, 0)
	b.step(ms, 0.25)
	cases := []GoldenCase{b.c}

	b = newBuilder("sliding exact fits in quarters", 0, []Limit{{Kind: Sliding, Limit: 7.25, Window: time.Minute}})
	b.step(0, 6.25)
	b.step(time.Minute+26399*ms, 2.75) // denied
	b.step(ms, 2.75)                   // 6.25 * 0.56 + 2.75 = 6.25
	b.probe(AtReset, 0)
	cases = append(cases, b.c)

	b = newBuilder("Kong's worked example", 0, []Limit{{Kind: Sliding, Limit: 100, Window: time.Minute}})
	b.step(0, 40)
	b.step(time.Minute, 10)
	b.step(30*time.Second, 0)
	b.step(0, 70)
	b.step(0, 0.25)
	b.probe(BeforeRetry, 0.25)
	b.probe(AtRetry, 0.25)
	cases = append(cases, b.c)

	for _, k := range []Kind{Sliding, Fixed, Token, Leaky, Anchored, Log} {
		l := Limit{Kind: k, Limit: 4, Window: 250 * ms}
		b = newBuilder(fmt.Sprintf("%v: the whole limit at once, at each edge", k), 249, []Limit{l})
		b.step(0, 4)
		b.step(0, 0)
		b.step(0, 0.25)
		b.step(ms, 4)
		b.step(249*ms, 4)
		b.step(ms, 4)
		b.probe(BeforeReset, 0)
		b.probe(AtReset, 4)
		b.probe(AtRetry, 4)
		cases = append(cases, b.c)
	}
	return cases
}

// builder makes one case, deciding each step with the model as it goes.
type builder struct {
	c      GoldenCase
	m      *Model
	limits []Limit
	now    int64
	prev   *Decision
}

func newBuilder(name string, offset int64, limits []Limit) *builder {
	b := &builder{m: New(), limits: limits, now: goldenStart + offset}
	b.c = GoldenCase{Name: name, StartMS: b.now}
	for _, l := range limits {
		b.c.Limits = append(b.c.Limits, goldenLimit(l))
	}
	return b
}

// indexes returns the positions of ls in the case's limits.
func (b *builder) indexes(ls []Limit) []int {
	out := make([]int, len(ls))
	for i, l := range ls {
		out[i] = slices.Index(b.limits, l)
	}
	return out
}

// step moves the clock by move and asks for cost against the limits at
// use (every limit of the case when use is empty).
func (b *builder) step(move time.Duration, cost float64, use ...int) *Decision {
	if len(use) == 0 {
		for i := range b.limits {
			use = append(use, i)
		}
	}
	limits := make([]Limit, len(use))
	for i, j := range use {
		limits[i] = b.limits[j]
	}
	b.now += move.Milliseconds()
	d := b.m.Decide(b.now, cost, limits)
	b.prev = &d
	s := GoldenStep{T: b.now - b.c.StartMS, Cost: cost, Limits: use, Allowed: d.Allowed, RetryMS: d.RetryAfter.Milliseconds()}
	for _, st := range d.Limits {
		s.States = append(s.States, GoldenState{Allowed: st.Allowed, Rate: st.Rate.RatString(), Remaining: st.Remaining,
			ResetMS: st.Reset.Milliseconds(), RetryMS: st.RetryAfter.Milliseconds()})
	}
	b.c.Steps = append(b.c.Steps, s)
	return &d
}

// probe moves the clock to the instant p of the previous decision (not at
// all when it names none) and asks for cost.
func (b *builder) probe(p Probe, cost float64, use ...int) *Decision {
	return b.step(Step{Probe: p}.Move(b.prev), cost, use...)
}

// fillAndProbe peeks, asks for cost every gap until a denial (at most 40
// times), peeks, probes 1 ms before and at the RetryAfter, peeks, probes 1
// ms before and at the Reset with peeks, asks again 1 ms later, and once
// more after a quiet minute.
func (b *builder) fillAndProbe(cost float64, gap time.Duration) {
	b.step(0, 0)
	for i := range 40 {
		move := gap
		if i == 0 {
			move = 0
		}
		if !b.step(move, cost).Allowed {
			break
		}
	}
	b.step(0, 0)
	b.step(0, cost)
	b.probe(BeforeRetry, cost)
	b.probe(AtRetry, cost)
	b.step(0, 0)
	b.probe(BeforeReset, 0)
	b.probe(AtReset, 0)
	b.step(time.Millisecond, cost)
	b.step(time.Minute, cost)
}
