package arith

import "math"

// Leases: what a node may admit on its own from units the store granted
// it. The store judges a grant of k units as a check of cost k, with the
// arithmetic of each algorithm above; what follows is how long the units
// stay safe and what they are worth while held.

// WindowLeaseEnd returns until when units granted in a window (a fixed,
// sliding or anchored window, or a precision sub-window) starting at start,
// size ms long, stay safe: its end. Within it a sliding window's weight of
// the previous window only falls, and a fixed window's count only grows by
// what the store records.
func WindowLeaseEnd(start, size int64) int64 { return start + size }

// BucketLeaseEnd returns until when tokens taken from a bucket stay safe:
// while the store's bucket, as the grant left it (level at at, draining
// rate per ms), is not empty.
func BucketLeaseEnd(level float64, at int64, rate float64) int64 {
	return at + int64(math.Floor(level/rate))
}

// LeaseDecay returns the units per ms that tokens held from a bucket
// refilling limit per window ms lose while held: had the hits come as they
// are admitted, the store's bucket would have refilled meanwhile, up to its
// capacity, and units held the whole time would admit a burst above it.
func LeaseDecay(limit float64, window int64) float64 { return limit / float64(window) }

// LeaseLeft returns what held units, granted at at and losing decay per
// ms, may still admit at now: never more than held, rounded toward less.
func LeaseLeft(held, decay float64, at, now int64) float64 {
	if decay == 0 {
		return held
	}
	return held - decay*float64(now-at)*(1+1e-9)
}

// SafeUnits rounds units a node gives back down to a multiple of 1/1024,
// so that float rounding never returns more than it held.
func SafeUnits(v float64) float64 { return math.Floor(v*1024) / 1024 }
