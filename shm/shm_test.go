package shm

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const t0 = int64(1_893_456_000_000) // 2030-01-01, a multiple of every size used here

func newSeries(t *testing.T, capacity int, local bool) (*Dict, *Series) {
	t.Helper()
	d, err := NewDict("test", capacity)
	if err != nil {
		t.Fatal(err)
	}
	s := d.Series("ns", time.Minute)
	s.SetLocal(local)
	return d, s
}

// takeCount runs a Take and returns how many diffs it yielded.
func takeCount(s *Series) int {
	n := 0
	s.Take(func(int64, string, float64) { n++ })
	return n
}

func TestNewDictRejectsNegativeCapacity(t *testing.T) {
	if _, err := NewDict("d", -1); err == nil {
		t.Fatal("NewDict with capacity -1: no error")
	}
	d, err := NewDict("d", 0)
	if err != nil || d.Capacity() != DefaultCapacity {
		t.Fatalf("NewDict(0) = capacity %d, %v; want %d", d.Capacity(), err, DefaultCapacity)
	}
}

func TestCounterAddTakeAndDirtyList(t *testing.T) {
	_, s := newSeries(t, 0, false)
	w := s.Current(t0)
	w.Add("a", 1.5, t0)
	w.Add("a", 2, t0)
	w.Add("b", -1, t0)
	if got := s.Dirty(); got != 2 {
		t.Fatalf("Dirty() = %d, want 2 (one entry per counter)", got)
	}
	taken := map[string]float64{}
	s.Take(func(start int64, key string, v float64) {
		if start != w.Start() {
			t.Errorf("start = %d, want %d", start, w.Start())
		}
		taken[key] += v
	})
	if taken["a"] != 3.5 || taken["b"] != -1 || len(taken) != 2 {
		t.Fatalf("taken = %v, want a:3.5 b:-1", taken)
	}
	if c := w.Counter("a"); c.diffValue() != 0 || c.syncValue() != 3.5 || c.Value() != 3.5 {
		t.Fatalf("after take: diff %v sync %v value %v; want 0, 3.5, 3.5", c.diffValue(), c.syncValue(), c.Value())
	}
	if s.Dirty() != 0 {
		t.Fatalf("Dirty() = %d after Take, want 0", s.Dirty())
	}
	w.Add("a", 1, t0) // listed again
	if n := takeCount(s); n != 1 {
		t.Fatalf("second Take yielded %d diffs, want 1", n)
	}
}

func TestAddThatReturnsToZeroIsNotPushed(t *testing.T) {
	_, s := newSeries(t, 0, false)
	w := s.Current(t0)
	w.Add("a", 1, t0)
	w.Add("a", -1, t0)
	if n := takeCount(s); n != 0 {
		t.Fatalf("a diff that summed to zero was pushed %d times", n)
	}
}

func TestLocalSeriesListsNothing(t *testing.T) {
	_, s := newSeries(t, 0, true)
	s.Current(t0).Add("a", 1, t0)
	if s.Dirty() != 0 {
		t.Fatalf("local series listed %d counters", s.Dirty())
	}
}

// Every value read or returned while the syncer takes is one the counter
// held: never above the adds begun (take must not count the amount it
// moves twice), never below the adds done (no dip); and every add is taken
// exactly once. A reader that saw too much
// would see the count go down after; AddIfAtMost would deny a hit that
// fits.
func TestValuesDuringTakeAreExact(t *testing.T) {
	_, s := newSeries(t, 0, false)
	w := s.Current(t0)
	const adders, each = 4, 20000
	var begun, done atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	var errs [adders + 1]string
	for i := range adders {
		wg.Go(func() {
			for range each {
				lo := done.Load() + 1
				begun.Add(1)
				_, after := w.Add("k", 1, t0)
				done.Add(1)
				if hi := begun.Load(); (after < float64(lo) || after > float64(hi)) && errs[i] == "" {
					errs[i] = fmt.Sprintf("Add returned %v with %d to %d adds counted", after, lo, hi)
				}
			}
		})
	}
	var taken atomic.Int64
	take := func(_ int64, _ string, v float64) { taken.Add(int64(v)) }
	wg.Go(func() {
		for !stop.Load() {
			s.Take(take)
		}
	})
	for done.Load() < adders*each {
		lo := done.Load()
		v := w.Value("k")
		if hi := begun.Load(); (v < float64(lo) || v > float64(hi)) && errs[adders] == "" {
			errs[adders] = fmt.Sprintf("Value read %v with %d to %d adds counted", v, lo, hi)
		}
	}
	stop.Store(true)
	wg.Wait()
	s.Take(take)
	for _, e := range errs {
		if e != "" {
			t.Error(e)
		}
	}
	if got := taken.Load(); got != adders*each {
		t.Errorf("taken %d, want %d (no add lost, none taken twice)", got, adders*each)
	}
	if got := w.Value("k"); got != adders*each {
		t.Errorf("Value = %v, want %d", got, adders*each)
	}
}

