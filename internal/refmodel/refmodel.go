// Package refmodel is a reference model of ratesync's decisions for tests:
// the semantics of every algorithm written plainly in exact rational
// arithmetic (math/big), random traces to run against the node and the
// stores, and the golden table that the node, Redis's scripts and
// PostgreSQL's functions all run (golden.go). Test-only: nothing but
// _test.go files and the table's generator (cmd/golden) imports it.
package refmodel

import (
	"math/big"
	"math/rand/v2"
	"time"
)

// Kind is a limit's algorithm as the model knows it.
type Kind uint8

const (
	Sliding   Kind = iota // Kong's sliding window: cur + prev * weight
	Fixed                 // epoch-aligned fixed window
	Token                 // token bucket
	Leaky                 // leaky bucket
	Anchored              // fixed window opened by the key's first counted hit
	Log                   // sliding log: each admitted hit weighs for exactly Window
	Precision             // sliding window counted in sub-windows of Limit.Precision
)

// Limit is one limit of a request.
type Limit struct {
	Kind      Kind
	Limit     float64
	Window    time.Duration
	Burst     float64       // buckets: capacity, 0 means Limit
	Precision time.Duration // Precision: the sub-window size, a divisor of Window
}

func (l Limit) bucket() bool { return l.Kind == Token || l.Kind == Leaky }

func (l Limit) burst() float64 {
	if l.Burst == 0 {
		return l.Limit
	}
	return l.Burst
}

// counter returns the size of the epoch-aligned windows a window limit
// counts in: Precision for Precision, Window for Sliding and Fixed, 0 for
// the other kinds.
func (l Limit) counter() int64 {
	switch l.Kind {
	case Sliding, Fixed:
		return l.Window.Milliseconds()
	case Precision:
		return l.Precision.Milliseconds()
	}
	return 0
}

// State is one limit's part of a decision, as the model computes it.
type State struct {
	Limit      Limit
	Allowed    bool
	Rate       *big.Rat      // what counts against the limit after the decision
	Remaining  float64       // the largest whole cost that would pass now
	Reset      time.Duration // until the hits counted no longer weigh on it
	RetryAfter time.Duration // 0 when allowed
}

// Decision is the model's answer.
type Decision struct {
	Allowed    bool
	RetryAfter time.Duration
	Limits     []State
}

type winKey struct {
	size, start int64
}

type bucketKey struct {
	kind   Kind
	window int64
}

type bucket struct {
	at    int64
	level *big.Rat // in cost units
}

// anchor is an anchored window: opened at at, holding count.
type anchor struct {
	at    int64
	count *big.Rat
}

// entry is one admitted hit of a sliding log.
type entry struct {
	at   int64
	cost *big.Rat
}

// Model holds one key's counts: windows by size and start, buckets by kind
// and window, anchored windows and logs by window. Its clock never goes
// backwards: Decide's now never decreases.
type Model struct {
	windows  map[winKey]*big.Rat
	buckets  map[bucketKey]bucket
	anchored map[int64]anchor
	logs     map[int64][]entry
}

// New returns an empty model.
func New() *Model {
	return &Model{
		windows:  make(map[winKey]*big.Rat),
		buckets:  make(map[bucketKey]bucket),
		anchored: make(map[int64]anchor),
		logs:     make(map[int64][]entry),
	}
}

func rat(f float64) *big.Rat { return new(big.Rat).SetFloat64(f) }

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

func (m *Model) count(size, start int64) *big.Rat {
	if v, ok := m.windows[winKey{size, start}]; ok {
		return v
	}
	return new(big.Rat)
}

