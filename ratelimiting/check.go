package ratelimiting

import (
	"context"
	"hash/maphash"
	"time"

	"github.com/ratesync/ratesync/namespace"
)

// Deciding is four phases, each in a file of its own: plan (plan.go)
// validates a request and groups its limits by the state they read; read
// (read.go) takes that state from shm; execute (execute.go) judges the
// request with internal/arith's functions and takes it, each window with a
// compare-and-swap judged on the value it replaces, so that concurrent
// callers never admit more than a limit, or asks the store to; decide
// (decide.go) writes each limit's state from what the executor left. This
// file holds the entry points and runs the phases.

// Allow decides whether a request of cost passes every limit, and counts it
// only when it does. It is Check without penalty.
func (in *Instance) Allow(ctx context.Context, ns, key string, cost float64, limits ...Limit) (Decision, error) {
	return in.Check(ctx, Request{Namespace: ns, Key: key, Cost: cost, Limits: limits})
}

// stackLimits is the number of limits a Check handles without allocating
// its working arrays.
const stackLimits = 8

// Check decides req: one plan of what each limit reads (prepare, read), one
// executor of the namespace's mode, and one Decision built from the state
// the executor left (decide). All-or-nothing across limits; atomic on this
// node for concurrent callers: N goroutines racing for the last L slots of a
// limit get exactly L passes. In a synchronous namespace it is atomic
// across nodes too when the store implements strategy.Checker, as memory,
// Redis and PostgreSQL do; with another store, synchronous Allow decides on
// the view and then counts, and may admit a few over the limit. A denial is
// a result, not an error; errors are for bad input (ErrInvalidInput),
// unknown namespaces and a canceled ctx.
func (in *Instance) Check(ctx context.Context, req Request) (Decision, error) {
	d := Decision{Limits: make([]LimitState, len(req.Limits))}
	var err error
	d.Allowed, d.RetryAfter, err = in.check(ctx, req.Namespace, req.Key, plan{cost: req.Cost, penalty: req.Penalty, limits: req.Limits}, d.Limits)
	if err != nil {
		return Decision{}, err
	}
	return d, nil
}

// AllowOne decides a request of cost against one limit, as Allow does, and
// returns that limit's state, whose Allowed is the decision. It allocates
// nothing on an existing key: the hot path of a single limit.
func (in *Instance) AllowOne(ctx context.Context, ns, key string, cost float64, limit Limit) (st LimitState, err error) {
	limits := [1]Limit{limit}
	var out [1]LimitState
	if in.nss.Load().leased {
		p := plan{cost: cost, limits: limits[:]}
		if in.leaseFast(ns, key, &p, out[:]) {
			return out[0], nil
		}
	}
	if limit.Algorithm.bucket() {
		if ok, err := in.allowBucket(&st, ns, key, cost, &limit); ok || err != nil {
			return st, err
		}
	}
	if _, _, err := in.check(ctx, ns, key, plan{cost: cost, limits: limits[:]}, out[:]); err != nil {
		return LimitState{}, err
	}
	return out[0], nil
}

// check is Check of the request p holds (cost, penalty, limits), writing
// each limit's state into out (len(p.limits)). The namespace and key come
// apart from p: they escape, p's arrays must not.
func (in *Instance) check(ctx context.Context, name, key string, p plan, out []LimitState) (allowed bool, retry time.Duration, err error) {
	if in.nss.Load().leased && in.leaseFast(name, key, &p, out) {
		return true, 0, nil
	}
	for i := range p.limits {
		if l := &p.limits[i]; l.Algorithm.keyed() || l.Precision != 0 {
			return in.checkMore(ctx, name, key, p, out)
		}
	}
	var (
		gbuf [stackLimits]group
		bbuf [2]bgroup
		ibuf [stackLimits]ref
	)
	p.groups, p.buckets, p.idx = gbuf[:0], bbuf[:0], ibuf[:0]
	if len(p.limits) > stackLimits {
		p.groups, p.idx = make([]group, 0, len(p.limits)), make([]ref, 0, len(p.limits))
	}
	n, pp, err := in.prepare(&p, name)
	if err != nil {
		return false, 0, err
	}
	p.groups, p.buckets, p.idx = pp.groups, pp.buckets, pp.idx
	return in.finish(ctx, &p, n, key, out)
}

