// Package ratelimiting is the public face of ratesync: Kong's
// kong.tools.public.rate-limiting library in Go. An Instance holds
// namespaces; each namespace counts hits per key in epoch-aligned windows of
// its configured sizes, in a node-local shm dict, and syncs them with a
// central store (strategy) periodically, synchronously, or never, as its
// SyncRate says.
//
// Increment and SlidingWindow are Kong's increment and sliding_window: they
// add to and read a key's sliding-window rate,
//
//	rate = current + previous * (size - now mod size) / size
//
// at millisecond resolution. Allow, AllowOne and Check decide a request
// against one or more limits at once, all or nothing, and count it only
// when it passes. Limit.Algorithm says how a limit counts:
//
//   - SlidingWindow (the zero value): Kong's sliding window counter, the
//     current window's count plus the previous window's weighted by its
//     share still inside, on one of the namespace's window sizes. With a
//     Precision (one of the sizes, dividing Window into at most
//     MaxPrecisionWindows) the window is counted in sub-windows of that
//     size, only the oldest of them weighted.
//   - FixedWindow (or Limit.Fixed): the current epoch-aligned window alone.
//   - AnchoredWindow: a fixed window that opens at a key's first counted
//     hit and closes Window later.
//   - SlidingLog: each admitted hit weighs for exactly Window; exact, with
//     Limit at most MaxLogLimit.
//   - TokenBucket: refills Limit tokens per Window and holds at most Burst;
//     GCRA inside, exact.
//   - LeakyBucket: a level that drains Limit per Window up to a capacity of
//     Burst; it decides as a token bucket with the same numbers.
//
// Buckets, anchored windows, sliding logs and precision limits take any
// Window of whole milliseconds; other windows take the namespace's sizes. Anchored windows and
// sliding logs are decided as a whole per key, so a namespace that syncs
// periodically refuses them. Every mode decides exactly: a request that
// fits exactly passes, and RetryAfter is exact to the millisecond.
//
// ratelimiting owns the decisions: it plans a request's limits, reads their
// state, judges it with the arithmetic of internal/arith and counts it;
// shm owns the counters, syncer the traffic with the store, namespace the
// configuration.
package ratelimiting
