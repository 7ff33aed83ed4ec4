package strategy

import (
	"context"
	"math"
	"time"
)

// Buckets. A bucket is identified by (namespace, key, kind, window): Kind
// tells a token bucket from a leaky bucket of the same key and window (the
// caller's numbering; stores only keep them apart). Its state is GCRA's
// theoretical arrival time, held exactly as a time and the level at it:
//
//	At:    the instant of the bucket's last change, Unix milliseconds;
//	Level: how full it was then, in cost units times the window in
//	       milliseconds (cost c adds c * window_ms), so that with whole
//	       costs, rates and windows every step is exact in float64.
//
// A bucket drains Rate (its limit per window) of Level per millisecond, and
// never below zero: a store that does not hold a bucket holds it empty
// (Level 0). The arithmetic (internal/arith: Level, BucketFits, BucketAdd)
// is computed by every store in float64 in exactly the same order, so the
// node and each store decide every request the same way.

// BucketState is a bucket as a store holds it.
type BucketState struct {
	Key    string
	Kind   uint8
	Window time.Duration
	At     int64   // Unix milliseconds of the last change
	Level  float64 // cost units times window milliseconds
	// RetryAt is set for a sliding log (KindLog) in the result of a denied
	// check: the Unix millisecond at which the same request fits.
	RetryAt int64
}

// BucketDiff is cost a node consumed from a bucket since its last push,
// dated by the first of those hits: the store adds it with arith.BucketAdd at At,
// draining at Rate. A bucket's cost may be negative: tokens a node gives
// back (quota it was granted and did not use); the level it leaves is
// never read below empty (arith.Level). For an anchored window or a log
// it is the cost of the hits of one millisecond, At, that the node counted
// on its own (Rate is not used: nodes send 1), and positive.
type BucketDiff struct {
	Namespace string
	Key       string
	Kind      uint8
	Window    time.Duration // whole milliseconds, > 0
	At        int64         // Unix milliseconds of the first hit
	Cost      float64       // finite and != 0; > 0 for an anchored window or a log (CostValid)
	Rate      float64       // the bucket's limit per window, > 0
}

// BucketRef names one bucket of a namespace.
type BucketRef struct {
	Key    string
	Kind   uint8
	Window time.Duration
}

// BucketStore is implemented by strategies that keep buckets, anchored
// windows and sliding logs (keyed.go). Such a strategy also applies
// Batch.Buckets in PushDiffs and PushAndCount (in the same atomic step as
// the batch's diffs and its (Node, Seq) record, so a bucket diff too is
// applied at most once): a bucket's with arith.BucketAdd, an anchored
// window's with arith.AnchoredAdd at the diff's At, a log's with
// arith.Log.Add at its At (internal/arith). When
// it is a Checker, it decides those limits (CheckLimit.Kind != 0) in
// CheckAndCount, atomically with the window limits of the same check.
type BucketStore interface {
	// GetBuckets returns the state of each named bucket the store holds;
	// buckets it does not hold (empty ones) are left out.
	GetBuckets(ctx context.Context, namespace string, refs []BucketRef) ([]BucketState, error)
}

// CostValid reports whether d's cost is one a store applies: finite and
// non-zero for a bucket (negative gives tokens back), finite and > 0 for
// an anchored window or a log (hits).
func (d *BucketDiff) CostValid() bool {
	if math.IsNaN(d.Cost) || math.IsInf(d.Cost, 0) {
		return false
	}
	if d.Kind == KindAnchored || d.Kind == KindLog {
		return d.Cost > 0
	}
	return d.Cost != 0
}