// rate returns what counts against l at now: a window's count, a bucket's
// level, an anchored window's count, a log's sum.
func (m *Model) rate(l Limit, now int64) *big.Rat {
	w := l.Window.Milliseconds()
	switch l.Kind {
	case Token, Leaky:
		return m.level(l, now)
	case Fixed:
		return new(big.Rat).Set(m.count(w, floorDiv(now, w)*w))
	case Sliding: // cur + prev * (size - (now mod size)) / size
		start := floorDiv(now, w) * w
		weight := big.NewRat(w-(now-start), w)
		r := weight.Mul(weight, m.count(w, start-w))
		return r.Add(r, m.count(w, start))
	case Precision:
		// The p-windows that start after now - W, plus the one holding
		// now - W weighted by (p - (now - W) mod p) / p.
		p, from := l.Precision.Milliseconds(), now-w
		hold := floorDiv(from, p) * p
		r := big.NewRat(p-(from-hold), p)
		r.Mul(r, m.count(p, hold))
		for s := hold + p; s <= now; s += p {
			r.Add(r, m.count(p, s))
		}
		return r
	case Anchored:
		if a, ok := m.anchored[w]; ok && now < a.at+w {
			return new(big.Rat).Set(a.count)
		}
		return new(big.Rat)
	case Log: // the hits at t with t > now - W
		r := new(big.Rat)
		for _, e := range m.logs[w] {
			if e.at > now-w {
				r.Add(r, e.cost)
			}
		}
		return r
	}
	panic("refmodel: unknown kind")
}

// fits reports whether cost passes l at now (ms).
func (m *Model) fits(l Limit, cost *big.Rat, now int64) bool {
	r := m.rate(l, now)
	if l.bucket() {
		return r.Add(r, cost).Cmp(rat(l.burst())) <= 0
	}
	return r.Add(r, cost).Cmp(rat(l.Limit)) <= 0
}

// level returns a bucket's level at now: it drains Limit per Window, never
// below zero, and a clock behind its last change drains nothing.
func (m *Model) level(l Limit, now int64) *big.Rat {
	b, ok := m.buckets[bucketKey{l.Kind, l.Window.Milliseconds()}]
	if !ok {
		return new(big.Rat)
	}
	elapsed := max(0, now-b.at)
	drained := new(big.Rat).Mul(rat(l.Limit), big.NewRat(elapsed, l.Window.Milliseconds()))
	lvl := new(big.Rat).Sub(b.level, drained)
	if lvl.Sign() < 0 {
		lvl.SetInt64(0)
	}
	return lvl
}

// Decide decides a request of cost at now (ms) against limits, all or
// nothing, and counts it when it passes.
func (m *Model) Decide(now int64, cost float64, limits []Limit) Decision {
	m.forget(now)
	c := rat(cost)
	d := Decision{Allowed: true, Limits: make([]State, len(limits))}
	for i, l := range limits {
		d.Limits[i].Limit = l
		d.Limits[i].Allowed = m.fits(l, c, now)
		d.Allowed = d.Allowed && d.Limits[i].Allowed
	}
	if d.Allowed && cost > 0 {
		m.count1(now, c, limits)
	}
	for i, l := range limits {
		st := &d.Limits[i]
		st.Rate = m.rate(l, now)
		st.Remaining = m.remaining(l, now)
		st.Reset = m.reset(l, now)
		if !st.Allowed {
			st.RetryAfter = m.retryAfter(l, c, now)
			d.RetryAfter = max(d.RetryAfter, st.RetryAfter)
		}
	}
	return d
}

// forget drops the log entries that no longer weigh at now, nor ever will:
// the clock does not go back.
func (m *Model) forget(now int64) {
	for w, es := range m.logs {
		n := 0
		for n < len(es) && es[n].at <= now-w {
			n++
		}
		m.logs[w] = es[n:]
	}
}

// count1 adds c once to each window size, bucket, anchored window and log
// of limits.
func (m *Model) count1(now int64, c *big.Rat, limits []Limit) {
	doneW := map[int64]bool{}
	doneB := map[bucketKey]bool{}
	for _, l := range limits {
		size := l.Window.Milliseconds()
		switch {
		case l.bucket():
			k := bucketKey{l.Kind, size}
			if doneB[k] {
				continue
			}
			doneB[k] = true
			lvl := m.level(l, now)
			at := now
			if b, ok := m.buckets[k]; ok {
				at = max(b.at, now)
			}
			m.buckets[k] = bucket{at: at, level: lvl.Add(lvl, c)}
		case l.Kind == Anchored || l.Kind == Log:
			k := bucketKey{l.Kind, size}
			if doneB[k] {
				continue
			}
			doneB[k] = true
			if l.Kind == Log {
				m.logs[size] = append(m.logs[size], entry{at: now, cost: c})
				continue
			}
			if a, ok := m.anchored[size]; ok && now < a.at+size {
				m.anchored[size] = anchor{at: a.at, count: new(big.Rat).Add(a.count, c)}
			} else { // the first counted hit opens [now, now + W)
				m.anchored[size] = anchor{at: now, count: c}
			}
		default:
			size = l.counter()
			if doneW[size] {
				continue
			}
			doneW[size] = true
			k := winKey{size, floorDiv(now, size) * size}
			m.windows[k] = new(big.Rat).Add(m.count(k.size, k.start), c)
		}
	}
}

