package syncer

import "time"

// clock is the syncer's one source of time (see the package documentation).
// It is set once by New and never changes.
type clock struct {
	node func() int64     // Config.Now: the node's clock, Unix milliseconds
	now  func() time.Time // Config.Clock: the node's clock at full resolution
	off  *offset          // the store clock's offset (offset.go)
}

func newClock(cfg Config, off *offset) clock {
	c := clock{node: cfg.Now, now: cfg.Clock, off: off}
	if c.now == nil {
		ms := cfg.Now
		c.now = func() time.Time { return time.UnixMilli(ms()) }
	}
	off.init(cfg.StoreClock)
	return c
}

// ms returns the namespace clock, Unix milliseconds: the node's, plus the
// store's offset when the namespace counts in store time.
func (c clock) ms() int64 { return c.off.cur.Load().at(c.node()) }

// since returns the time elapsed since t, a reading of c.now.
func (c clock) since(t time.Time) time.Duration { return c.now().Sub(t) }
