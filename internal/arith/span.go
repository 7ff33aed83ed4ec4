package arith

// A sliding window of span W counted in sub-windows of size p (the limit's
// Precision) reads the W/p + 1 newest sub-windows, newest first: the
// current one, those between, and the oldest, which holds now - W and
// weighs as the previous window of a sliding window of size p does.

// SpanParts returns the counts of a span's sub-windows (newest first, at
// least two) as a sliding window's: cur, the newest and those between
// summed; oldest, the last.
func SpanParts(counts []float64) (cur, oldest float64) {
	k := len(counts) - 1
	mid := 0.0
	for _, c := range counts[1:k] {
		mid += c
	}
	return counts[0] + mid, counts[k]
}

// SpanFits reports whether a request of cost fits a span whose sub-windows
// of size ms hold counts (newest first), elapsed ms into the newest:
// WindowFits of SpanParts.
func SpanFits(counts []float64, cost, limit float64, size, elapsed int64) bool {
	cur, prev := SpanParts(counts)
	return WindowFits(cur, prev, cost, limit, size, elapsed, false)
}

// SpanReset returns the ms until a span of span ms over sub-windows of size
// ms, elapsed ms into the newest, stops weighing: until now - span passes the
// end of the newest sub-window with hits (counts newest first); 0 when none
// has hits.
func SpanReset(counts []float64, span, size, elapsed int64) int64 {
	for i, c := range counts {
		if c > 0 {
			return size - elapsed + span - int64(i)*size
		}
	}
	return 0
}

// MaxSpan bounds the sub-windows SpanRetry handles: a span holds at most
// MaxSpan + 1 of them.
const MaxSpan = 60

// SpanRetry returns the ms from now until a request of cost fits a span
// whose sub-windows hold counts (newest first, the newest elapsed ms in, at
// most MaxSpan + 1), if no more hits come: m sub-windows on, the newest m
// are empty and the oldest m gone; within one the rate only falls, so a
// binary search finds the first millisecond that fits, with SpanFits itself.
func SpanRetry(counts []float64, cost, limit float64, size, elapsed int64) int64 {
	var buf [MaxSpan + 1]float64
	shifted := buf[:len(counts)]
	for m := range len(counts) {
		for i := range shifted {
			shifted[i] = 0
			if i >= m {
				shifted[i] = counts[i-m]
			}
		}
		fits := func(x int64) bool { return SpanFits(shifted, cost, limit, size, x) }
		if !fits(size - 1) {
			continue
		}
		lo, hi := int64(0), size-1
		if m == 0 {
			lo = elapsed
		}
		for lo < hi {
			if mid := lo + (hi-lo)/2; fits(mid) {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		return int64(m)*size + lo - elapsed
	}
	return int64(len(counts))*size - elapsed
}