// N goroutines race AddIfAtMost for the last slots of a ceiling while the
// syncer takes: exactly the ceiling passes, and no call is judged on a
// count above the ceiling (which the counter never holds: such a count is
// a take's amount seen twice, and denies a hit that fits).
func TestAddIfAtMostDuringTakeAdmitsExactly(t *testing.T) {
	for round := range 20 {
		_, s := newSeries(t, 0, false)
		w := s.Current(t0)
		const ceiling = 5000
		var admitted, taken, inflated atomic.Int64
		var stop atomic.Bool
		var adders, taker sync.WaitGroup
		for range 4 {
			adders.Go(func() {
				for range ceiling {
					before, ok, _ := w.AddIf("k", 1, func(before float64) bool { return before+1 <= ceiling }, t0)
					if ok {
						admitted.Add(1)
					}
					if before > ceiling {
						inflated.Add(1)
					}
				}
			})
		}
		taker.Go(func() {
			for !stop.Load() {
				s.Take(func(_ int64, _ string, v float64) { taken.Add(int64(v)) })
			}
		})
		adders.Wait()
		stop.Store(true)
		taker.Wait()
		s.Take(func(_ int64, _ string, v float64) { taken.Add(int64(v)) })
		if got := admitted.Load(); got != ceiling {
			t.Fatalf("round %d: %d admitted, want exactly %d", round, got, ceiling)
		}
		if n := inflated.Load(); n != 0 {
			t.Fatalf("round %d: %d calls judged a count above the ceiling %d", round, n, ceiling)
		}
		if got := taken.Load(); got != ceiling {
			t.Fatalf("round %d: %d taken, want %d", round, got, ceiling)
		}
	}
}

func TestRotationLinksPreviousWindow(t *testing.T) {
	_, s := newSeries(t, 0, true)
	w1 := s.Current(t0)
	w2 := s.Current(t0 + 60_000)
	if w2.Prev() != w1 {
		t.Fatal("the next window's Prev is not the window before it")
	}
	w4 := s.Current(t0 + 180_000)
	if w4.Prev() != nil {
		t.Fatal("a window after a gap has a Prev")
	}
	if got := len(s.held()); got != 1 {
		t.Fatalf("%d windows held after two sizes passed, want 1 (older ones expired)", got)
	}
}

func TestExpiryKeepsWindowsWithUnpushedDiffs(t *testing.T) {
	d, s := newSeries(t, 0, false)
	s.Current(t0).Add("k", 1, t0)
	later := t0 + 5*60_000
	s.Current(later).Add("other", 1, later) // rotation expires what it may
	if got := s.Expire(later); got != 0 {
		t.Fatalf("Expire dropped %d counters holding an unpushed diff", got)
	}
	if d.len() != 2 {
		t.Fatalf("dict holds %d counters, want 2", d.len())
	}
	var got []string
	s.Take(func(start int64, key string, v float64) { got = append(got, fmt.Sprint(start, key, v)) })
	if len(got) != 2 {
		t.Fatalf("Take = %v, want both diffs", got)
	}
	if n := s.Expire(later); n != 1 {
		t.Fatalf("Expire after Take dropped %d counters, want 1", n)
	}
	if d.len() != 1 || d.Stats().Expired != 1 {
		t.Fatalf("dict: %+v, want 1 entry and 1 expired", d.Stats())
	}
}

func TestFullDictRefusesThenSweepEvictsColdCounters(t *testing.T) {
	d, s := newSeries(t, 100, true)
	w := s.Current(t0)
	for range 50 {
		w.Add("hot", 1, t0)
	}
	created := 1
	for i := range 300 {
		if c, _ := w.Add(fmt.Sprintf("cold-%d", i), 1, t0); c != nil {
			created++
		}
	}
	// Let any background sweep finish, then sweep once more by hand.
	for d.sweeping.Load() {
		time.Sleep(time.Millisecond)
	}
	d.sweep(t0)
	st := d.Stats()
	if st.Entries > int(lowMark*100)+1 {
		t.Fatalf("entries %d after a sweep, want at most %d", st.Entries, int(lowMark*100)+1)
	}
	if got := int(st.Overflows) + created; got != 301 {
		t.Fatalf("overflows %d + created %d = %d, want 301", st.Overflows, created, got)
	}
	// A counter the background sweep evicted right after it was made is
	// made again by the same Add: entries can exceed created - evictions.
	if got := created - int(st.Evictions); got > st.Entries {
		t.Fatalf("created %d - evictions %d = %d, more than the %d entries", created, st.Evictions, got, st.Entries)
	}
	if got := w.Value("hot"); got != 50 {
		t.Fatalf("hot = %v, want 50: the hot key was evicted", got)
	}
}

