package shm

import (
	"fmt"
	"testing"
	"time"
)

// Close waits for the background sweep it stops, is idempotent, and no
// sweep starts afterwards; the dict still counts.
func TestCloseStopsAndWaitsForTheSweep(t *testing.T) {
	d, err := NewDict("d", 100)
	if err != nil {
		t.Fatal(err)
	}
	w := d.Series("ns", time.Minute).Current(t0)
	for i := range 95 { // above the high mark: a sweep starts
		w.Add(fmt.Sprint(i), 1, t0)
	}
	d.Close()
	d.Close()
	if d.sweeping.Load() {
		t.Fatal("a sweep still runs after Close returned")
	}
	if _, v := w.Add("late", 1, t0); v != 1 {
		t.Fatalf("add after Close: %v, want 1", v)
	}
	if d.sweeping.Load() {
		t.Fatal("a sweep started after Close")
	}
}
