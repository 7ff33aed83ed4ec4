package ratelimiting_test

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/strategytest"
	"github.com/ratesync/ratesync/ratelimiting"
)

// Kong's worked example (its rate-limiting library docs): current 10,
// previous 40, window 60 s, 30 s into the window: 10 + 40 * (60 - 30) / 60 = 30.
func TestKongWorkedExample(t *testing.T) {
	clk := newClock(t0.Add(-time.Minute))
	in := newInstance(t, clk)
	mustNew(t, in, local("default", time.Minute))
	incr(t, in, "default", "1.2.3.4", time.Minute, 40)
	clk.Set(t0)
	incr(t, in, "default", "1.2.3.4", time.Minute, 10)
	clk.Set(t0.Add(30 * time.Second))
	w := slide(t, in, "default", "1.2.3.4", time.Minute)
	if w.Current != 10 || w.Previous != 40 || w.Weight != 0.5 || w.Rate() != 30 {
		t.Fatalf("window = %+v rate %v, want current 10, previous 40, weight 0.5, rate 30", w, w.Rate())
	}
	if !w.Start.Equal(t0) || w.Size != time.Minute {
		t.Fatalf("window start %v size %v, want %v, 1m", w.Start, w.Size, t0)
	}
}

// The worked example of the Python limits library's docs: 100 per minute,
// current 80, previous 40. 30 s in: 80 + 40 * 0.5 = 100, a new request is
// rejected; 40 s in: 80 + 40/3 = 93.3, it is allowed.
func TestPythonLimitsWorkedExample(t *testing.T) {
	clk := newClock(t0.Add(-time.Minute))
	in := newInstance(t, clk)
	mustNew(t, in, local("api", time.Minute))
	incr(t, in, "api", "k", time.Minute, 40)
	clk.Set(t0)
	incr(t, in, "api", "k", time.Minute, 80)
	lim := ratelimiting.Limit{Limit: 100, Window: time.Minute}

	clk.Set(t0.Add(30 * time.Second))
	d, err := in.Allow(context.Background(), "api", "k", 1, lim)
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed || d.Limits[0].Rate != 100 || d.Limits[0].Remaining != 0 {
		t.Fatalf("at 30 s: %+v, want denied at rate 100 with 0 remaining", d)
	}
	// 80 + 40 * (60 - t)/60 + 1 <= 100 first holds at t = 31.5 s.
	if d.RetryAfter != 1500*time.Millisecond {
		t.Fatalf("RetryAfter = %v, want 1.5s", d.RetryAfter)
	}
	clk.Set(t0.Add(40 * time.Second))
	d, err = in.Allow(context.Background(), "api", "k", 1, lim)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Allowed || !near(d.Limits[0].Rate, 81+40.0/3) || d.Limits[0].Remaining != 5 {
		t.Fatalf("at 40 s: %+v, want allowed, rate 94.33 (counted), 5 remaining", d)
	}
}

func TestRollover(t *testing.T) {
	clk := newClock(t0.Add(10 * time.Second))
	in := newInstance(t, clk)
	mustNew(t, in, local("ns", time.Minute))
	for range 60 {
		incr(t, in, "ns", "k", time.Minute, 1)
	}
	tests := []struct {
		at              time.Duration
		cur, prev, rate float64
	}{
		{59*time.Second + 999*time.Millisecond, 60, 0, 60},
		{time.Minute, 0, 60, 60},
		{time.Minute + 15*time.Second, 0, 60, 45},
		{time.Minute + 59*time.Second, 0, 60, 1},
		{2 * time.Minute, 0, 0, 0},
	}
	for _, tt := range tests {
		clk.Set(t0.Add(tt.at))
		w := slide(t, in, "ns", "k", time.Minute)
		if w.Current != tt.cur || w.Previous != tt.prev || !near(w.Rate(), tt.rate) {
			t.Errorf("at %v: %+v rate %v; want current %v previous %v rate %v", tt.at, w, w.Rate(), tt.cur, tt.prev, tt.rate)
		}
	}
}

func TestMillisecondWeights(t *testing.T) {
	clk := newClock(t0)
	in := newInstance(t, clk)
	mustNew(t, in, local("ns", time.Second))
	tests := []struct {
		at     time.Duration
		weight float64
	}{
		{0, 1}, {time.Millisecond, 0.999}, {250 * time.Millisecond, 0.75}, {999 * time.Millisecond, 0.001},
		{1999 * time.Millisecond, 0.001}, {2500 * time.Millisecond, 0.5},
	}
	for _, tt := range tests {
		clk.Set(t0.Add(tt.at))
		if w := slide(t, in, "ns", "k", time.Second); !near(w.Weight, tt.weight) {
			t.Errorf("at %v: weight %v, want %v", tt.at, w.Weight, tt.weight)
		}
	}
}

