package syncer

import "time"

// clock is the syncer's one source of time (see the package documentation).
// It is set once by New and never changes.
type clock struct {
	ms  func() int64     // Config.Now: the namespace clock, Unix milliseconds
	now func() time.Time // Config.Clock: the same timeline at full resolution
}

func newClock(cfg Config) clock {
	c := clock{ms: cfg.Now, now: cfg.Clock}
	if c.now == nil {
		ms := cfg.Now
		c.now = func() time.Time { return time.UnixMilli(ms()) }
	}
	return c
}

// since returns the time elapsed since t, a reading of c.now.
func (c clock) since(t time.Time) time.Duration { return c.now().Sub(t) }