// checkMore is check of a request with anchored windows, logs or
// precision limits: with arrays for them too (kept apart so that other
// requests do not clear them on every call).
func (in *Instance) checkMore(ctx context.Context, name, key string, p plan, out []LimitState) (allowed bool, retry time.Duration, err error) {
	var (
		rbuf [stackLimits]int64
		gbuf [stackLimits]group
		sbuf [2]sgroup
		kbuf [2]kgroup
		bbuf [2]bgroup
		ibuf [stackLimits]ref
	)
	p.groups, p.spans, p.buckets, p.keyed, p.idx, p.retry = gbuf[:0], sbuf[:0], bbuf[:0], kbuf[:0], ibuf[:0], rbuf[:0]
	if len(p.limits) > stackLimits {
		p.groups, p.idx = make([]group, 0, len(p.limits)), make([]ref, 0, len(p.limits))
	}
	n, pp, err := in.prepare(&p, name)
	if err != nil {
		return false, 0, err
	}
	p.groups, p.spans, p.buckets, p.keyed, p.idx, p.retry = pp.groups, pp.spans, pp.buckets, pp.keyed, pp.idx, pp.retry
	return in.finish(ctx, &p, n, key, out)
}

// finish runs a prepared plan: it reads, executes and decides.
func (in *Instance) finish(ctx context.Context, p *plan, n *ns, key string, out []LimitState) (allowed bool, retry time.Duration, err error) {
	p.sortGroups()
	p.read(key)
	if allowed, err = in.execute(ctx, p, n, key); err != nil {
		return false, 0, err
	}
	if n.closed() { // the namespace went away meanwhile: see shm.Series.Closed
		p.refund(key)
		return false, 0, ErrClosed
	}
	switch {
	case p.grant != nil:
		p.grant.states(p.limits, p.cost, p.left, p.now, out)
		return true, 0, nil
	case p.denial != nil:
		return false, p.denial.refuse(p.now, out), nil
	}
	if retry, ok := p.storeDownStates(out); ok {
		return allowed, retry, nil
	}
	return allowed, p.decide(key, allowed, out), nil
}

// execute applies the plan with the executor of the namespace's mode and
// reports whether the request passed.
func (in *Instance) execute(ctx context.Context, p *plan, n *ns, key string) (bool, error) {
	switch {
	case p.local:
		return in.checkLocal(p, key), nil
	case p.inStore && p.cost > 0 && !p.penalty && n.syncer != nil:
		allowed, ok, err := in.checkInStore(ctx, p, n, key)
		if err != nil || ok {
			return allowed, err
		}
		if n.cfg.StoreDown == namespace.StoreDownDeny {
			p.refused = max(time.Millisecond, n.syncer.RetryIn())
			return false, nil
		}
		if n.cfg.StoreDown == namespace.StoreDownShare && !in.mayShare(p, n) {
			return false, nil
		}
		return in.checkLocal(p, key), nil // the limits are the shares already
	case n.syncer != nil && n.cfg.SyncRate == 0:
		return in.checkSynchronous(ctx, p, n, key)
	case n.leases != nil && p.leasable():
		return in.checkLeased(ctx, p, n, key)
	case n.leases != nil && p.cost > 0 && !p.penalty && len(p.keyed) > 0:
		// A sliding log: decided in the store, as in a synchronous
		// namespace; on this node's slots when the store cannot answer.
		allowed, ok, err := in.checkInStore(ctx, p, n, key)
		if err != nil || ok {
			return allowed, err
		}
		n.leases.stats.fallbacks.Add(1)
		return in.storeDown(ctx, p, n, key)
	case n.cfg.NearLimit && !p.penalty && p.cost > 0 && n.syncer != nil:
		return in.checkNearLimit(ctx, p, n, key)
	case p.penalty:
		return in.checkPenalty(p, key), nil
	}
	return in.checkLocal(p, key), nil
}

// closed reports whether the namespace was removed.
func (n *ns) closed() bool {
	if len(n.series) > 0 {
		return n.series[0].Closed()
	}
	return false
}

// lock serializes checks of one key on this node that touch more than one
// window or bucket; it returns nil when one needs no lock.
func (in *Instance) lock(key string, parts int) *stripe {
	if parts < 2 {
		return nil
	}
	s := &in.stripes[maphash.String(in.seed, key)%uint64(len(in.stripes))]
	s.Lock()
	return s
}

func (s *stripe) unlock() {
	if s != nil {
		s.Unlock()
	}
}
