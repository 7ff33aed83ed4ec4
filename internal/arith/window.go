package arith

import (
	"time"
)

// Windows are aligned to the Unix epoch: the window of size s holding
// instant t starts at floor(t / s) * s, so every node puts a hit in the
// same window without talking to the others.

// Start returns the Start of the window of size ms holding instant now ms
// (floor division, so instants before the epoch align too).
func Start(now, size int64) int64 {
	q := now / size
	if now%size != 0 && now < 0 {
		q--
	}
	return q * size
}

// WindowStart returns the start of the window of size holding t, at
// millisecond resolution.
func WindowStart(t time.Time, size time.Duration) time.Time {
	return time.UnixMilli(Start(t.UnixMilli(), size.Milliseconds()))
}

// Weight returns the share of the previous window still inside a sliding
// window of size ms, elapsed ms into the current one: (size - elapsed) / size.
func Weight(elapsed, size int64) float64 {
	return float64(size-elapsed) / float64(size)
}

// WindowFits reports whether a request of cost fits a window limit, elapsed
// ms into the current window of size ms, which holds cur (the previous one
// prev):
//
//	fixed:   cur + cost <= limit
//	sliding: (cur + cost) * size + prev * (size - elapsed) <= limit * size
//
// The sliding form is cur + cost + prev * weight <= limit, scaled by size so
// that whole counts are judged exactly: a request that fits exactly passes.
func WindowFits(cur, prev, cost, limit float64, size, elapsed int64, fixed bool) bool {
	if fixed {
		return cur+cost <= limit
	}
	s := float64(size)
	return float64((cur+cost)*s)+float64(prev*float64(size-elapsed)) <= float64(limit*s)
}

// Window is what a window limit reads: the key's counts in the current
// window (Cur) and the previous one (Prev), Elapsed ms into the current
// window of Size ms.
type Window struct {
	Cur, Prev     float64
	Size, Elapsed int64
}

// fits is WindowFits of w.
func (w *Window) fits(cost, limit float64, fixed bool) bool {
	return WindowFits(w.Cur, w.Prev, cost, limit, w.Size, w.Elapsed, fixed)
}

// Rate returns w's rate: Cur, plus Prev times the weight when sliding.
func (w *Window) Rate(fixed bool) float64 {
	if fixed {
		return w.Cur
	}
	return w.Cur + w.Prev*Weight(w.Elapsed, w.Size)
}

// Remaining returns the largest whole cost n >= 0 that fits w under limit
// (WindowFits), from the guess n0; 0 when none does.
func (w *Window) Remaining(limit, n0 float64, fixed bool) float64 {
	// WholeFit's search, written out: this is every window decision's path.
	n := max(0, n0)
	for i := 0; i < 64 && n > 0 && !w.fits(n, limit, fixed); i++ {
		n--
	}
	for i := 0; i < 64 && n+1 != n && w.fits(n+1, limit, fixed); i++ {
		n++
	}
	return n
}

// Reset returns the ms until w's hits stop weighing: the end of the window
// when fixed; when sliding, the end of the next window while the current
// one holds hits, else the end of this one while the previous one does.
func (w *Window) Reset(fixed bool) int64 {
	switch {
	case fixed:
		return w.Size - w.Elapsed
	case w.Cur > 0:
		return 2*w.Size - w.Elapsed
	case w.Prev > 0:
		return w.Size - w.Elapsed
	}
	return 0
}

// Retry returns the ms from now until a request of cost fits under limit,
// if no more hits come. The sliding rate never grows as time passes without
// hits, so a binary search over each window finds the first millisecond
// that fits, with the very comparison a decision makes.
func (w Window) Retry(cost, limit float64, fixed bool) int64 {
	size := w.Size
	first := func(cur, prev float64, from int64) (int64, bool) {
		fits := func(x int64) bool { return WindowFits(cur, prev, cost, limit, size, x, fixed) }
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
	if x, ok := first(w.Cur, w.Prev, w.Elapsed); ok {
		return x - w.Elapsed
	}
	if x, ok := first(0, w.Cur, 0); ok {
		return size - w.Elapsed + x
	}
	return 2*size - w.Elapsed
}
