package ratelimiting

import (
	"github.com/ratesync/ratesync/internal/arith"
)

// The judge phase's output: each limit's LimitState, from the state the
// executor read and left, computed with internal/arith, the arithmetic
// every store computes too, so a node and its store decide alike.

// The span functions of arith hold MaxPrecisionWindows + 1 sub-windows: a
// difference between the two bounds fails to compile (a negative constant
// converted to uint).
const _ = uint(arith.MaxSpan-MaxPrecisionWindows) + uint(MaxPrecisionWindows-arith.MaxSpan)

// limitState writes limit l's state into out from the Outcome arith
// judged.
func limitState(out *LimitState, l *Limit, o arith.Outcome) {
	*out = LimitState{Limit: *l, Allowed: o.Allowed, Rate: o.Rate, Remaining: o.Remaining, Reset: arith.Ms(o.Reset), RetryAfter: arith.Ms(o.RetryAfter)}
}

// spanLimitState writes the LimitState of precision limit l, on span s
// of the plan, into out, which must be zero. A request that passed and
// left hits in the current sub-window needs only the counts read before
// it (s.mid, s.old: the executors keep them current); otherwise the
// span's sub-windows are read again, after the decision, each on its own.
func (p *plan) spanLimitState(out *LimitState, l *Limit, s *sgroup, key string, allowed bool) {
	g := &p.groups[s.g]
	size := g.sr.Size()
	if allowed && g.cur > 0 {
		// The common case needs no sub-window but the current one: the
		// span's older counts are the ones read (mid, old), and its hits
		// weigh until now - span passes the current sub-window's end.
		ws := arith.Window{Cur: g.cur + s.mid, Prev: s.old, Size: size, Elapsed: g.e}
		o := ws.Judge(g.before, p.cost, l.Limit, false, true)
		o.Reset = size - g.e + s.span
		limitState(out, l, o)
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
	limitState(out, l, arith.JudgeSpan(counts, g.before, p.cost, l.Limit, s.span, size, g.e, allowed))
}
