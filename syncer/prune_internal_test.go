package syncer

import (
	"context"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratesync/ratesync/shm"
	"github.com/ratesync/ratesync/strategy/memory"
)

// A retired series that holds diffs when pruneRetired replaces the
// configuration is kept, however the configuration changed since the
// series were last seen empty: here it is added back and retired again,
// with a diff in between, while pruneRetired waits for confMu.
func TestPruneKeepsASeriesRetiredAgainWithDiffs(t *testing.T) {
	d, err := shm.NewDict("d", 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	now := time.Date(2030, 1, 1, 0, 30, 0, 0, time.UTC).UnixMilli()
	a, b := d.Series("ns", time.Minute), d.Series("ns", time.Hour)
	var seq atomic.Uint64
	cfg := Config{
		Namespace: "ns", Node: "ns|n1", Rate: time.Hour, Strategy: memory.New(), Series: []*shm.Series{a, b},
		Now: func() int64 { return now }, Seq: &seq, Logger: slog.New(slog.DiscardHandler),
	}
	s := New(cfg)
	cfg.Series = []*shm.Series{a}
	s.Reconfigure(cfg) // b retired, empty
	if !slices.Contains(s.conf.Load().retired, b) || !b.Empty() {
		t.Fatal("b is not retired and empty")
	}

	s.confMu.Lock()
	done := make(chan struct{})
	go func() {
		s.pruneRetired(now)
		close(done)
	}()
	time.Sleep(20 * time.Millisecond) // let pruneRetired look at b and wait for confMu
	// What two Reconfigure calls do meanwhile: add b back, count a hit in
	// it, retire it again.
	b.Current(now).Add("k", 1, now)
	s.conf.Store(newConf(cfg, []*shm.Series{b}))
	s.confMu.Unlock()
	<-done

	if !slices.Contains(s.conf.Load().pushing, b) {
		t.Fatal("a retired series holding a diff was dropped from the pushed series")
	}
	if err := s.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	start := time.UnixMilli(b.StartOf(now))
	if got, _ := cfg.Strategy.GetWindow(context.Background(), "ns", "k", start, time.Hour); got != 1 {
		t.Fatalf("store %v, want the retired series' diff: 1", got)
	}
}
