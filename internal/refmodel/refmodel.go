// Package refmodel is a reference model of ratesync's decisions for tests:
// the semantics of every algorithm written plainly in exact rational
// arithmetic (math/big), and random traces to run against the node and the
// stores. Test-only: nothing outside _test.go files imports it.
package refmodel

import (
	"math/big"
	"math/rand/v2"
	"time"
)

// Kind is a limit's algorithm as the model knows it.
type Kind uint8

const (
	Sliding Kind = iota
	Fixed
	Token
	Leaky
)

// Limit is one limit of a request.
type Limit struct {
	Kind   Kind
	Limit  float64
	Window time.Duration
	Burst  float64 // buckets: capacity, 0 means Limit
}

func (l Limit) bucket() bool { return l.Kind == Token || l.Kind == Leaky }

func (l Limit) burst() float64 {
	if l.Burst == 0 {
		return l.Limit
	}
	return l.Burst
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

// Model holds one key's counts: windows by size and start, buckets by kind
// and window.
type Model struct {
	windows map[winKey]*big.Rat
	buckets map[bucketKey]bucket
}

// New returns an empty model.
func New() *Model {
	return &Model{windows: make(map[winKey]*big.Rat), buckets: make(map[bucketKey]bucket)}
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
// level.
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

// count1 adds c once to each window size and each bucket of limits.
func (m *Model) count1(now int64, c *big.Rat, limits []Limit) {
	doneW := map[int64]bool{}
	doneB := map[bucketKey]bool{}
	for _, l := range limits {
		size := l.Window.Milliseconds()
		if l.bucket() {
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
			continue
		}
		if doneW[size] {
			continue
		}
		doneW[size] = true
		k := winKey{size, floorDiv(now, size) * size}
		m.windows[k] = new(big.Rat).Add(m.count(k.size, k.start), c)
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
//   - Sliding: until now - W passes the end of the newest of its two
//     windows with hits;
//   - buckets: the least whole ms at which the level is 0.
func (m *Model) reset(l Limit, now int64) time.Duration {
	w := l.Window.Milliseconds()
	ms := func(d int64) time.Duration { return time.Duration(d) * time.Millisecond }
	switch l.Kind {
	case Fixed:
		return ms(floorDiv(now, w)*w + w - now)
	case Sliding:
		p := w
		hold := floorDiv(now-w, p) * p
		for s := floorDiv(now, p) * p; s >= hold; s -= p {
			if m.count(p, s).Sign() != 0 {
				return ms(s + p + w - now)
			}
		}
		return 0
	case Token, Leaky:
		return first(func(d int64) bool { return m.level(l, now+d).Sign() == 0 })
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
	Cost    float64
	Limits  []Limit
}

// Windows are the window sizes traces use.
var Windows = []time.Duration{250 * time.Millisecond, time.Second, time.Minute}

// Trace returns n random steps for one key: limits drawn once (one to three
// of them: windows and buckets, on a grid of quarters so that every
// quantity is exact in float64), costs of 0 to 3 in quarters, clock moves of
// up to a quarter window.
func Trace(r *rand.Rand, n int) []Step {
	var limits []Limit
	usedB := map[bucketKey]bool{}
	for range 1 + r.IntN(3) {
		l := Limit{Kind: Kind(r.IntN(4)), Window: Windows[r.IntN(len(Windows))], Limit: float64(1+r.IntN(40)) / 4 * float64(1+r.IntN(4))}
		if l.bucket() {
			k := bucketKey{l.Kind, l.Window.Milliseconds()}
			if usedB[k] {
				continue // one bucket, one rate
			}
			usedB[k] = true
			if r.IntN(2) == 0 {
				l.Burst = float64(4+r.IntN(40)) / 4
			}
		}
		limits = append(limits, l)
	}
	smallest := limits[0].Limit
	for _, l := range limits {
		smallest = min(smallest, l.Limit, l.burst())
	}
	steps := make([]Step, n)
	for i := range steps {
		w := Windows[r.IntN(len(Windows))]
		adv := time.Duration(r.Int64N(w.Milliseconds()/4+1)) * time.Millisecond
		cost := float64(r.IntN(13)) / 4
		if cost > smallest {
			cost = smallest
		}
		steps[i] = Step{Advance: adv, Cost: cost, Limits: limits}
	}
	return steps
}
