package httpload

import (
	"math/bits"
	"time"
)

// hist counts durations in buckets no wider than 1/64 of their value:
// exact below 64 ns, then 64 buckets for each power of two. Adding is a
// few instructions and allocates nothing; quantiles are within 1/64.
type hist [histBuckets]int64

const (
	subBits     = 6
	subBuckets  = 1 << subBits
	histBuckets = (64 - subBits) * subBuckets // up to the largest Duration
)

// bucket returns the index of d (negative durations count as 0).
func bucket(d time.Duration) int {
	v := uint64(max(d, 0))
	if v < subBuckets {
		return int(v)
	}
	e := bits.Len64(v) - subBits - 1 // v>>e is in [64, 128)
	return (e+1)*subBuckets + int(v>>e) - subBuckets
}

// value returns the middle of bucket i.
func value(i int) time.Duration {
	if i < subBuckets {
		return time.Duration(i)
	}
	e := i/subBuckets - 1
	lo := uint64(i%subBuckets+subBuckets) << e
	return time.Duration(lo + (uint64(1)<<e)/2)
}

func (h *hist) add(d time.Duration) { h[bucket(d)]++ }

func (h *hist) merge(o *hist) {
	for i, n := range o {
		h[i] += n
	}
}

// quantile returns the q-quantile (nearest rank), 0 when h is empty.
func (h *hist) quantile(q float64) time.Duration {
	var total int64
	for _, n := range h {
		total += n
	}
	if total == 0 {
		return 0
	}
	rank := max(1, int64(q*float64(total)+0.999999999))
	var seen int64
	for i, n := range h {
		seen += n
		if seen >= rank {
			return value(i)
		}
	}
	return value(histBuckets - 1)
}
