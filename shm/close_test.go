package shm

import (
	"fmt"
	"testing"
	"time"
)

// Close waits for the background sweep it stops, is idempotent, and no
// sweep starts afterwards, even one that would free counters; the dict
// still counts.
func TestCloseStopsAndWaitsForTheSweep(t *testing.T) {
	d, err := NewDict("d", 100)
	if err != nil {
		t.Fatal(err)
	}
	sr := d.Series("ns", time.Minute)
	w := sr.Current(t0)
	for i := range 95 { // above the high mark: a sweep starts
		w.Add(fmt.Sprint(i), 1, t0)
	}
	d.Close()
	d.Close()
	if d.sweeping.Load() {
		t.Fatal("a sweep still runs after Close returned")
	}

	// Make every counter evictable (no diff to push) and let the sweep
	// back-off pass: in an open dict, the next new counter would start a
	// sweep that evicts some.
	sr.Take(func(int64, string, float64) {})
	before := d.Stats()
	later := t0 + time.Second.Milliseconds()
	if _, v := w.Add("late", 1, later); v != 1 {
		t.Fatalf("add after Close: %v, want 1", v)
	}
	d.Close() // waits for a sweep, had one started
	if st := d.Stats(); st.Entries != before.Entries+1 || st.Evictions != before.Evictions {
		t.Fatalf("after an add to the closed dict: %+v, want one entry more than %+v and no eviction: a sweep ran", st, before)
	}
}
