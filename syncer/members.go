package syncer

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratesync/ratesync/internal/arith"
	"github.com/ratesync/ratesync/strategy"
)

// Members: how many nodes use the namespace's store, counted through the
// store itself with nothing but the strategy contract. Every membersEvery
// (every second for the first ten)
// each node adds 1 to its own counter (its push lane's name) in the
// namespace's members record, Namespace + "|nodes" (a name no namespace
// can have: names refuse '|'), in windows of membersWindow, pushed on a
// lane of its own; then it reads every key of the current and previous
// window. The keys it finds are the nodes seen in the last 10 to 20
// seconds. A store-down behaviour that shares a limit among the nodes
// divides it by that count (Nodes). A failed exchange changes nothing and
// is no store failure (the exchanges that decide say that).
const (
	membersEvery  = 5 * time.Second
	membersWindow = 10 * time.Second
	// For its first membersEarly a syncer counts every second, so that
	// nodes started together soon see each other.
	membersEarly      = 10 * time.Second
	membersEarlyEvery = time.Second
)

type members struct {
	mu    sync.Mutex // one exchange at a time
	first time.Time  // on Config.Clock: the first count
	next  time.Time  // on Config.Clock: when the next exchange is due
	count atomic.Int64
}

// Nodes returns how many nodes, this one included, were seen using the
// store in the last 10 to 20 seconds as of the last count; 0 before any
// count succeeded.
func (s *Syncer) Nodes() int { return int(s.members.count.Load()) }

// membersDue reports whether a count is due: a hint, read without the
// lock (membersIfDue decides under it).
func (s *Syncer) membersDue() bool {
	m := &s.members
	if !m.mu.TryLock() {
		return false
	}
	defer m.mu.Unlock()
	return !s.clock.now().Before(m.next)
}

// membersIfDue counts the nodes when the last count is membersEvery old,
// within the call timeout. It never waits for another count under way.
func (s *Syncer) membersIfDue(ctx context.Context) {
	m := &s.members
	if s.isDown() || !m.mu.TryLock() {
		return
	}
	defer m.mu.Unlock()
	now := s.clock.now()
	if now.Before(m.next) {
		return
	}
	if m.first.IsZero() {
		m.first = now
	}
	m.next = now.Add(membersEvery)
	if now.Sub(m.first) < membersEarly {
		m.next = now.Add(membersEarlyEvery)
	}
	c := s.conf.Load()
	ctx, cancel := context.WithTimeout(ctx, c.HitTimeout)
	defer cancel()
	ns, size := c.Namespace+"|nodes", membersWindow
	start := time.UnixMilli(arith.Start(s.Now(), size.Milliseconds()))
	b := strategy.Batch{Node: c.Node + "|nodes", Seq: c.Seq.Add(1), Diffs: []strategy.Diff{{Namespace: ns, Key: c.Node, WindowStart: start, WindowSize: size, Value: 1}}}
	if err := c.Strategy.PushDiffs(ctx, b); err != nil {
		c.Logger.Debug("ratesync: counting the nodes: push", "namespace", c.Namespace, "err", err)
		return
	}
	seen := map[string]bool{}
	for cn, err := range c.Strategy.GetCounters(ctx, strategy.Query{Namespace: ns, WindowSizes: []time.Duration{size}, Now: start}) {
		if err != nil {
			c.Logger.Debug("ratesync: counting the nodes: read", "namespace", c.Namespace, "err", err)
			return
		}
		if cn.Count > 0 {
			seen[cn.Key] = true
		}
	}
	m.count.Store(int64(max(1, len(seen))))
}