func TestSweepNeverEvictsUnpushedDiffs(t *testing.T) {
	d, s := newSeries(t, 10, false)
	w := s.Current(t0)
	for i := range 10 {
		w.Add(fmt.Sprint(i), 1, t0)
	}
	d.sweep(t0)
	if d.len() != 10 || d.Stats().Evictions != 0 {
		t.Fatalf("sweep evicted counters holding diffs: %+v", d.Stats())
	}
	if c, _ := w.Add("new", 1, t0); c != nil {
		t.Fatal("a full dict of dirty counters made a new counter")
	}
	s.Take(func(int64, string, float64) {})
	d.sweep(t0)
	if d.len() > 8 {
		t.Fatalf("after the diffs were taken the sweep left %d counters, want <= 8", d.len())
	}
}

// Eviction races increments; every increment is either taken by the syncer
// or still in a live counter at the end. The workers go on until the
// sweeper has evicted beside them, however the goroutines are scheduled
// (up to a bound, past which the test fails).
func TestEvictionNeverLosesAConcurrentIncrement(t *testing.T) {
	d, s := newSeries(t, 64, false)
	var adds, taken atomic.Int64
	var stop atomic.Bool
	var workers, sweeper sync.WaitGroup
	for g := range 4 {
		workers.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for i := 0; i < 30000 || d.Stats().Evictions < 20 && i < 3_000_000; i++ {
				w := s.Current(t0)
				if c, _ := w.Add(fmt.Sprint(r.IntN(200)), 1, t0); c != nil {
					adds.Add(1)
				}
			}
		})
	}
	sweeper.Go(func() {
		for !stop.Load() {
			s.Take(func(_ int64, _ string, v float64) { taken.Add(int64(v)) })
			d.sweep(t0)
		}
	})
	workers.Wait()
	stop.Store(true)
	sweeper.Wait()
	s.Take(func(_ int64, _ string, v float64) { taken.Add(int64(v)) })
	if taken.Load() != adds.Load() {
		t.Fatalf("taken %d, counted adds %d: an increment was lost to eviction", taken.Load(), adds.Load())
	}
	if d.Stats().Evictions == 0 {
		t.Fatal("no eviction happened: the test did not exercise the race")
	}
}

// Compaction moves counters to fresh tables while increments go on: none is
// lost, and counters made afterwards land in the new tables. The increments
// remake at most 1,000 of the evicted counters, which leaves the tables
// (grown for 20,000 counters) at least four times larger than their
// counters need, however far the increments get before compaction.
func TestCompactionKeepsEveryCount(t *testing.T) {
	_, s := newSeries(t, 0, false)
	w := s.Current(t0)
	for i := range 20000 {
		w.Add(fmt.Sprint(i), 1, t0)
	}
	s.Take(func(int64, string, float64) {})
	kept := 0
	w.Range(func(key string, c *Counter) bool {
		if kept < 1500 {
			kept++
			return true
		}
		w.evict(key, c)
		return true
	})
	if w.len() != 1500 {
		t.Fatalf("Len = %d after eviction, want 1500", w.len())
	}
	old := tables(w)
	var stop atomic.Bool
	var adds atomic.Int64
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Go(func() {
			for i := 0; !stop.Load() || i < 1000; i++ {
				w.Add(fmt.Sprint((i*7+g)%1000), 1, t0)
				adds.Add(1)
			}
		})
	}
	if !w.compact() {
		t.Fatal("compact did not run on tables grown for 20,000 counters that hold 1,500")
	}
	stop.Store(true)
	wg.Wait()
	if tables(w) == old {
		t.Fatal("the window still uses its old tables")
	}
	var total float64
	w.Range(func(_ string, c *Counter) bool { total += c.Value(); return true })
	if want := float64(1500 + adds.Load()); total != want {
		t.Fatalf("total after compaction %v, want %v", total, want)
	}
}

// tables returns the tables of w's shards.
func tables(w *Window) (ts [windowShards]*table) {
	for i := range w.shards {
		ts[i] = w.shards[i].tab.Load()
	}
	return ts
}

// Take gives the dirty lists' arrays back for the next period when they are
// short, and lets long ones go: a burst of dirty counters does not leave
// lists of its length behind.
func TestTakeKeepsShortDirtyListsOnly(t *testing.T) {
	_, s := newSeries(t, 0, false)
	w := s.Current(t0)
	kept := func() (most int) {
		for i := range s.dirty {
			sh := &s.dirty[i]
			sh.mu.Lock()
			for _, r := range sh.runs[:cap(sh.runs)] {
				most = max(most, cap(r.cs))
			}
			sh.mu.Unlock()
		}
		return most
	}
	for i := range 100 {
		w.Add(fmt.Sprint("short:", i), 1, t0)
	}
	if n := takeCount(s); n != 100 {
		t.Fatalf("took %d diffs, want 100", n)
	}
	if kept() == 0 {
		t.Fatal("short dirty lists were not kept for the next period")
	}
	for i := range 100_000 {
		w.Add(fmt.Sprint("burst:", i), 1, t0)
	}
	if n := takeCount(s); n != 100_000 {
		t.Fatalf("took %d diffs, want 100,000", n)
	}
	if most := kept(); most > keepDirty {
		t.Fatalf("a dirty list of capacity %d was kept after a burst, want at most %d", most, keepDirty)
	}
}
