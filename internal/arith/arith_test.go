package arith_test

import (
	"math"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/arith"
)

func TestWindowStartAlignsToTheEpoch(t *testing.T) {
	tests := []struct {
		name string
		at   int64
		size time.Duration
		want int64
	}{
		{"at a start", 60_000, time.Minute, 60_000},
		{"inside", 90_500, time.Minute, 60_000},
		{"before the epoch", -1, time.Second, -1000},
		{"before the epoch, at a start", -2000, time.Second, -2000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := arith.WindowStart(time.UnixMilli(tt.at), tt.size).UnixMilli(); got != tt.want {
				t.Errorf("WindowStart(%d, %v) = %d, want %d", tt.at, tt.size, got, tt.want)
			}
		})
	}
}

// Kong's worked example: cur 10, prev 40, a 60 s window 30 s in: rate 30.
func TestSlidingRate(t *testing.T) {
	w := arith.Window{Cur: 10, Prev: 40, Size: 60_000, Elapsed: 30_000}
	if got := w.Rate(false); got != 30 {
		t.Errorf("sliding rate = %v, want 30", got)
	}
	if got := w.Rate(true); got != 10 {
		t.Errorf("fixed rate = %v, want 10", got)
	}
	if got := w.Remaining(100, 70, false); got != 70 {
		t.Errorf("remaining under 100 = %v, want 70", got)
	}
	if !arith.WindowFits(10, 40, 70, 100, 60_000, 30_000, false) || arith.WindowFits(10, 40, 71, 100, 60_000, 30_000, false) {
		t.Error("a request that fits exactly must pass and one more must not")
	}
}

// Retry is exact: the request fits at now + Retry and not a millisecond
// before.
func TestWindowRetryIsExact(t *testing.T) {
	for _, fixed := range []bool{false, true} {
		w := arith.Window{Cur: 9, Prev: 10, Size: 1000, Elapsed: 250}
		d := w.Retry(2, 10, fixed)
		if d <= 0 {
			t.Fatalf("fixed %v: Retry = %d of a request that does not fit", fixed, d)
		}
		fitsAt := func(x int64) bool {
			e := w.Elapsed + x
			cur, prev := w.Cur, w.Prev
			if e >= w.Size {
				e, cur, prev = e-w.Size, 0, w.Cur
			}
			return arith.WindowFits(cur, prev, 2, 10, w.Size, e, fixed)
		}
		if !fitsAt(d) || fitsAt(d-1) {
			t.Errorf("fixed %v: Retry = %d ms, but fits at it %v, a ms before %v", fixed, d, fitsAt(d), fitsAt(d-1))
		}
	}
}

func TestSpan(t *testing.T) {
	counts := []float64{1, 2, 3, 4} // newest first
	cur, old := arith.SpanParts(counts)
	if cur != 6 || old != 4 {
		t.Fatalf("SpanParts = %v, %v, want 6, 4", cur, old)
	}
	// 250 ms into the newest of 1 s sub-windows: rate 6 + 4 * 0.75 = 9.
	if !arith.SpanFits(counts, 1, 10, 1000, 250) || arith.SpanFits(counts, 2, 10, 1000, 250) {
		t.Error("SpanFits must admit a cost of 1 and refuse 2 under 10 at rate 9")
	}
	if got := arith.SpanReset(counts, 3000, 1000, 250); got != 3750 {
		t.Errorf("SpanReset = %d, want 3750", got)
	}
	if got := arith.SpanReset([]float64{0, 0, 5, 0}, 3000, 1000, 250); got != 1750 {
		t.Errorf("SpanReset with the newest hits two sub-windows back = %d, want 1750", got)
	}
	// SpanRetry is exact: m sub-windows on, the newest m are empty and the
	// oldest m gone.
	fitsAt := func(x int64) bool {
		m, e := (250+x)/1000, (250+x)%1000
		shifted := make([]float64, len(counts))
		for i := range shifted {
			if i >= int(m) {
				shifted[i] = counts[i-int(m)]
			}
		}
		return arith.SpanFits(shifted, 2, 10, 1000, e)
	}
	d := arith.SpanRetry(counts, 2, 10, 1000, 250)
	if d <= 0 || !fitsAt(d) || fitsAt(d-1) {
		t.Fatalf("SpanRetry = %d ms: fits then %v, a ms before %v", d, fitsAt(d), fitsAt(d-1))
	}
}

