package syncer

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/strategytest"
	"github.com/ratesync/ratesync/shm"
	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/memory"
)

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// The estimate is the offset of the recent sample with the shortest round
// trip: a slow reply does not move it, a faster one does, and a sample
// older than the last offsetSamples no longer counts.
func TestEstimatorKeepsTheShortestRoundTrip(t *testing.T) {
	var e estimator
	steps := []struct {
		name string
		add  sample
		want time.Duration // the estimate after it
	}{
		{"first sample", sample{offset: ms(10), rtt: ms(4)}, ms(10)},
		{"a faster reply moves it", sample{offset: ms(12), rtt: ms(2)}, ms(12)},
		{"a slow reply does not", sample{offset: ms(30), rtt: ms(40)}, ms(12)},
		{"nor a slower one", sample{offset: ms(11), rtt: ms(3)}, ms(12)},
		{"a tie goes to the newest", sample{offset: ms(13), rtt: ms(2)}, ms(13)},
	}
	for _, st := range steps {
		if got := e.add(st.add).offset; got != st.want {
			t.Fatalf("%s: estimate %v, want %v", st.name, got, st.want)
		}
	}
	// offsetSamples slower samples later, the fast ones have rolled out.
	for i := range offsetSamples {
		off := ms(15)
		if i == 0 {
			off = ms(14) // the fastest of the slower ones
		}
		got := e.add(sample{offset: off, rtt: ms(10 + int64(i))})
		if i < offsetSamples-1 && got.offset != ms(13) {
			t.Fatalf("after %d slower samples: estimate %v, want 13ms still", i+1, got.offset)
		}
		if i == offsetSamples-1 && got.offset != ms(14) {
			t.Fatalf("after %d slower samples: estimate %v, want 14ms (the fastest of the last %d)", i+1, got.offset, offsetSamples)
		}
	}
}

// A sample whose interval (offset ± rtt/2) cannot overlap the estimate's
// proves that a clock moved: the older samples are dropped and the
// estimate follows at once, however slow the new reply. One that can
// overlap is noise, and the filter keeps the fastest.
func TestEstimatorFollowsAClockThatMoved(t *testing.T) {
	var e estimator
	for range offsetSamples {
		e.add(sample{offset: ms(-1500), rtt: ms(1)})
	}
	if got := e.add(sample{offset: ms(-1490), rtt: ms(30)}).offset; got != ms(-1500) {
		t.Fatalf("a slow reply within its round trip of the estimate moved it to %v", got)
	}
	if got := e.add(sample{offset: ms(200), rtt: ms(30)}).offset; got != ms(200) {
		t.Fatalf("after the node's clock was stepped: estimate %v, want 200ms", got)
	}
	if e.n != 1 {
		t.Fatalf("%d samples held after a step, want only the new one", e.n)
	}
}

// timeStore is a memory store (behind strategytest's fault injection)
// that tells time: the node's clock (clk) plus skew, read halfway through
// a call that takes rtt on clk. It counts its Time and GetWindow calls.
type timeStore struct {
	*strategytest.Faulty
	clk    *testClock
	skew   atomic.Int64 // ns
	rtt    time.Duration
	fail   atomic.Bool
	calls  atomic.Int64
	probes atomic.Int64
}

func (s *timeStore) GetWindow(ctx context.Context, ns, key string, start time.Time, size time.Duration) (float64, error) {
	s.probes.Add(1)
	return s.Faulty.GetWindow(ctx, ns, key, start, size)
}

func (s *timeStore) Time(ctx context.Context) (time.Time, error) {
	s.calls.Add(1)
	if s.fail.Load() {
		return time.Time{}, errors.New("TIME refused")
	}
	s.clk.advance(s.rtt / 2)
	t := s.clk.now().Add(time.Duration(s.skew.Load()))
	s.clk.advance(s.rtt - s.rtt/2)
	return t, nil
}

var _ strategy.Clock = (*timeStore)(nil)

func newTimeStore(clk *testClock) *timeStore {
	return &timeStore{Faulty: strategytest.NewFaulty(memory.New()), clk: clk}
}

func (s *timeStore) setSkew(d time.Duration) { s.skew.Store(int64(d)) }

func (s *timeStore) withRTT(d time.Duration) *timeStore {
	s.rtt = d
	return s
}

// testClock is a node clock tests move by hand.
type testClock struct{ ns atomic.Int64 }