func TestIncrementReturnsTheWindowAfterTheIncrement(t *testing.T) {
	clk := newClock(t0.Add(-time.Minute))
	in := newInstance(t, clk)
	mustNew(t, in, local("ns", time.Minute))
	incr(t, in, "ns", "k", time.Minute, 20)
	clk.Set(t0.Add(45 * time.Second))
	w := incr(t, in, "ns", "k", time.Minute, 2.5)
	if w.Current != 2.5 || w.Previous != 20 || w.Weight != 0.25 || w.Rate() != 7.5 {
		t.Fatalf("Increment = %+v rate %v, want current 2.5, previous 20, weight .25, rate 7.5", w, w.Rate())
	}
	w = incr(t, in, "ns", "k", time.Minute, -1) // refund
	if w.Current != 1.5 {
		t.Fatalf("after a refund of 1: current %v, want 1.5", w.Current)
	}
}

func TestSlidingWindowCreatesNothing(t *testing.T) {
	clk := newClock(t0)
	in := newInstance(t, clk)
	mustNew(t, in, local("ns", time.Minute))
	for i := range 100 {
		slide(t, in, "ns", string(rune('a'+i%26))+"x", time.Minute)
	}
	if n := in.Stats()[0].Dict.Entries; n != 0 {
		t.Fatalf("SlidingWindow created %d counters", n)
	}
}