// remaining returns the largest whole cost that passes l at now.
func (m *Model) remaining(l Limit, now int64) float64 {
	lo, hi := int64(0), int64(l.burst()+l.Limit)+1
	if !m.fits(l, new(big.Rat), now) {
		return 0
	}
	for lo < hi { // largest n with fits(n)
		mid := lo + (hi-lo+1)/2
		if m.fits(l, big.NewRat(mid, 1), now) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return float64(lo)
}

// retryAfter returns the least whole ms d at which cost passes l, if nothing
// else comes: fits never turns false again as time passes without hits.
func (m *Model) retryAfter(l Limit, c *big.Rat, now int64) time.Duration {
	return first(func(d int64) bool { return m.fits(l, c, now+d) })
}

// reset returns the time until the hits counted against l no longer weigh
// on it, if no more come:
//   - Fixed: the end of the window;
//   - Sliding and Precision: until now - W passes the end of the newest
//     (sub-)window with hits that still weighs (Sliding: its two windows);
//   - buckets: the least whole ms at which the level is 0;
//   - Anchored: the window's end, 0 when the key has none;
//   - Log: until the newest entry stops weighing, 0 when none weighs.
func (m *Model) reset(l Limit, now int64) time.Duration {
	w := l.Window.Milliseconds()
	ms := func(d int64) time.Duration { return time.Duration(d) * time.Millisecond }
	switch l.Kind {
	case Fixed:
		return ms(floorDiv(now, w)*w + w - now)
	case Sliding, Precision:
		p := l.counter()
		hold := floorDiv(now-w, p) * p
		for s := floorDiv(now, p) * p; s >= hold; s -= p {
			if m.count(p, s).Sign() != 0 {
				return ms(s + p + w - now)
			}
		}
		return 0
	case Token, Leaky:
		return first(func(d int64) bool { return m.level(l, now+d).Sign() == 0 })
	case Anchored:
		if a, ok := m.anchored[w]; ok && now < a.at+w {
			return ms(a.at + w - now)
		}
		return 0
	case Log:
		newest := int64(0)
		found := false
		for _, e := range m.logs[w] {
			if e.at > now-w {
				newest, found = e.at, true
			}
		}
		if !found {
			return 0
		}
		return ms(newest + w - now)
	}
	panic("refmodel: unknown kind")
}

// first returns the least whole ms d >= 0 with ok(d), as a duration; ok
// never turns false again as d grows, and holds for some d.
func first(ok func(int64) bool) time.Duration {
	if ok(0) {
		return 0
	}
	hi := int64(1)
	for !ok(hi) {
		hi *= 2
	}
	lo := hi / 2 // !ok(lo)
	for lo+1 < hi {
		mid := lo + (hi-lo)/2
		if ok(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return time.Duration(hi) * time.Millisecond
}

// Step is one request of a trace.
type Step struct {
	Advance time.Duration // clock move before the request
	// Probe, when set, moves the clock instead to an instant the previous
	// decision named (Advance when it named none).
	Probe  Probe
	Cost   float64
	Limits []Limit
}

// Probe is an instant a decision names, relative to its now.
type Probe uint8

const (
	NoProbe     Probe = iota
	AtRetry           // its RetryAfter, when it was denied
	BeforeRetry       // 1 ms before its RetryAfter
	AtReset           // the least non-zero Reset of its limits
	BeforeReset       // 1 ms before that Reset
)

// Move returns the clock move before s, after the decision prev (nil
// before the first step).
func (s Step) Move(prev *Decision) time.Duration {
	if prev == nil || s.Probe == NoProbe {
		return s.Advance
	}
	at := time.Duration(0)
	switch s.Probe {
	case AtRetry, BeforeRetry:
		at = prev.RetryAfter
	case AtReset, BeforeReset:
		for _, st := range prev.Limits {
			if st.Reset > 0 && (at == 0 || st.Reset < at) {
				at = st.Reset
			}
		}
	}
	if at == 0 {
		return s.Advance
	}
	if s.Probe == BeforeRetry || s.Probe == BeforeReset {
		at -= time.Millisecond
	}
	return at
}

// Windows are the window sizes traces use: the namespace's window sizes,
// and the sub-window sizes of Precision limits.
var Windows = []time.Duration{250 * time.Millisecond, time.Second, time.Minute}

// keyedWindows are the windows of Anchored and Log limits: any whole ms.
var keyedWindows = []time.Duration{250 * time.Millisecond, 700 * time.Millisecond, time.Second, 2500 * time.Millisecond, time.Minute}

// spans are the numbers of sub-windows a Precision limit's Window holds.
var spans = []time.Duration{1, 2, 3, 4, 7, 12, 60}

// Trace returns n random steps for one key: limits drawn once (one to three
// of them: windows and buckets, on a grid of quarters so that every
// quantity is exact in float64), costs of 0 to 3 in quarters, clock moves of
// up to a quarter window.
func Trace(r *rand.Rand, n int) []Step {
	return Mix{Kinds: []Kind{Sliding, Fixed, Token, Leaky}, Most: 3}.Trace(r, n)
}

// Mix is what a trace draws from.
type Mix struct {
	Kinds []Kind // Anchored and Log over windows of Windows and others, Precision over sub-windows of Windows, 1 to 60 of them
	Most  int    // limits a request: 1 to Most
	// Probes makes one step in four a Probe: the clock moves to the
	// previous decision's RetryAfter or Reset, or 1 ms before.
	Probes bool
	// Subsets makes each step's limits but the first's a random non-empty
	// subset of the trace's, in their order: a state counted by some limits
	// is then read by others used later. The first step names every limit:
	// a node keeps a precision's sub-windows beyond the previous one only
	// from the first request that names it (ratelimiting.Limit.Precision).
	Subsets bool
}

// Trace returns n random steps for one key, as the package's Trace does,
// with limits drawn from x.
func (x Mix) Trace(r *rand.Rand, n int) []Step {
	var limits []Limit
	usedB := map[bucketKey]bool{}
	for range 1 + r.IntN(x.Most) {
		l := Limit{Kind: x.Kinds[r.IntN(len(x.Kinds))], Window: Windows[r.IntN(len(Windows))], Limit: float64(1+r.IntN(40)) / 4 * float64(1+r.IntN(4))}
		switch {
		case l.bucket():
			k := bucketKey{l.Kind, l.Window.Milliseconds()}
			if usedB[k] {
				continue // one bucket, one rate
			}
			usedB[k] = true
			if r.IntN(2) == 0 {
				l.Burst = float64(4+r.IntN(40)) / 4
			}
		case l.Kind == Anchored || l.Kind == Log:
			l.Window = keyedWindows[r.IntN(len(keyedWindows))]
		case l.Kind == Precision:
			l.Precision = l.Window
			l.Window *= spans[r.IntN(len(spans))]
		}
		limits = append(limits, l)
	}
	steps := make([]Step, n)
	for i := range steps {
		w := Windows[r.IntN(len(Windows))]
		adv := time.Duration(r.Int64N(w.Milliseconds()/4+1)) * time.Millisecond
		cost := float64(r.IntN(13)) / 4
		steps[i] = Step{Advance: adv, Cost: cost, Limits: limits}
		if x.Probes && r.IntN(4) == 0 {
			steps[i].Probe = Probe(1 + r.IntN(4))
		}
		if x.Subsets && i > 0 {
			steps[i].Limits = subset(r, limits)
		}
	}
	for i := range steps { // no cost above a limit: the library refuses it
		s := &steps[i]
		for _, l := range s.Limits {
			s.Cost = min(s.Cost, l.Limit, l.burst())
		}
	}
	return steps
}

// subset returns a random non-empty subset of limits, in their order.
func subset(r *rand.Rand, limits []Limit) []Limit {
	for {
		var out []Limit
		for _, l := range limits {
			if r.IntN(2) == 0 {
				out = append(out, l)
			}
		}
		if len(out) > 0 {
			return out
		}
	}
}