func newTestClock(t time.Time) *testClock {
	c := &testClock{}
	c.ns.Store(t.UnixNano())
	return c
}

func (c *testClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *testClock) millis() int64           { return c.now().UnixMilli() }
func (c *testClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// offsetSyncer returns a syncer (not started) of a periodic namespace with
// one window size, 1s, whose every time comes from clk; edit changes its
// configuration.
func offsetSyncer(t *testing.T, st strategy.Strategy, clk *testClock, storeClock bool, edit ...func(*Config)) *Syncer {
	t.Helper()
	d, err := shm.NewDict("d", 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	var seq atomic.Uint64
	cfg := Config{
		Namespace: "ns", Node: "ns|n1", Rate: time.Hour, Strategy: st, Series: []*shm.Series{d.Series("ns", time.Second)},
		Now: clk.millis, Clock: clk.now, Seq: &seq, StoreClock: storeClock, Logger: slog.New(slog.DiscardHandler),
		PurgeEvery: -1,
	}
	for _, e := range edit {
		e(&cfg)
	}
	return New(cfg)
}

// started starts s and stops it when the test ends.
func started(t *testing.T, s *Syncer) *Syncer {
	t.Helper()
	s.Start()
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	return s
}

// eventually polls cond until it holds or 10 s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// The offset is the store's time minus the node's halfway through the
// round trip: positive when the store is ahead, negative when the node is.
func TestMeasureOffsetSignAndHalfRoundTrip(t *testing.T) {
	for _, tt := range []struct {
		name string
		skew time.Duration
		rtt  time.Duration
	}{
		{"store ahead", 1500 * time.Millisecond, 10 * time.Millisecond},
		{"node ahead", -1500 * time.Millisecond, 10 * time.Millisecond},
		{"odd round trip", 250 * time.Millisecond, 7 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clk := newTestClock(t0)
			st := newTimeStore(clk).withRTT(tt.rtt)
			st.setSkew(tt.skew)
			s := offsetSyncer(t, st, clk, true)
			if !s.measureOffset(context.Background()) {
				t.Fatal("measureOffset: the store did not answer")
			}
			off, ok := s.clockStats()
			if !ok || off != tt.skew {
				t.Fatalf("offset %v (measured %v), want %v: the store's time minus the node's at mid round trip", off, ok, tt.skew)
			}
			if got, want := s.Now(), clk.millis()+tt.skew.Milliseconds(); got != want {
				t.Fatalf("namespace clock %d, want the node's %d plus the offset: %d", got, clk.millis(), want)
			}
		})
	}
}

// With the store clock off the offset is measured all the same (Stats,
// logs) and the namespace clock is the node's.
func TestNodeClockMeasuresButDoesNotApply(t *testing.T) {
	clk := newTestClock(t0)
	st := newTimeStore(clk)
	st.setSkew(-1500 * time.Millisecond)
	s := offsetSyncer(t, st, clk, false)
	s.measureOffset(context.Background())
	if off, ok := s.clockStats(); !ok || off != -1500*time.Millisecond {
		t.Fatalf("offset %v (measured %v), want -1.5s", off, ok)
	}
	if s.Now() != clk.millis() {
		t.Fatalf("namespace clock %d, want the node's %d", s.Now(), clk.millis())
	}
}

// A change of the offset never moves the namespace clock back by up to
// maxHold: it holds still until the node's clock catches up. A bigger
// change back steps at once; a change forward always does.
func TestOffsetChangesKeepTheNamespaceClockMonotonic(t *testing.T) {
	clk := newTestClock(t0)
	st := newTimeStore(clk)
	s := offsetSyncer(t, st, clk, true)
	measure := func(skew time.Duration) {
		t.Helper()
		st.setSkew(skew)
		s.offset.mu.Lock()
		s.offset.est.reset() // each step a fresh estimate, whatever the filter would keep
		s.offset.mu.Unlock()
		if !s.measureOffset(context.Background()) {
			t.Fatal("the store did not answer")
		}
	}
	base := clk.millis()
	measure(ms(5)) // forward: at once
	if got := s.Now(); got != base+5 {
		t.Fatalf("after +5ms: %d, want %d", got, base+5)
	}
	measure(ms(2)) // back 3ms: held at base+5 for 3ms
	for i := range int64(5) {
		want := max(base+5, base+i+2)
		if got := s.Now(); got != want {
			t.Fatalf("%dms after a 3ms step back: namespace clock %d, want %d (never below %d)", i, got-base, want-base, 5)
		}
		clk.advance(time.Millisecond)
	}
	base = clk.millis()
	back := maxHold + 50*time.Millisecond
	measure(ms(2) - back) // back more than maxHold: a step
	if got, want := s.Now(), base+(ms(2)-back).Milliseconds(); got != want {
		t.Fatalf("after a step back of %v: %d, want %d", back, got-base, want-base)
	}
	measure(ms(40)) // forward again
	if got := s.Now(); got != base+40 {
		t.Fatalf("after a step forward: %d, want %d", got-base, int64(40))
	}
}

// Noise under the clock's resolution does not flip the offset between
// neighbouring milliseconds.
func TestOffsetIgnoresSubMillisecondNoise(t *testing.T) {
	clk := newTestClock(t0)
	st := newTimeStore(clk)
	s := offsetSyncer(t, st, clk, true)
	st.setSkew(100*time.Millisecond + 400*time.Microsecond)
	s.measureOffset(context.Background())
	if got := s.offset.cur.Load().off; got != 100 {
		t.Fatalf("offset %dms, want 100", got)
	}
	for _, skew := range []time.Duration{700 * time.Microsecond, 900 * time.Microsecond, 300 * time.Microsecond} {
		s.offset.mu.Lock()
		s.offset.est.reset()
		s.offset.mu.Unlock()
		st.setSkew(100*time.Millisecond + skew)
		s.measureOffset(context.Background())
		if got := s.offset.cur.Load().off; got != 100 {
			t.Fatalf("estimate 100ms+%v: offset %dms, want 100 kept", skew, got)
		}
	}
}

// The first offset of a clock far ahead is a step back, not a hold; a
// Reconfigure to the node's clock goes back to it, and to a store that
// does not tell time too.
func TestOffsetFollowsReconfigure(t *testing.T) {
	clk := newTestClock(t0)
	st := newTimeStore(clk)
	st.setSkew(-1500 * time.Millisecond)
	s := offsetSyncer(t, st, clk, true)
	s.measureOffset(context.Background())
	if got, want := s.Now(), clk.millis()-1500; got != want {
		t.Fatalf("first measurement: %d, want %d", got, want)
	}
	cfg := s.conf.Load().Config
	cfg.StoreClock = false
	s.Reconfigure(cfg)
	if s.Now() != clk.millis() {
		t.Fatalf("store clock off: %d, want the node's %d", s.Now(), clk.millis())
	}
	cfg.StoreClock = true
	s.Reconfigure(cfg)
	if got, want := s.Now(), clk.millis()-1500; got != want {
		t.Fatalf("store clock on again: %d, want %d (the estimate kept)", got, want)
	}
	cfg.Strategy = memory.New()
	s.Reconfigure(cfg)
	if off, ok := s.clockStats(); ok || off != 0 || s.Now() != clk.millis() {
		t.Fatalf("a store that does not tell time: offset %v (measured %v), clock %d; want none, the node's %d", off, ok, s.Now(), clk.millis())
	}
}

// Before any measurement, and for a store that does not tell time, the
// namespace clock is the node's.
func TestNoOffsetBeforeAMeasurement(t *testing.T) {
	clk := newTestClock(t0)
	for _, st := range []strategy.Strategy{newTimeStore(clk), memory.New()} {
		s := offsetSyncer(t, st, clk, true)
		if s.Now() != clk.millis() {
			t.Fatalf("%T: %d, want the node's %d", st, s.Now(), clk.millis())
		}
		if c := s.offset.cur.Load(); c.floor != math.MinInt64 {
			t.Fatalf("%T: a floor before any measurement: %d", st, c.floor)
		}
	}
}

// Periodic mode measures when its background work starts, before the first
// sync, and in each sync. The measurement of an idle sync is the probe
// that tells whether the store answers: no extra round trip; when the
// store's clock cannot be read, the probe is made as before.
func TestPeriodicMeasuresAtStartAndEachSync(t *testing.T) {
	clk := newTestClock(t0)
	st := newTimeStore(clk)
	st.setSkew(-1500 * time.Millisecond)
	s := started(t, offsetSyncer(t, st, clk, true))
	eventually(t, "a measurement at start", func() bool { return st.calls.Load() == 1 })
	eventually(t, "the offset applied", func() bool { return s.Now() == clk.millis()-1500 })
	ctx := context.Background()
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if n, p := st.calls.Load(), st.probes.Load(); n != 2 || p != 0 {
		t.Fatalf("an idle sync: %d clock reads in all, %d probes; want 2 and 0", n, p)
	}
	st.fail.Store(true)
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if n, p := st.calls.Load(), st.probes.Load(); n != 3 || p != 1 {
		t.Fatalf("an idle sync whose clock read fails: %d clock reads in all, %d probes; want 3 and 1", n, p)
	}
	if got := s.Stats(); !got.ClockMeasured || got.ClockOffset != -1500*time.Millisecond || !got.StoreUp {
		t.Fatalf("stats %+v: want the offset -1.5s kept, the store up", got)
	}
}

// The synchronous worker measures when it starts, then at most once a
// second (of the node's clock) while calls flow, and at once when the
// store is back after failing.
func TestSynchronousMeasuresWhileCallsFlow(t *testing.T) {
	clk := newTestClock(t0)
	st := newTimeStore(clk)
	st.setSkew(250 * time.Millisecond)
	s := started(t, offsetSyncer(t, st, clk, true, func(c *Config) { c.Rate = 0 }))
	eventually(t, "a measurement at start", func() bool { return st.calls.Load() == 1 })
	sr := s.conf.Load().Series[0]
	ctx := context.Background()
	hit := func() {
		t.Helper()
		if _, err := s.Hit(ctx, sr.Current(s.Now()), "k", 1); err != nil {
			t.Fatal(err)
		}
	}
	for range 5 {
		hit()
	}
	clk.advance(900 * time.Millisecond)
	hit()
	if n := st.calls.Load(); n != 1 {
		t.Fatalf("%d clock reads within a second, want 1", n)
	}
	clk.advance(100 * time.Millisecond)
	hit()
	eventually(t, "a measurement a second later", func() bool { return st.calls.Load() == 2 })

	st.SetDown(true) // the next hit fails: the store is marked down
	hit()
	eventually(t, "the store marked down", s.isDown)
	st.SetDown(false)
	clk.advance(retryMin) // the back-off passes; the worker's retry recovers
	eventually(t, "a measurement on recovery", func() bool { return st.calls.Load() == 3 })
	// The probe's sync measures first, then pushes and marks the store up.
	eventually(t, "the store up after the recovery", func() bool { return !s.isDown() })
}

// records keeps the messages logged at each level.
type records struct {
	mu   sync.Mutex
	msgs map[slog.Level][]string
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *records) WithGroup(string) slog.Handler            { return r }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.msgs == nil {
		r.msgs = map[slog.Level][]string{}
	}
	r.msgs[rec.Level] = append(r.msgs[rec.Level], rec.Message)
	return nil
}