// A token bucket of 10 per second, burst 10: a full bucket admits 10 at
// once, then one token every 100 ms.
func TestBucket(t *testing.T) {
	const window, rate, burst = 1000, 10.0, 10.0
	level, at := 0.0, int64(0)
	for range 10 {
		if !arith.BucketFits(arith.Level(level, at, rate, 0), 1, burst, window) {
			t.Fatal("a full bucket refused one of its 10 tokens")
		}
		level, at = arith.BucketAdd(level, at, rate, 1, window, 0)
	}
	b := arith.Bucket{Base: level, Origin: at, Rate: rate, Window: window}
	if b.Fits(0, 1, burst) {
		t.Fatal("an empty bucket admitted a request")
	}
	if d := b.Retry(0, 1, burst); d != 100 {
		t.Errorf("Retry = %d ms, want 100", d)
	}
	if d := b.EmptyIn(0, b.Level(0)); d != 1000 {
		t.Errorf("EmptyIn = %d ms, want 1000", d)
	}
	if got := arith.BucketRemaining(b.Level(450), burst, window); got != 4 {
		t.Errorf("remaining 450 ms on = %v, want 4", got)
	}
	if got := arith.Level(5000, 100, rate, 50); got != 5000 {
		t.Errorf("a clock behind the bucket drained it to %v, want 5000", got)
	}
}

func TestAnchored(t *testing.T) {
	count, at := arith.AnchoredAdd(0, 0, 1, 1000, 500) // opens [500, 1500)
	if count != 1 || at != 500 {
		t.Fatalf("first hit: count %v at %d, want 1 at 500", count, at)
	}
	count, at = arith.AnchoredAdd(count, at, 2, 1000, 1499)
	if count != 3 || at != 500 {
		t.Fatalf("second hit: count %v at %d, want 3 at 500", count, at)
	}
	if got := arith.AnchoredCount(count, at, 1000, 1500); got != 0 {
		t.Errorf("count at the window's end = %v, want 0", got)
	}
	if count, at = arith.AnchoredAdd(count, at, 1, 1000, 1500); count != 1 || at != 1500 {
		t.Errorf("a hit after the end opens a new window: got %v at %d", count, at)
	}
	if c, a := arith.AnchoredAdd(3, 5000, 1, 1000, 3000); c != 3 || a != 5000 {
		t.Errorf("a diff a whole window before the opening counts nowhere: got %v at %d", c, a)
	}
}

func TestLogRetryAt(t *testing.T) {
	var l arith.Log
	l.Add(100, 1)
	l.Add(200, 2)
	l.Add(300, 1)
	l.Trim(1050, 1000)
	if l.Sum != 4 {
		t.Fatalf("sum = %v, want 4", l.Sum)
	}
	// limit 4, cost 2: room once 100 and 200 stop weighing, at 1200.
	if got := arith.RetryAt(l.Entries, l.Sum, 2, 4, 1000); got != 1200 {
		t.Errorf("RetryAt = %d, want 1200", got)
	}
	if got := arith.RetryAt(l.Entries, l.Sum, 0, 4, 1000); got != 0 {
		t.Errorf("RetryAt of a request that fits = %d, want 0", got)
	}
}

func TestMs(t *testing.T) {
	if got := arith.Ms(math.MaxInt64); got != math.MaxInt64 {
		t.Errorf("Ms saturates at %v, want %v", got, time.Duration(math.MaxInt64))
	}
	if got := arith.Ms(1500); got != 1500*time.Millisecond {
		t.Errorf("Ms(1500) = %v", got)
	}
}
