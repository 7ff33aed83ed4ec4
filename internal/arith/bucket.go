package arith

import "math"

// Token and leaky buckets are GCRA, held exactly: a bucket's state is its
// level at an instant (at, Unix ms), in cost units times the window in ms,
// draining rate = Limit per ms (so that a whole cost over a whole window is
// an exact float64). A bucket of capacity burst admits cost at now when
// level(now) + cost * window <= burst * window. A token bucket's tokens are
// burst - level / window; a leaky bucket's level is level / window: both
// decide exactly alike.

// Level returns the level at now of a bucket at level at instant at,
// draining rate per ms: never below 0; a clock behind at drains nothing.
func Level(level float64, at int64, rate float64, now int64) float64 {
	elapsed := now - at
	if elapsed < 0 {
		elapsed = 0
	}
	l := level - float64(float64(elapsed)*rate)
	if l < 0 {
		return 0
	}
	return l
}

// BucketFits reports whether a request of cost fits a bucket of capacity
// burst over window ms at level: level + cost * window <= burst * window.
func BucketFits(level, cost, burst float64, window int64) bool {
	w := float64(window)
	return level+float64(cost*w) <= float64(burst*w)
}

// BucketAdd returns the state of a bucket (level at at, draining rate per
// ms) once cost is counted at now: the level drained to now plus cost, at
// the later of at and now. No clamping at capacity: a debt stays.
func BucketAdd(level float64, at int64, rate, cost float64, window, now int64) (float64, int64) {
	return Level(level, at, rate, now) + float64(cost*float64(window)), max(at, now)
}

// BucketRemaining returns the largest whole cost n >= 0 that fits a bucket
// of capacity burst at level lvl (BucketFits), 0 when none does.
func BucketRemaining(lvl, burst float64, window int64) float64 {
	// WholeFit's search, written out: this is every bucket decision's path.
	n := max(0, math.Floor(burst-lvl/float64(window)))
	for i := 0; i < 64 && n > 0 && !BucketFits(lvl, n, burst, window); i++ {
		n--
	}
	for i := 0; i < 64 && n+1 != n && BucketFits(lvl, n+1, burst, window); i++ {
		n++
	}
	return n
}

// Bucket is a bucket as a decision reads it: its level at instant t is
// Level(Base, Origin, Rate, t), over Window ms.
type Bucket struct {
	Base   float64
	Origin int64
	Rate   float64
	Window int64 // ms
}

// Level returns b's level at t.
func (b *Bucket) Level(t int64) float64 { return Level(b.Base, b.Origin, b.Rate, t) }

// Fits reports whether a request of cost fits b at t under capacity burst.
func (b *Bucket) Fits(t int64, cost, burst float64) bool {
	return BucketFits(b.Level(t), cost, burst, b.Window)
}

// EmptyIn returns the least d at which b, at level lvl at now, is empty:
// Level(now + d) == 0.
func (b *Bucket) EmptyIn(now int64, lvl float64) int64 {
	d := msGuess(lvl / b.Rate)
	if d > 0 && b.Level(now+d-1) == 0 {
		return firstMs(now, func(t int64) bool { return b.Level(t) == 0 }, d)
	}
	if b.Level(now+d) == 0 {
		return d
	}
	return firstMs(now, func(t int64) bool { return b.Level(t) == 0 }, d)
}

// Retry returns the least whole ms d at which a request of cost fits b
// under capacity burst, at now + d, if no more hits come.
func (b *Bucket) Retry(now int64, cost, burst float64) int64 {
	need := b.Level(now) + cost*float64(b.Window) - burst*float64(b.Window)
	return firstMs(now, func(t int64) bool { return b.Fits(t, cost, burst) }, msGuess(need/b.Rate))
}
