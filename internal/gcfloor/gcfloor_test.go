package gcfloor

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"testing"
	"time"
)

func TestPercentFor(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		floor       int64
		live, roots uint64
		base        int
		want        int
	}{
		{0, 3 * mib, 0, 100, 100},                // no floor
		{64 * mib, 64 * mib, 0, 100, 100},        // the live heap reaches it
		{64 * mib, 200 * mib, 0, 100, 100},       // beyond it
		{64 * mib, 40 * mib, 0, 100, 100},        // base's goal, 80 MiB, reaches it
		{64 * mib, 16 * mib, 0, 100, 300},        // 16 + 16 × 3
		{64 * mib, 20 * mib, 0, 100, 220},        // rounded up: 20 + 20 × 2.2
		{64 * mib, 16 * mib, 16 * mib, 100, 150}, // 16 + (16 + 16) × 1.5: stacks and globals are scanned too
		{64 * mib, 3 * mib, 0, 100, 1600},        // held by the heap minimum: 4 MiB × 16
		{64 * mib, 0, 0, 100, 1600},              // before the first collection
		{64 * mib, 16 * mib, 0, 500, 500},        // a larger base stands
		{1 << 62, 1, 0, 100, math.MaxInt32},      // bounded
		{-5, 3 * mib, 0, 100, 100},               // no floor
	}
	for _, tt := range tests {
		if got := percentFor(tt.floor, tt.live, tt.roots, tt.base); got != tt.want {
			t.Errorf("percentFor(%d, %d, %d, %d) = %d, want %d", tt.floor, tt.live, tt.roots, tt.base, got, tt.want)
		}
	}
}

// gcPercent reads the GOGC in force.
func gcPercent() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(int32(s[0].Value.Uint64()))
}

// cycles reads the number of completed collections.
func cycles() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

var sink []byte

// churn allocates n bytes of garbage, 32 KiB at a time, and returns the
// collections it took.
func churn(n int) uint64 {
	c0 := cycles()
	for range n / (32 << 10) {
		sink = make([]byte, 32<<10)
	}
	sink = nil
	return cycles() - c0
}

// needsCollector skips a test whose floor the environment would override:
// GOGC off or 0, or a memory limit under floor. Then it collects once, so
// that the live heap the tuner starts from is what is live: a collection
// during a burst of allocation (another test's) counts what the burst
// allocated while it marked.
func needsCollector(t *testing.T, floor int64) {
	t.Helper()
	if p := gcPercent(); p <= 0 {
		t.Skipf("GOGC is %d: the tuner leaves it", p)
	}
	if l := debug.SetMemoryLimit(-1); l < floor*2 {
		t.Skipf("memory limit %d bytes: it, not the floor, sets the goal", l)
	}
	runtime.GC()
}

// settle runs a collection and adjusts GOGC after it, as the poller
// does within PollEvery.
func settle(tu *Tuner) {
	runtime.GC()
	tu.adjust()
}

// heap reads the heap goal and the live heap, in MiB.
func heap() (goal, live uint64) {
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}, {Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64() >> 20, s[1].Value.Uint64() >> 20
}

func TestFloorCutsCollections(t *testing.T) {
	needsCollector(t, 256<<20)
	base := gcPercent()
	runtime.GC()
	without := churn(512 << 20)
	runtime.GC() // a quiet one: see needsCollector

	tu := Start(256 << 20)
	defer tu.Stop()
	if p := gcPercent(); p <= base {
		t.Fatalf("GOGC %d after Start with a 256 MiB floor: want above the base %d", p, base)
	}
	with := churn(512 << 20)
	t.Logf("512 MiB of garbage: %d collections without a floor, %d with 256 MiB", without, with)
	// Without the floor the count varies (a collection that marks while
	// the loop allocates counts what it allocated as live, and the next
	// goal grows with it): 69–157 in most runs, once 7.
	if with > 4 || with*2 > without {
		t.Errorf("%d collections with a 256 MiB floor (%d without): want at most 4, and half of those without", with, without)
	}
	// The goal follows the live heap of the collection before; allocating
	// during a collection's marking inflates what it finds live, so the
	// goal is read after two quiet collections.
	settle(tu)
	settle(tu)
	if g, live := heap(); g < 250 || g > 270 {
		t.Errorf("heap goal %d MiB with a 256 MiB floor (GOGC %d, live %d MiB): want the floor", g, gcPercent(), live)
	}
}

func TestSetAndStop(t *testing.T) {
	needsCollector(t, 128<<20)
	base := gcPercent()
	tu := Start(128 << 20)
	if p := gcPercent(); p <= base {
		t.Errorf("started with a 128 MiB floor: GOGC %d, want above the base %d", p, base)
	}
	if tu.Floor() != 128<<20 {
		t.Errorf("Floor() = %d", tu.Floor())
	}
	tu.Set(0)
	if p := gcPercent(); p != base {
		t.Errorf("floor removed: GOGC %d, want the base %d", p, base)
	}
	tu.Set(128 << 20)
	if p := gcPercent(); p <= base {
		t.Errorf("floor set again: GOGC %d, want above the base %d", p, base)
	}
	tu.Stop()
	if p := gcPercent(); p != base {
		t.Errorf("stopped: GOGC %d, want the base %d back", p, base)
	}
	// Collections after Stop leave GOGC alone.
	debug.SetGCPercent(base + 7)
	defer debug.SetGCPercent(base)
	runtime.GC()
	time.Sleep(3 * PollEvery) // a running poller would have looked
	runtime.GC()
	if p := gcPercent(); p != base+7 {
		t.Errorf("GOGC %d after Stop and collections, want %d (set by hand)", p, base+7)
	}
}

func TestGOGCOffStandsAlone(t *testing.T) {
	old := debug.SetGCPercent(-1)
	defer debug.SetGCPercent(old)
	tu := Start(128 << 20)
	defer tu.Stop()
	tu.Set(256 << 20)
	if p := gcPercent(); p != -1 {
		t.Errorf("GOGC %d: want it off, as set", p)
	}
}

// A live heap above the runtime's heap minimum: the goal is the floor, the
// live heap and the scanned stacks counted. The heap grows after the
// tuner set GOGC for a tiny one, so the collection that finds it sets a
// goal many times the floor; the poller brings it back.
var kept [][]byte

func TestFloorWithALiveHeap(t *testing.T) {
	needsCollector(t, 128<<20)
	tu := Start(128 << 20)
	defer tu.Stop()
	settle(tu)
	for range 24 {
		kept = append(kept, make([]byte, 1<<20))
	}
	defer func() { kept = nil }()
	stop := make(chan struct{})
	var parked sync.WaitGroup
	for range 200 { // stacks to scan
		parked.Add(1)
		go func() { defer parked.Done(); <-stop }()
	}
	defer func() { close(stop); parked.Wait() }()
	runtime.GC()
	if g, live := heap(); g < 200 {
		t.Logf("goal %d MiB for %d MiB live before the tuner's next look", g, live)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		g, live := heap()
		if g >= 125 && g <= 135 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("heap goal %d MiB with a 128 MiB floor and %d MiB live (GOGC %d), 5s after the collection: want the poller to set the floor", g, live, gcPercent())
		}
	}
	settle(tu)
	if g, live := heap(); g < 125 || g > 135 {
		t.Errorf("heap goal %d MiB with a 128 MiB floor and %d MiB live (GOGC %d), after another collection: want the floor", g, live, gcPercent())
	}
}
