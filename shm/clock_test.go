package shm

import (
	"testing"
	"time"
)

// Namespaces of one dict may count on different clocks. A sweep started by
// one namespace reads another's windows at that namespace's own clock
// (SetClock): a window still current there is not expired because the
// other clock is past it.
func TestSweepReadsEachNamespaceAtItsClock(t *testing.T) {
	d, err := NewDict("d", 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	behind := int64(1500) // ms: namespace "store" counts 1.5 s behind "node"
	node, store := d.Series("node", time.Second), d.Series("store", time.Second)
	now := t0 + 3000
	d.SetClock("store", func() int64 { return now - behind })
	for _, s := range []*Series{node, store} {
		s.SetLocal(true) // no diffs to push: expiry may drop anything it judges over
	}
	store.Current(now-behind).Add("k", 1, now-behind) // window t0+1000, current there
	node.Current(now).Add("k", 1, now)
	d.sweep(now) // as of "node"'s clock, t0+1000 is two windows back
	if h := store.held(); len(h) != 1 || h[0].Start() != t0+1000 || h[0].Value("k") != 1 {
		t.Fatal("the sweep expired the current window of a namespace whose clock is behind the sweep's")
	}
	d.SetClock("store", nil) // without its clock, the sweep's own applies
	d.sweep(now)
	if h := store.held(); len(h) != 0 {
		t.Fatalf("without a clock of its own, %d windows kept; want the one older than the sweep's previous window dropped", len(h))
	}
}

// A clock that goes back reads the windows the newest one links back to
// without taking the series' lock, and never makes a second window of a
// start the series holds.
func TestCurrentFollowsAClockThatWentBack(t *testing.T) {
	_, s := newSeries(t, 0, false)
	s.Keep(3 * time.Minute.Milliseconds()) // hold the last four windows
	w0 := s.Current(t0)
	w1 := s.Current(t0 + time.Minute.Milliseconds())
	w2 := s.Current(t0 + 2*time.Minute.Milliseconds() + 10)
	if w2.Prev() != w1 || w1.Prev() != w0 {
		t.Fatal("consecutive windows are not linked")
	}
	s.mu.Lock() // Current must not need it for a held, linked window
	got := make(chan [2]*Window, 1)
	go func() { got <- [2]*Window{s.Current(t0 + time.Minute.Milliseconds() + 59_999), s.Current(t0 + 5)} }()
	var got1, got0 *Window
	select {
	case g := <-got:
		got1, got0 = g[0], g[1]
	case <-time.After(10 * time.Second):
		t.Fatal("Current waited for the series' lock to read a held window")
	}
	s.mu.Unlock()
	if got1 != w1 || got0 != w0 {
		t.Fatalf("a clock gone back got windows %d and %d, want the held %d and %d", got1.Start(), got0.Start(), w1.Start(), w0.Start())
	}
	if s.Current(t0+2*time.Minute.Milliseconds()) != w2 {
		t.Fatal("back in the newest window: not the newest window")
	}
}
