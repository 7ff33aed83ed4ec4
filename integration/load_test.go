package integration

import (
	"slices"
	"testing"
	"time"
)

// A hit asked just before a window's end and counted in the next: PerWindow
// puts it in the window it was asked in, PerDecidedWindow and DecidedWindow
// in the one the node's Reset says.
func TestDecidedWindow(t *testing.T) {
	const size = 2 * time.Second
	w0 := time.UnixMilli(1_800_000_000_000) // a multiple of size
	w1 := w0.Add(size)
	cases := []struct {
		name    string
		at      time.Time
		latency time.Duration
		reset   time.Duration
		want    time.Time
	}{
		{"asked and counted mid-window", w0.Add(500 * time.Millisecond), time.Millisecond, 1499 * time.Millisecond, w0},
		{"asked 1 ms before the end, counted in the next", w1.Add(-time.Millisecond), 3 * time.Millisecond, size - time.Millisecond, w1},
		{"asked 1 ms before the end, counted in it", w1.Add(-time.Millisecond), 3 * time.Millisecond, time.Millisecond, w0},
		{"counted at the window's first instant", w1, 0, size, w1},
		{"a slow answer, counted late in the window", w0.Add(100 * time.Millisecond), 800 * time.Millisecond, time.Second, w0},
	}
	for _, c := range cases {
		d := Decision{At: c.at, Latency: c.latency, Reset: c.reset, Allowed: true}
		if got := d.DecidedWindow(size); !got.Equal(c.want) {
			t.Errorf("%s: DecidedWindow %v, want %v", c.name, got, c.want)
		}
	}

	// 3 hits counted in w0, 1 of them asked in w0 and counted in w1.
	res := &Result{Start: w0, End: w1.Add(size), Decisions: []Decision{
		{At: w0.Add(time.Second), Latency: time.Millisecond, Reset: 999 * time.Millisecond, Allowed: true},
		{At: w0.Add(time.Second), Latency: time.Millisecond, Reset: 999 * time.Millisecond, Allowed: true},
		{At: w1.Add(-time.Millisecond), Latency: 2 * time.Millisecond, Reset: size - time.Millisecond, Allowed: true},
		{At: w1.Add(-time.Millisecond), Latency: 2 * time.Millisecond, Reset: size - time.Millisecond, Allowed: false},
	}}
	if got, want := admissions(res.PerWindow(size)), []int{3}; !slices.Equal(got, want) {
		t.Errorf("PerWindow: %v, want %v", got, want)
	}
	if got, want := admissions(res.PerDecidedWindow(size)), []int{2, 1}; !slices.Equal(got, want) {
		t.Errorf("PerDecidedWindow: %v, want %v", got, want)
	}
}

// WindowStarts covers every window from the first asking to the last
// answer, widened by the slack; AdmittedPerKey counts allowed decisions.
func TestWindowStarts(t *testing.T) {
	h := time.UnixMilli(1_800_000_000_000).Truncate(time.Hour)
	res := &Result{Decisions: []Decision{
		{Key: 1, At: h.Add(-10 * time.Minute), Latency: time.Millisecond, Allowed: true},
		{Key: 1, At: h.Add(-time.Second), Latency: 2 * time.Second, Allowed: true},
		{Key: 2, At: h.Add(-5 * time.Minute), Allowed: false},
		{Key: 2, At: h.Add(-4 * time.Minute), Allowed: true},
	}}
	if got, want := res.WindowStarts(time.Hour, 0), []time.Time{h.Add(-time.Hour), h}; !slices.EqualFunc(got, want, time.Time.Equal) {
		t.Errorf("WindowStarts: %v, want %v", got, want)
	}
	res.Decisions[1].Latency = 0 // every answer before the hour now
	if got, want := res.WindowStarts(time.Hour, 0), []time.Time{h.Add(-time.Hour)}; !slices.EqualFunc(got, want, time.Time.Equal) {
		t.Errorf("WindowStarts without the late answer: %v, want %v", got, want)
	}
	if got, want := res.WindowStarts(time.Hour, 2*time.Second), []time.Time{h.Add(-time.Hour), h}; !slices.EqualFunc(got, want, time.Time.Equal) {
		t.Errorf("WindowStarts with 2 s of slack: %v, want %v", got, want)
	}
	if got := (&Result{}).WindowStarts(time.Hour, 0); got != nil {
		t.Errorf("WindowStarts of no decisions: %v, want none", got)
	}
	if got := res.AdmittedPerKey(); got[1] != 2 || got[2] != 1 || len(got) != 2 {
		t.Errorf("AdmittedPerKey: %v, want map[1:2 2:1]", got)
	}
}
