package ratelimiting

import (
	"fmt"
	"time"

	"github.com/ratesync/ratesync/internal/arith"
	"github.com/ratesync/ratesync/shm"
	"github.com/ratesync/ratesync/strategy"
)

// Anchored windows and sliding logs: a state per key (shm.Keyed) that a
// decision locks, judges and changes as a whole, with the arithmetic of
// internal/arith, the very steps every store takes.

// kgroup is the work on one anchored window or log of a Check: limits of
// one of those algorithms and one window share it.
type kgroup struct {
	first  int
	algo   Algorithm
	window int64   // ms
	limit  float64 // the smallest limit sharing it
	anch   *shm.Keyed[strategy.BucketState]
	logs   *shm.Keyed[arith.Log]
	sa     *shm.Slot[strategy.BucketState] // held between lock and unlock
	sl     *shm.Slot[arith.Log]
	// The state the decision is built from:
	before   float64 // the window's count or the log's sum before the request
	count    float64 // ... after the decision
	at       int64   // the window's opening, or the log's newest entry; 0 when none
	passable bool
	counted  bool
}

// addKeyed finds or adds the group of limit i, l, in keyed.
func addKeyed(n *ns, keyed []kgroup, i int, l Limit, now int64) ([]kgroup, int, error) {
	if err := n.keyedAllowed(l.Algorithm); err != nil {
		return nil, 0, &InputError{Field: limitField(i, "algorithm"), Value: l.Algorithm.String(), Allowed: err.Error()}
	}
	w := l.Window.Milliseconds()
	for j := range keyed {
		if k := &keyed[j]; k.algo == l.Algorithm && k.window == w {
			k.limit = min(k.limit, l.Limit)
			return keyed, j, nil
		}
	}
	k := kgroup{first: i, algo: l.Algorithm, window: w, limit: l.Limit}
	if l.Algorithm == AnchoredWindow {
		k.anch = n.anchoredTable(l.Window)
	} else {
		k.logs = n.logTable(l.Window)
	}
	return append(keyed, k), len(keyed), nil
}

// keyedAllowed returns why n cannot hold anchored windows or logs, nil
// when it can: they are decided as a whole, so not in a namespace that
// syncs periodically unless it is leased (anchored windows are leased,
// logs decided in the store), and a namespace that syncs needs a store
// that decides them.
func (n *ns) keyedAllowed(a Algorithm) error {
	if n.syncer == nil {
		return nil
	}
	if n.cfg.SyncRate > 0 && n.leases == nil {
		instead := "sliding_window with precision"
		if a == AnchoredWindow {
			instead = "fixed_window"
		}
		return fmt.Errorf("%s is decided as a whole per key, locally or in the store, and cannot sync periodically (namespace %q syncs every %v): use %s, or a synchronous or local-only namespace", a, n.cfg.Name, n.cfg.SyncRate, instead)
	}
	_, keeps := n.cfg.Strategy.(strategy.BucketStore)
	_, decides := n.cfg.Strategy.(strategy.Checker)
	if !keeps || !decides {
		return fmt.Errorf("%s needs a store that keeps and decides it (memory, Redis, PostgreSQL); the store of namespace %q does not", a, n.cfg.Name)
	}
	return nil
}

// anchoredTable and logTable return n's tables of anchored windows and
// logs of window.
func (n *ns) anchoredTable(window time.Duration) *shm.Keyed[strategy.BucketState] {
	w := window.Milliseconds()
	if ts := n.anchs.Load(); ts != nil {
		for _, t := range *ts {
			if t.Window() == w {
				return t
			}
		}
	}
	return register(&n.anchs, func() *shm.Keyed[strategy.BucketState] {
		return shm.KeyedTable(n.dict, n.cfg.Name, strategy.KindAnchored, window, n.cfg.Local(), n.live, func(s *strategy.BucketState, now int64) bool {
			return arith.AnchoredCount(s.Level, s.At, w, now) == 0
		})
	})
}

func (n *ns) logTable(window time.Duration) *shm.Keyed[arith.Log] {
	w := window.Milliseconds()
	if ts := n.logs.Load(); ts != nil {
		for _, t := range *ts {
			if t.Window() == w {
				return t
			}
		}
	}
	return register(&n.logs, func() *shm.Keyed[arith.Log] {
		return shm.KeyedTable(n.dict, n.cfg.Name, strategy.KindLog, window, n.cfg.Local(), n.live, func(s *arith.Log, now int64) bool {
			s.Trim(now, w)
			return len(s.Entries) == 0
		})
	})
}

// live reports whether the namespace is still in use.
func (n *ns) live() bool { return !n.closed() }

