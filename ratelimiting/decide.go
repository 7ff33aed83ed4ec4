package ratelimiting

import (
	"math"
	"time"

	"github.com/ratesync/ratesync/internal/arith"
)

// The decide phase: each limit's LimitState from the state the executor
// left, with the arithmetic every store computes too (internal/arith), so
// a node and its store decide alike.

// decide writes each limit's state, from the state the executor left, into
// out and returns the Decision's RetryAfter.
func (p *plan) decide(key string, allowed bool, out []LimitState) (retry time.Duration) {
	for i := range p.limits {
		st, l := &out[i], &p.limits[i]
		switch r := p.idx[i]; r.kind {
		case refWindow:
			g := &p.groups[r.j]
			ws := g.state()
			windowLimitState(st, l, &ws, g.before, p.cost, allowed)
		case refSpan:
			p.spanLimitState(st, l, &p.spans[r.j], key, allowed)
		case refBucket:
			b := &p.buckets[r.j]
			bucketLimitState(st, l, &b.before, &b.after, p.cost, p.now, allowed)
		case refKeyed:
			p.keyedLimitState(st, i, &p.keyed[r.j], allowed)
		}
		if !st.Allowed {
			retry = max(retry, st.RetryAfter)
		}
	}
	return retry
}

// The judge phase's output: each limit's LimitState, from the state the
// executor read and left, computed with internal/arith, the arithmetic
// every store computes too, so a node and its store decide alike.

// The span functions of arith hold MaxPrecisionWindows + 1 sub-windows: a
// difference between the two bounds fails to compile (a negative constant
// converted to uint).
const _ = uint(arith.MaxSpan-MaxPrecisionWindows) + uint(MaxPrecisionWindows-arith.MaxSpan)

// windowLimitState writes a window limit's LimitState into out, which must
// be zero, from its state after the decision; before is the current count
// before it.
func windowLimitState(out *LimitState, l *Limit, st *arith.Window, before, cost float64, allowed bool) {
	fixed := l.fixed()
	out.Limit, out.Rate = *l, st.Rate(fixed)
	out.Remaining = st.Remaining(l.Limit, math.Floor(l.Limit-out.Rate), fixed)
	out.Reset = arith.Ms(st.Reset(fixed))
	out.Allowed = allowed || arith.WindowFits(before, st.Prev, cost, l.Limit, st.Size, st.Elapsed, fixed)
	if !out.Allowed {
		out.RetryAfter = arith.Ms(st.Retry(cost, l.Limit, fixed))
	}
}

// bucketLimitState writes a bucket limit's LimitState at now into out,
// which must be zero: before is the state the request was judged on, after
// the state once counted (the same when it was not).
func bucketLimitState(out *LimitState, l *Limit, before, after *arith.Bucket, cost float64, now int64, allowed bool) {
	burst := l.burst()
	lvl := after.Level(now)
	out.Limit, out.Rate = *l, lvl/float64(after.Window)
	out.Remaining = arith.BucketRemaining(lvl, burst, after.Window)
	if lvl > 0 {
		out.Reset = arith.Ms(after.EmptyIn(now, lvl))
	}
	out.Allowed = allowed || before.Fits(now, cost, burst)
	if !out.Allowed {
		out.RetryAfter = arith.Ms(before.Retry(now, cost, burst))
	}
}

// spanLimitState writes the LimitState of precision limit l, on span s
// of the plan, into out, which must be zero. A request that passed and
// left hits in the current sub-window needs only the counts read before
// it (s.mid, s.old: the executors keep them current); otherwise the
// span's sub-windows are read again, after the decision, each on its own.
func (p *plan) spanLimitState(out *LimitState, l *Limit, s *sgroup, key string, allowed bool) {
	g := &p.groups[s.g]
	size := g.sr.Size()
	out.Limit = *l
	if allowed && g.cur > 0 {
		// The common case needs no sub-window but the current one: the
		// span's older counts are the ones read (mid, old), and its hits
		// weigh until now - span passes the current sub-window's end.
		ws := arith.Window{Cur: g.cur + s.mid, Prev: s.old, Size: size, Elapsed: g.e}
		out.Rate = ws.Rate(false)
		out.Remaining = ws.Remaining(l.Limit, math.Floor(l.Limit-out.Rate), false)
		out.Reset = arith.Ms(size - g.e + s.span)
		out.Allowed = true
		return
	}
	var buf [MaxPrecisionWindows + 1]float64
	counts := buf[:s.span/size+1]
	counts[0] = g.cur
	w := g.w
	for back := 1; back < len(counts); back++ {
		w = g.older(w, int64(back), p.now)
		counts[back] = 0
		if w != nil {
			counts[back] = w.Value(key)
		}
	}
	cur, old := arith.SpanParts(counts)
	ws := arith.Window{Cur: cur, Prev: old, Size: size, Elapsed: g.e}
	out.Rate = ws.Rate(false)
	out.Remaining = ws.Remaining(l.Limit, math.Floor(l.Limit-out.Rate), false)
	out.Reset = arith.Ms(arith.SpanReset(counts, s.span, size, g.e))
	counts[0] = g.before
	out.Allowed = allowed || arith.SpanFits(counts, p.cost, l.Limit, size, g.e)
	if !out.Allowed {
		out.RetryAfter = arith.Ms(arith.SpanRetry(counts, p.cost, l.Limit, size, g.e))
	}
}
