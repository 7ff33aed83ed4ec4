// Package arith is the arithmetic of every algorithm ratesync decides:
// sliding and fixed windows, sliding windows over precision sub-windows,
// anchored windows, sliding logs, and token and leaky buckets (GCRA). Every
// function is pure: time is a parameter (Unix milliseconds, or milliseconds
// into a window), and nothing is read or kept.
//
// The node (ratelimiting) and the memory store (strategy/memory) decide with
// these functions; the Redis scripts (strategy/redis/lane.lua) and the
// PostgreSQL functions (strategy/postgres/migrations) compute the same
// float64 operations in the same order, so that every implementation decides
// every request alike. One table of golden cases, generated from
// internal/refmodel, checks all of them.
//
// arith owns no state and no I/O: where counts come from (shm, a store) and
// where they go is the caller's business.
package arith

import (
	"math"
	"time"
)

// maxMs is the most milliseconds a time.Duration holds.
const maxMs = math.MaxInt64 / int64(time.Millisecond)

// Ms returns v milliseconds as a Duration, saturated at the longest one.
func Ms(v int64) time.Duration {
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

// WholeFit returns the largest whole n >= 0 with fits(n), from the guess
// n0 (fits never turns true again as n grows); 0 when none fits.
func WholeFit(fits func(float64) bool, n0 float64) float64 {
	n := max(0, float64(int64(max(0, min(n0, 1<<53)))))
	for i := 0; i < 64 && n > 0 && !fits(n); i++ {
		n--
	}
	for i := 0; i < 64 && n+1 != n && fits(n+1); i++ {
		n++
	}
	return n
}
