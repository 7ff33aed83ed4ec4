package ratelimiting

import (
	"context"
	"fmt"
	"time"

	"github.com/ratesync/ratesync/internal/arith"
	"github.com/ratesync/ratesync/shm"
)

// Window is the state of one key in one window size, as this node sees it.
type Window struct {
	Start    time.Time
	Size     time.Duration
	Current  float64 // count of the current window (cluster view on this node)
	Previous float64 // count of the previous window
	Weight   float64 // share of the previous window still inside the sliding window
}

// Rate returns the sliding rate: Current + Previous*Weight.
func (w Window) Rate() float64 { return w.Current + w.Previous*w.Weight }

func makeWindow(start time.Time, startMs, size, now int64, cur, prev float64) Window {
	return Window{
		Start:    start,
		Size:     time.Duration(size) * time.Millisecond,
		Current:  cur,
		Previous: prev,
		Weight:   arith.Weight(now-startMs, size),
	}
}

// series returns the namespace and the series of size, or the error that
// names what is wrong. The fast path (a few namespaces, a known size) is a
// slice scan with no map hashing.
func (in *Instance) series(name string, size time.Duration) (*ns, *shm.Series, error) {
	if t := in.nss.Load(); len(t.list) <= scanLimit {
		for _, n := range t.list {
			if n.cfg.Name == name {
				for i, s := range n.sizes {
					if s == size {
						return n, n.series[i], nil
					}
				}
				break
			}
		}
	}
	return in.seriesSlow(name, size)
}

func (in *Instance) seriesSlow(name string, size time.Duration) (*ns, *shm.Series, error) {
	n, err := in.lookup(name)
	if err != nil {
		return nil, nil, err
	}
	sr := n.seriesOf(size)
	if sr == nil {
		return nil, nil, &InputError{
			Field:   "window",
			Value:   size.String(),
			Allowed: fmt.Sprintf("must be one of the window sizes of namespace %q: %v", n.cfg.Name, n.cfg.WindowSizes),
		}
	}
	return n, sr, nil
}

func checkValue(field string, v float64) error {
	if v-v != 0 { // NaN or ±Inf
		return &InputError{Field: field, Value: fmt.Sprint(v), Allowed: "must be a finite number"}
	}
	return nil
}

// Increment adds value to key's count in the current window of size and
// returns the window after the increment (Kong's increment). value may be
// fractional, and negative to refund; NaN and infinities are rejected. size
// must be one of the namespace's window sizes.
//
// In a synchronous namespace the increment reaches the store before
// Increment returns and the window holds the store's totals as of this hit;
// when the store fails, the hit is counted locally and pushed later, and no
// error is returned. Otherwise Increment never blocks: it is a few atomic
// operations on this node.
func (in *Instance) Increment(ctx context.Context, ns, key string, size time.Duration, value float64) (Window, error) {
	if err := checkValue("value", value); err != nil {
		return Window{}, err
	}
	n, sr, err := in.series(ns, size)
	if err != nil {
		return Window{}, err
	}
	now := in.nowIn(n)
	w := sr.Current(now)
	if n.syncer != nil && n.cfg.SyncRate == 0 {
		t, err := n.syncer.Hit(ctx, w, key, value)
		if err != nil {
			return Window{}, err
		}
		if sr.Closed() {
			w.Add(key, -value, now) // see shm.Series.Closed
			return Window{}, ErrClosed
		}
		return makeWindow(w.StartTime(), w.Start(), sr.Size(), now, t.Current, t.Previous), nil
	}
	_, cur := w.Add(key, value, now)
	if sr.Closed() {
		w.Add(key, -value, now) // see shm.Series.Closed
		return Window{}, ErrClosed
	}
	prev := 0.0
	if p := w.Prev(); p != nil {
		prev = p.Value(key)
	}
	return makeWindow(w.StartTime(), w.Start(), sr.Size(), now, cur, prev), nil
}

// SlidingWindow returns key's current window of size without changing
// anything (Kong's sliding_window): it creates no counter.
func (in *Instance) SlidingWindow(ctx context.Context, ns, key string, size time.Duration) (Window, error) {
	n, sr, err := in.series(ns, size)
	if err != nil {
		return Window{}, err
	}
	now := in.nowIn(n)
	start := sr.StartOf(now)
	cur, prev := read(sr, key, now)
	return makeWindow(time.UnixMilli(start), start, sr.Size(), now, cur, prev), nil
}

// read returns key's current and previous counts in sr at now, creating
// nothing.
func read(sr *shm.Series, key string, now int64) (cur, prev float64) {
	start := sr.StartOf(now)
	if w := sr.Window(start, false, now); w != nil {
		cur = w.Value(key)
		if p := w.Prev(); p != nil {
			prev = p.Value(key)
		}
		return cur, prev
	}
	if p := sr.Window(start-sr.Size(), false, now); p != nil {
		prev = p.Value(key)
	}
	return cur, prev
}
