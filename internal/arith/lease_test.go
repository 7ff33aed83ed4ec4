package arith_test

import (
	"math"
	"testing"

	"github.com/ratesync/ratesync/internal/arith"
)

func TestLeaseArithmetic(t *testing.T) {
	// A bucket at level 3,000 (3 units over a window of 1,000 ms) draining
	// 2 per ms empties 1,500 ms after at.
	if got := arith.BucketLeaseEnd(3000, 10_000, 2); got != 11_500 {
		t.Errorf("BucketLeaseEnd = %d, want 11500", got)
	}
	if lvl := arith.Level(3000, 10_000, 2, arith.BucketLeaseEnd(3000, 10_000, 2)-1); lvl <= 0 {
		t.Errorf("the bucket is empty before its lease ends: level %v", lvl)
	}
	if got := arith.WindowLeaseEnd(60_000, 60_000); got != 120_000 {
		t.Errorf("WindowLeaseEnd = %d, want 120000", got)
	}
	// 10 tokens held from a bucket of 100 per second lose 0.1 a ms.
	decay := arith.LeaseDecay(100, 1000)
	if decay != 0.1 {
		t.Errorf("LeaseDecay = %v, want 0.1", decay)
	}
	for _, c := range []struct {
		held    float64
		elapsed int64
		most    float64
	}{{10, 0, 10}, {10, 50, 5}, {10, 100, 0}, {1e9, 1 << 40, 1e9 - 0.1*float64(1<<40)}} {
		got := arith.LeaseLeft(c.held, decay, 5, 5+c.elapsed)
		if got > c.most || got < c.most-1e-6*math.Max(1, math.Abs(c.most)) {
			t.Errorf("LeaseLeft(%v after %d ms) = %v, want at most %v and close to it", c.held, c.elapsed, got, c.most)
		}
	}
	if got := arith.LeaseLeft(7, 0, 0, 1<<40); got != 7 {
		t.Errorf("window units do not decay: LeaseLeft = %v, want 7", got)
	}
	for _, v := range []float64{0, 1, 0.1, 1.0 / 3, 12345.6789, 1e12 + 0.5} {
		if got := arith.SafeUnits(v); got > v || v-got >= 1.0/1024 || math.Mod(got*1024, 1) != 0 {
			t.Errorf("SafeUnits(%v) = %v, want the largest multiple of 1/1024 at most it", v, got)
		}
	}
}
