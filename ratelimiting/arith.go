package ratelimiting

import (
	"math"
	"time"

	"github.com/ratesync/ratesync/strategy"
)

// The decision's arithmetic: pure functions of a limit's state and now,
// shared by every executor (check.go). Window limits judge with
// strategy.WindowFits and buckets with strategy.BucketFits, the very
// comparisons every store makes, so a node and its store decide alike.

// windowState is what a window limit reads: the key's counts in the current
// window (cur, after the decision) and the previous one, now e ms into the
// current window of size ms.
type windowState struct {
	cur, prev float64
	size, e   int64
}

// windowLimitState writes a window limit's LimitState into out, which must
// be zero, from its state after the decision; before is the current count
// before it.
func windowLimitState(out *LimitState, l *Limit, st *windowState, before, cost float64, allowed bool) {
	fixed := l.fixed()
	out.Limit, out.Rate = *l, st.cur
	if !fixed {
		out.Rate += st.prev * weight(st.e, 0, st.size)
	}
	out.Remaining = windowRemaining(st, l.Limit, math.Floor(l.Limit-out.Rate), fixed)
	switch {
	case fixed:
		out.Reset = ms(st.size - st.e)
	case st.cur > 0:
		out.Reset = ms(2*st.size - st.e)
	case st.prev > 0:
		out.Reset = ms(st.size - st.e)
	}
	out.Allowed = allowed || strategy.WindowFits(before, st.prev, cost, l.Limit, st.size, st.e, fixed)
	if !out.Allowed {
		out.RetryAfter = ms(windowRetry(*st, cost, l.Limit, fixed))
	}
}

// windowRemaining returns the largest whole cost n >= 0 that fits the
// window limit in state st (strategy.WindowFits), from the guess n0; 0 when
// none does.
func windowRemaining(st *windowState, limit, n0 float64, fixed bool) float64 {
	// wholeFit's search, written out: this is every window decision's path.
	n := max(0, n0)
	for i := 0; i < 64 && n > 0 && !strategy.WindowFits(st.cur, st.prev, n, limit, st.size, st.e, fixed); i++ {
		n--
	}
	for i := 0; i < 64 && n+1 != n && strategy.WindowFits(st.cur, st.prev, n+1, limit, st.size, st.e, fixed); i++ {
		n++
	}
	return n
}