func TestConcurrentIncrementsCountExactly(t *testing.T) {
	clk := newClock(t0)
	in := newInstance(t, clk)
	mustNew(t, in, local("ns", time.Minute))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20000 {
				if _, err := in.Increment(context.Background(), "ns", "hot", time.Minute, 1); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if w := slide(t, in, "ns", "hot", time.Minute); w.Current != 160000 {
		t.Fatalf("current = %v, want 160000", w.Current)
	}
}

func TestInstancesAreIsolated(t *testing.T) {
	clk := newClock(t0)
	a, b := newInstance(t, clk), newInstance(t, clk)
	mustNew(t, a, local("ns", time.Minute))
	mustNew(t, b, local("ns", time.Minute))
	incr(t, a, "ns", "k", time.Minute, 5)
	if w := slide(t, b, "ns", "k", time.Minute); w.Current != 0 {
		t.Fatalf("instance b sees %v hits of instance a", w.Current)
	}
	if err := a.Remove(context.Background(), "ns"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.SlidingWindow(context.Background(), "ns", "k", time.Minute); err != nil {
		t.Fatalf("removing a's namespace affected b: %v", err)
	}
	if a.Node() == b.Node() {
		t.Fatalf("two instances share node identity %q", a.Node())
	}
}

func TestKeysThatWouldCollideWhenJoinedStayApart(t *testing.T) {
	clk := newClock(t0)
	in := newInstance(t, clk)
	mustNew(t, in, local("ns", time.Minute, time.Hour))
	for i, k := range strategytest.Keys {
		incr(t, in, "ns", k, time.Minute, float64(i+1))
	}
	incr(t, in, "ns", "k", time.Hour, 1000)
	for i, k := range strategytest.Keys {
		if w := slide(t, in, "ns", k, time.Minute); w.Current != float64(i+1) {
			t.Errorf("key %q: current %v, want %d", k, w.Current, i+1)
		}
	}
	if w := slide(t, in, "ns", "k", time.Hour); w.Current != 1000 {
		t.Errorf("key k, 1h: %v, want 1000", w.Current)
	}
}

func TestInputErrors(t *testing.T) {
	clk := newClock(t0)
	in := newInstance(t, clk)
	mustNew(t, in, local("ns", time.Second, time.Minute))
	ctx := context.Background()
	sec := ratelimiting.Limit{Limit: 10, Window: time.Second}
	tests := []struct {
		name  string
		call  func() error
		field string
	}{
		{"increment NaN", func() error { _, err := in.Increment(ctx, "ns", "k", time.Second, math.NaN()); return err }, "value"},
		{"increment +Inf", func() error { _, err := in.Increment(ctx, "ns", "k", time.Second, math.Inf(1)); return err }, "value"},
		{"increment -Inf", func() error { _, err := in.Increment(ctx, "ns", "k", time.Second, math.Inf(-1)); return err }, "value"},
		{"increment unknown window", func() error { _, err := in.Increment(ctx, "ns", "k", time.Hour, 1); return err }, "window"},
		{"sliding window sub-millisecond", func() error { _, err := in.SlidingWindow(ctx, "ns", "k", time.Second+time.Microsecond); return err }, "window"},
		{"allow without limits", func() error { _, err := in.Allow(ctx, "ns", "k", 1); return err }, "limits"},
		{"allow NaN cost", func() error { _, err := in.Allow(ctx, "ns", "k", math.NaN(), sec); return err }, "cost"},
		{"allow negative cost", func() error { _, err := in.Allow(ctx, "ns", "k", -1, sec); return err }, "cost"},
		{"allow cost above limit", func() error { _, err := in.Allow(ctx, "ns", "k", 11, sec); return err }, "cost"},
		{"allow zero limit", func() error {
			_, err := in.Allow(ctx, "ns", "k", 1, ratelimiting.Limit{Limit: 0, Window: time.Second})
			return err
		}, "limits[0].limit"},
		{"allow Inf limit", func() error {
			_, err := in.Allow(ctx, "ns", "k", 1, sec, ratelimiting.Limit{Limit: math.Inf(1), Window: time.Second})
			return err
		}, "limits[1].limit"},
		{"allow unknown window", func() error {
			_, err := in.Allow(ctx, "ns", "k", 1, ratelimiting.Limit{Limit: 5, Window: 5 * time.Second})
			return err
		}, "limits[0].window"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			var ie *ratelimiting.InputError
			if !errors.As(err, &ie) || !errors.Is(err, ratelimiting.ErrInvalidInput) {
				t.Fatalf("err = %v, want a *ratelimiting.InputError", err)
			}
			if ie.Field != tt.field || ie.Value == "" || ie.Allowed == "" {
				t.Fatalf("error %+v: want field %q with a value and what is allowed", ie, tt.field)
			}
		})
	}
	if n := in.Stats()[0].Dict.Entries; n != 0 {
		t.Fatalf("rejected calls created %d counters", n)
	}
}

func TestNamespaceErrors(t *testing.T) {
	clk := newClock(t0)
	in := newInstance(t, clk)
	ctx := context.Background()
	mustNew(t, in, local("ns", time.Second))
	if err := in.New(local("ns", time.Second)); !errors.Is(err, ratelimiting.ErrNamespaceExists) {
		t.Errorf("New twice: %v, want ErrNamespaceExists", err)
	}
	if err := in.Update(local("nope", time.Second)); !errors.Is(err, ratelimiting.ErrNamespaceNotFound) {
		t.Errorf("Update absent: %v, want ErrNamespaceNotFound", err)
	}
	if _, err := in.Increment(ctx, "nope", "k", time.Second, 1); !errors.Is(err, ratelimiting.ErrNamespaceNotFound) {
		t.Errorf("Increment absent: %v, want ErrNamespaceNotFound", err)
	}
	if err := in.Remove(ctx, "nope"); !errors.Is(err, ratelimiting.ErrNamespaceNotFound) {
		t.Errorf("Remove absent: %v, want ErrNamespaceNotFound", err)
	}
	if err := in.New(local("a|b", time.Second)); err == nil {
		t.Error("New with an invalid config: no error")
	}
	cfg := local("ns", time.Second)
	cfg.Dict = "other"
	if err := in.Update(cfg); !errors.Is(err, ratelimiting.ErrDictConflict) {
		t.Errorf("Update moving dicts: %v, want ErrDictConflict", err)
	}
	if err := in.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := in.Close(ctx); err != nil {
		t.Errorf("second Close: %v, want nil", err)
	}
	if _, err := in.Increment(ctx, "ns", "k", time.Second, 1); !errors.Is(err, ratelimiting.ErrClosed) {
		t.Errorf("Increment after Close: %v, want ErrClosed", err)
	}
	if err := in.New(local("x", time.Second)); !errors.Is(err, ratelimiting.ErrClosed) {
		t.Errorf("New after Close: %v, want ErrClosed", err)
	}
}

func TestEmptyNamespaceNameMeansDefault(t *testing.T) {
	clk := newClock(t0)
	in := newInstance(t, clk)
	mustNew(t, in, local("", time.Second))
	incr(t, in, "", "k", time.Second, 1)
	if w := slide(t, in, "default", "k", time.Second); w.Current != 1 {
		t.Fatalf("default namespace: %v, want 1", w.Current)
	}
}

func TestFullDictFailsOpenAndKeepsHotKeys(t *testing.T) {
	clk := newClock(t0)
	in := newInstance(t, clk)
	cfg := local("ns", time.Minute)
	cfg.DictCapacity = 100
	mustNew(t, in, cfg)
	for range 50 {
		incr(t, in, "ns", "hot", time.Minute, 1)
	}
	for i := range 1000 {
		if i%50 == 0 {
			clk.Advance(200 * time.Millisecond) // lets the next background sweep start
		}
		w := incr(t, in, "ns", "flood-"+string(rune(i)), time.Minute, 1)
		if w.Current < 1 {
			t.Fatalf("flood key %d: current %v, want >= 1 (the hit is answered even when not stored)", i, w.Current)
		}
	}
	// Each key was made once or refused once; a key evicted right after it
	// was made may be refused or made again, so the sum can exceed 1001.
	eventually(t, time.Second, "a sweep evicted and overflows + evictions + entries >= 1001", func() bool {
		st := in.Stats()[0].Dict
		return st.Evictions > 0 && int(st.Overflows+st.Evictions)+st.Entries >= 1001
	})
	st := in.Stats()[0].Dict
	if st.Entries > 100+4 {
		t.Fatalf("dict holds %d counters, capacity 100", st.Entries)
	}
	if st.Overflows == 0 || st.Evictions == 0 {
		t.Fatalf("stats %+v: want both overflows and evictions counted", st)
	}
	if w := slide(t, in, "ns", "hot", time.Minute); w.Current != 50 {
		t.Fatalf("hot key = %v, want 50", w.Current)
	}
}