// lock locks key's state and reads it at now: a log drops the entries that
// no longer weigh.
func (k *kgroup) lock(key string, now int64) {
	if k.anch != nil {
		k.sa = k.anch.Lock(key, now)
		k.before, k.at = 0, 0
		if k.sa != nil && arith.AnchoredCount(k.sa.State.Level, k.sa.State.At, k.window, now) > 0 {
			k.before, k.at = k.sa.State.Level, k.sa.State.At
		}
	} else {
		k.sl = k.logs.Lock(key, now)
		k.before, k.at = 0, 0
		if k.sl != nil {
			k.sl.State.Trim(now, k.window)
			k.before, k.at = k.sl.State.Sum, k.sl.State.Newest()
		}
	}
	k.count = k.before
}

// fits reports whether a request of cost fits the state locked, against
// the tightest limit.
func (k *kgroup) fits(cost float64) bool { return k.fitsLimit(k.before, cost, k.limit) }

// fitsLimit reports whether cost fits limit on a count (AnchoredFits) or
// a log's sum (LogFits).
func (k *kgroup) fitsLimit(count, cost, limit float64) bool {
	if k.algo == AnchoredWindow {
		return arith.AnchoredFits(count, cost, limit)
	}
	return arith.LogFits(count, cost, limit)
}

// add counts cost at now in the state locked (nowhere when the dict had no
// room for it), and for the syncer in a table that syncs.
func (k *kgroup) add(cost float64, now int64) {
	k.counted = true
	if k.sa != nil {
		st := &k.sa.State
		st.Level, st.At = arith.AnchoredAdd(st.Level, st.At, cost, k.window, now)
		k.anch.Count(k.sa, now, cost)
		k.count, k.at = k.sa.State.Level, k.sa.State.At
	} else if k.sl != nil {
		k.sl.State.Add(now, cost)
		k.logs.Count(k.sl, now, cost)
		k.count, k.at = k.sl.State.Sum, k.sl.State.Newest()
	} else {
		k.count = k.before + cost
		if k.algo == AnchoredWindow && k.at == 0 || k.algo == SlidingLog {
			k.at = now
		}
	}
}

// unlock releases the state locked.
func (k *kgroup) unlock() {
	if k.sa != nil {
		k.sa.Unlock()
		k.sa = nil
	}
	if k.sl != nil {
		k.sl.Unlock()
		k.sl = nil
	}
}

// recordRetries sets, for each log limit of p on k that the request does
// not fit (the state locked, after the decision), when it will.
func (p *plan) recordRetries(k *kgroup) {
	if k.algo != SlidingLog {
		return
	}
	for i := range p.limits {
		if r := p.idx[i]; r.kind != refKeyed || &p.keyed[r.j] != k {
			continue
		}
		p.retry[i] = 0
		if limit := p.limits[i].Limit; !arith.LogFits(k.count, p.cost, limit) {
			if k.sl == nil {
				p.retry[i] = k.at + k.window
				continue
			}
			p.retry[i] = arith.RetryAt(k.sl.State.Entries, k.count, p.cost, limit, k.window)
		}
	}
}

// lockKeyed locks and reads every anchored window and log of the plan,
// and reports whether the request fits them all.
func (p *plan) lockKeyed(key string) bool {
	ok := true
	for i := range p.keyed {
		k := &p.keyed[i]
		k.lock(key, p.now)
		k.passable = k.fits(p.cost)
		ok = ok && k.passable
	}
	return ok
}

// settleKeyed counts the request in every anchored window and log when
// allowed, records their states, and unlocks them.
func (p *plan) settleKeyed(allowed bool) {
	for i := range p.keyed {
		k := &p.keyed[i]
		if allowed && p.cost > 0 {
			k.add(p.cost, p.now)
		}
		p.recordRetries(k)
		k.unlock()
	}
}

// keyedLimitState writes the LimitState of limit i, on anchored window or
// log k, into out, which must be zero.
func (p *plan) keyedLimitState(out *LimitState, i int, k *kgroup, allowed bool) {
	l := &p.limits[i]
	out.Limit, out.Rate = *l, k.count
	out.Remaining = arith.WholeFit(func(n float64) bool { return k.fitsLimit(k.count, n, l.Limit) }, l.Limit-k.count)
	if k.count > 0 && k.at != 0 {
		out.Reset = arith.Ms(max(0, k.at+k.window-p.now))
	}
	out.Allowed = allowed || k.fitsLimit(k.before, p.cost, l.Limit)
	if out.Allowed {
		return
	}
	if k.algo == AnchoredWindow {
		out.RetryAfter = arith.Ms(max(1, k.at+k.window-p.now))
		return
	}
	out.RetryAfter = arith.Ms(max(1, p.retry[i]-p.now))
}
