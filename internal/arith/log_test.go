package arith_test

import (
	"math/rand/v2"
	"testing"

	"github.com/ratesync/ratesync/internal/arith"
)

// A log keeps its entries sorted, merged per millisecond, with Sum their
// total, through any mix of adds (in order or not) and trims.
func TestLogKeepsItsEntries(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var l arith.Log
	want := map[int64]float64{}
	now := int64(1000)
	for step := range 20000 {
		switch r.IntN(4) {
		case 0, 1: // in order
			now += int64(r.IntN(3))
			l.Add(now, 1)
			want[now]++
		case 2: // late
			at := now - int64(r.IntN(20))
			l.Add(at, 0.5)
			want[at] += 0.5
		case 3:
			window := []int64{2, 5, 50}[r.IntN(3)]
			l.Trim(now, window)
			for at := range want {
				if at <= now-window {
					delete(want, at)
				}
			}
		}
		sum := 0.0
		for i, e := range l.Entries {
			if i > 0 && e.At <= l.Entries[i-1].At {
				t.Fatalf("step %d: entries out of order: %v", step, l.Entries)
			}
			if want[e.At] != e.Cost {
				t.Fatalf("step %d: entry at %d holds %v, want %v", step, e.At, e.Cost, want[e.At])
			}
			sum += e.Cost
		}
		if len(l.Entries) != len(want) || sum != l.Sum {
			t.Fatalf("step %d: %d entries summing to %v (Sum %v), want %d", step, len(l.Entries), sum, l.Sum, len(want))
		}
	}
}
