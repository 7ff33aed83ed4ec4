package syncer

import (
	"context"
	"fmt"
	"time"

	"github.com/ratesync/ratesync/shm"
	"github.com/ratesync/ratesync/strategy"
)

// fetchLocked reads, for the keys this node counted in the current window
// of any size (its active keys, not every key it ever fetched), the current
// and previous windows (and the older ones a precision span reads: the
// series' Depth), and sets each counter's sync part to the store's
// count plus what of it is still in flight. Counters of those keys that the
// store does not return are counted zero there. Previous-window counters
// (and older ones) are made when missing (the sliding rate needs them); current-window ones
// are only updated: a key this node has not counted in this window is not
// its to follow. Then it reads every bucket the node holds (fetchBuckets).
// Callers hold lane.mu.
func (s *Syncer) fetchLocked(ctx context.Context) (int, error) {
	c := s.conf.Load()
	now := s.clock.ms()
	n, err := s.fetchWindows(ctx, c, now)
	if err != nil {
		return n, err
	}
	nb, err := s.fetchBuckets(ctx, c, now)
	return n + nb, err
}

// fetchWindows is fetchLocked's part for windows.
func (s *Syncer) fetchWindows(ctx context.Context, c *conf, now int64) (int, error) {
	keySet := make(map[string]struct{})
	sizes := make([]time.Duration, 0, len(c.Series))
	depths := make([]int, 0, len(c.Series))
	for _, sr := range c.Series {
		sizes = append(sizes, time.Duration(sr.Size())*time.Millisecond)
		depths = append(depths, sr.Depth())
		if w := sr.Window(sr.StartOf(now), false, now); w != nil {
			w.Range(func(key string, _ *shm.Counter) bool {
				keySet[key] = struct{}{}
				return true
			})
		}
	}
	if len(keySet) == 0 {
		s.lastFetch.Store(now)
		return 0, nil
	}
	keys := make([]string, 0, len(keySet))
	for k := range keySet {
		keys = append(keys, k)
	}
	q := strategy.Query{Namespace: c.Namespace, WindowSizes: sizes, Now: time.UnixMilli(now), Keys: keys, Windows: depths}
	seen := make(map[*shm.Counter]struct{}, len(keys))
	n := 0
	for sc, err := range c.Strategy.GetCounters(ctx, q) {
		if err != nil {
			s.countCall(callFetch, err)
			return n, fmt.Errorf("syncer: namespace %q: get counters: %w", c.Namespace, err)
		}
		n++
		if ctr := s.settle(c, sc, now); ctr != nil {
			seen[ctr] = struct{}{}
		}
	}
	s.lane.calls++
	s.lastFetch.Store(now)
	s.zeroUnseen(c, keySet, seen, now)
	return n, nil
}

// settle sets the counter of sc, a count the store returned, to the store's
// count plus its amount in flight, and returns it; nil when this node does
// not follow it (not its key in the current window, or the dict is full).
func (s *Syncer) settle(c *conf, sc strategy.Counter, now int64) *shm.Counter {
	size, start := sc.WindowSize.Milliseconds(), sc.WindowStart.UnixMilli()
	sr := c.bySize[size]
	if sr == nil {
		return nil
	}
	v := sc.Count + s.inflightOf(counterID{size, start, sc.Key})
	switch cur := sr.StartOf(now); {
	case start == cur:
		if w := sr.Window(start, false, now); w != nil {
			return w.SetSynced(sc.Key, v, false, now)
		}
	case start < cur && start >= cur-sr.Span():
		return sr.Window(start, true, now).SetSynced(sc.Key, v, true, now)
	}
	return nil
}

// zeroUnseen sets the counters of keys in the windows read (the current
// and previous ones, and those a span reads) that the store did not return
// to their amount in flight: the store holds nothing for them.
func (s *Syncer) zeroUnseen(c *conf, keys map[string]struct{}, seen map[*shm.Counter]struct{}, now int64) {
	for _, sr := range c.Series {
		cur := sr.StartOf(now)
		for back := range int64(sr.Depth()) {
			start := cur - back*sr.Size()
			w := sr.Window(start, false, now)
			if w == nil {
				continue
			}
			for key := range keys {
				if ctr := w.Counter(key); ctr != nil {
					if _, ok := seen[ctr]; !ok {
						w.SetSynced(key, s.inflightOf(counterID{sr.Size(), start, key}), false, now)
					}
				}
			}
		}
	}
}
