package ratelimiting

import (
	"math"

	"github.com/ratesync/ratesync/internal/arith"
	"github.com/ratesync/ratesync/shm"
)

// The read phase: each window group's current and previous windows and
// each span's older sub-windows, as of the plan's now.

func (g *group) state() arith.Window {
	return arith.Window{Cur: g.cur, Prev: g.prev, Size: g.sr.Size(), Elapsed: g.e}
}

// read takes each window group's windows as of p.now, and each span's
// older sub-windows.
func (p *plan) read(key string) {
	now := p.now
	for i := range p.groups {
		g := &p.groups[i]
		g.w = g.sr.Current(now)
		g.e = now - g.w.Start()
		if w := g.w.Prev(); w != nil {
			g.prev = w.Value(key)
		}
	}
	p.readSpans(key)
}

// readSpans reads each span's sub-windows before its group's current one:
// their counts summed from the newest (mid), and the oldest one's.
func (p *plan) readSpans(key string) {
	now := p.now
	for i := range p.spans {
		s := &p.spans[i]
		s.mid, s.old = 0, 0
		g := &p.groups[s.g]
		k := s.span / g.sr.Size()
		w := g.w
		for back := int64(1); back <= k; back++ {
			w = g.older(w, back, now)
			c := 0.0
			if w != nil {
				c = w.Value(key)
			}
			if back < k {
				s.mid += c
			} else {
				s.old = c
			}
		}
	}
}

// older returns the window back windows before the group's current one,
// nil when it is not held; w is the one before it (back - 1), or nil.
func (g *group) older(w *shm.Window, back, now int64) *shm.Window {
	start := g.w.Start() - back*g.sr.Size()
	if w != nil {
		if pw := w.Prev(); pw != nil && pw.Start() == start {
			return pw
		}
	}
	return g.sr.Window(start, false, now)
}

// readBucket reads b's state at p.now into before and after.
func (p *plan) readBucket(b *bgroup, key string) { b.read(key, p.cost, p.now) }

// read reads the bucket's state at now into before and after, and judges a
// request of cost on it.
func (b *bgroup) read(key string, cost float64, now int64) {
	b.before = arith.Bucket{Rate: b.rate, Window: b.t.Window(), Origin: now}
	if bk := b.t.Get(key, b.rate, now); bk != nil {
		for {
			word, _, alive := b.t.Level(bk, now)
			if alive {
				b.before.Base, b.before.Origin = math.Float64frombits(word), b.t.Epoch()
				break
			}
			if bk = b.t.Get(key, b.rate, now); bk == nil {
				break
			}
		}
	}
	b.after = b.before
	b.passable = arith.BucketFits(b.before.Level(now), cost, b.burst, b.t.Window())
}