func (r *records) count(l slog.Level) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.msgs[l])
}

// An offset beyond ClockOffsetWarn is logged at WARN once when it crosses
// it, and at INFO once when it is back within 90% of it; not per sync.
func TestOffsetBeyondTheBoundIsLoggedOnceEachWay(t *testing.T) {
	clk := newTestClock(t0)
	st := newTimeStore(clk)
	logs := &records{}
	s := offsetSyncer(t, st, clk, true, func(c *Config) { c.Logger = slog.New(logs) })
	steps := []struct {
		skew       time.Duration
		warn, info int // logged so far
	}{
		{200 * time.Millisecond, 0, 0},
		{clockOffsetWarn + 500*time.Millisecond, 1, 0},
		{clockOffsetWarn + 500*time.Millisecond, 1, 0},
		{-clockOffsetWarn - 2*time.Second, 1, 0}, // still beyond, the other way
		{clockOffsetWarn * 95 / 100, 1, 0},       // within, but not by the margin
		{clockOffsetWarn / 2, 1, 1},
		{clockOffsetWarn / 2, 1, 1},
		{clockOffsetWarn * 2, 2, 1},
	}
	for i, step := range steps {
		st.setSkew(step.skew)
		for range 3 {
			if !s.measureOffset(context.Background()) {
				t.Fatal("the store did not answer")
			}
		}
		if w, n := logs.count(slog.LevelWarn), logs.count(slog.LevelInfo); w != step.warn || n != step.info {
			t.Fatalf("step %d (offset %v): %d warnings and %d notices, want %d and %d", i, step.skew, w, n, step.warn, step.info)
		}
	}
}