// windowRetry returns the ms from now until a request of cost fits under
// limit, if no more hits come. The sliding rate never grows as time passes
// without hits, so a binary search over each window finds the first
// millisecond that fits, with the very comparison Check makes.
func windowRetry(st windowState, cost, limit float64, fixed bool) int64 {
	size := st.size
	first := func(cur, prev float64, from int64) (int64, bool) {
		fits := func(x int64) bool { return strategy.WindowFits(cur, prev, cost, limit, size, x, fixed) }
		if !fits(size - 1) {
			return 0, false
		}
		lo, hi := from, size-1
		for lo < hi {
			if mid := lo + (hi-lo)/2; fits(mid) {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		return lo, true
	}
	if x, ok := first(st.cur, st.prev, st.e); ok {
		return x - st.e
	}
	if x, ok := first(0, st.cur, 0); ok {
		return size - st.e + x
	}
	return 2*size - st.e
}

// bucketState is what a bucket limit reads: its level at instant t is
// max(0, base - max(0, t - origin) * rate), in cost units times the window
// in ms (shm.Buckets keeps base and origin as its word and epoch; a store's
// bucket as Level and At).
type bucketState struct {
	base   float64
	origin int64
	rate   float64
	window int64 // ms
}

// level is the state's level at t (strategy.LevelAt).
func (b bucketState) level(t int64) float64 { return strategy.LevelAt(b.base, b.origin, b.rate, t) }

// bucketLimitState writes a bucket limit's LimitState at now into out,
// which must be zero: before is the state the request was judged on, after
// the state once counted (the same when it was not).
func bucketLimitState(out *LimitState, l *Limit, before, after *bucketState, cost float64, now int64, allowed bool) {
	burst, w := l.burst(), float64(after.window)
	lvl := after.level(now)
	out.Limit, out.Rate = *l, lvl/w
	out.Remaining = bucketRemaining(lvl, burst, after.window)
	if lvl > 0 {
		out.Reset = ms(after.emptyIn(now, lvl))
	}
	out.Allowed = allowed || strategy.BucketFits(before.level(now), cost, burst, before.window)
	if !out.Allowed {
		need := before.level(now) + cost*w - burst*w
		out.RetryAfter = ms(firstMs(now, func(t int64) bool { return strategy.BucketFits(before.level(t), cost, burst, before.window) }, msGuess(need/before.rate)))
	}
}

// bucketRemaining returns the largest whole cost n >= 0 that fits a bucket
// of capacity burst at level lvl (strategy.BucketFits), 0 when none does.
func bucketRemaining(lvl, burst float64, window int64) float64 {
	// wholeFit's search, written out: this is every bucket decision's path.
	n := max(0, math.Floor(burst-lvl/float64(window)))
	for i := 0; i < 64 && n > 0 && !strategy.BucketFits(lvl, n, burst, window); i++ {
		n--
	}
	for i := 0; i < 64 && n+1 != n && strategy.BucketFits(lvl, n+1, burst, window); i++ {
		n++
	}
	return n
}

// emptyIn returns the least d at which the bucket, at level lvl at now,
// is empty: level(now + d) == 0.
func (b bucketState) emptyIn(now int64, lvl float64) int64 {
	d := msGuess(lvl / b.rate)
	if d > 0 && b.level(now+d-1) == 0 {
		return firstMs(now, func(t int64) bool { return b.level(t) == 0 }, d)
	}
	if b.level(now+d) == 0 {
		return d
	}
	return firstMs(now, func(t int64) bool { return b.level(t) == 0 }, d)
}

// firstMs returns the least d in [0, maxMs] such that ok(now + d), where
// ok never turns false again as time passes (maxMs when it never holds
// that soon); guess is close to it.
func firstMs(now int64, ok func(int64) bool, guess int64) int64 {
	d := min(max(0, guess), maxMs)
	for i := 0; i < 64 && d > 0 && ok(now+d-1); i++ {
		d--
	}
	if d > 0 && ok(now+d-1) { // far below the guess: search down
		lo := int64(-1)
		for lo+1 < d {
			if mid := lo + (d-lo)/2; mid >= 0 && ok(now+mid) {
				d = mid
			} else {
				lo = mid
			}
		}
		return d
	}
	for step := int64(1); !ok(now + d); step *= 2 { // far above: gallop, then search back
		lo := d
		if d >= maxMs-step {
			return maxMs
		}
		d += step
		if ok(now + d) {
			for lo+1 < d {
				if mid := lo + (d-lo)/2; ok(now + mid) {
					d = mid
				} else {
					lo = mid
				}
			}
			return d
		}
	}
	return d
}

// maxMs is the most milliseconds a time.Duration holds.
const maxMs = math.MaxInt64 / int64(time.Millisecond)

// ms returns v milliseconds, saturated at the longest time.Duration.
func ms(v int64) time.Duration {
	if v >= maxMs {
		return math.MaxInt64
	}
	return time.Duration(v) * time.Millisecond
}

// msGuess returns ceil(v) as whole milliseconds, within [0, maxMs].
func msGuess(v float64) int64 {
	switch {
	case !(v > 0): // NaN too
		return 0
	case v >= float64(maxMs):
		return maxMs
	}
	return int64(math.Ceil(v))
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
		ws := windowState{cur: g.cur + s.mid, prev: s.old, size: size, e: g.e}
		out.Rate = ws.cur + s.old*weight(g.e, 0, size)
		out.Remaining = windowRemaining(&ws, l.Limit, math.Floor(l.Limit-out.Rate), false)
		out.Reset = ms(size - g.e + s.span)
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
	cur, old := strategy.SpanParts(counts)
	ws := windowState{cur: cur, prev: old, size: size, e: g.e}
	out.Rate = cur + old*weight(g.e, 0, size)
	out.Remaining = windowRemaining(&ws, l.Limit, math.Floor(l.Limit-out.Rate), false)
	for i, c := range counts {
		if c > 0 { // until now - span passes the end of the newest sub-window with hits
			out.Reset = ms(size - g.e + s.span - int64(i)*size)
			break
		}
	}
	counts[0] = g.before
	out.Allowed = allowed || strategy.SpanFits(counts, p.cost, l.Limit, size, g.e)
	if !out.Allowed {
		out.RetryAfter = ms(spanRetry(counts, p.cost, l.Limit, size, g.e))
	}
}

// spanRetry returns the ms from now until a request of cost fits a
// precision limit whose sub-windows hold counts (newest first, the newest
// e ms in), if no more hits come: m sub-windows on, the newest m are empty
// and the oldest m gone; within one the rate only falls, so a binary
// search finds the first millisecond that fits, with SpanFits itself.
func spanRetry(counts []float64, cost, limit float64, size, e int64) int64 {
	var buf [MaxPrecisionWindows + 1]float64
	shifted := buf[:len(counts)]
	for m := range len(counts) {
		for i := range shifted {
			shifted[i] = 0
			if i >= m {
				shifted[i] = counts[i-m]
			}
		}
		fits := func(x int64) bool { return strategy.SpanFits(shifted, cost, limit, size, x) }
		if !fits(size - 1) {
			continue
		}
		lo, hi := int64(0), size-1
		if m == 0 {
			lo = e
		}
		for lo < hi {
			if mid := lo + (hi-lo)/2; fits(mid) {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		return int64(m)*size + lo - e
	}
	return int64(len(counts))*size - e
}

// wholeFit returns the largest whole n >= 0 with fits(n), from the guess
// n0 (fits never turns true again as n grows); 0 when none fits.
func wholeFit(fits func(float64) bool, n0 float64) float64 {
	n := max(0, float64(int64(max(0, min(n0, 1<<53)))))
	for i := 0; i < 64 && n > 0 && !fits(n); i++ {
		n--
	}
	for i := 0; i < 64 && n+1 != n && fits(n+1); i++ {
		n++
	}
	return n
}
