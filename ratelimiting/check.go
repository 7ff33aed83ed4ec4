package ratelimiting

import (
	"context"
	"fmt"
	"hash/maphash"

	"github.com/ratesync/ratesync/shm"
)

// Allow decides whether a request of cost passes every limit, and counts it
// only when it does. It is Check without penalty.
func (in *Instance) Allow(ctx context.Context, ns, key string, cost float64, limits ...Limit) (Decision, error) {
	return in.Check(ctx, Request{Namespace: ns, Key: key, Cost: cost, Limits: limits})
}

// group is the work on one window size of a Check: window limits may share
// one.
type group struct {
	sr       *shm.Series
	w        *shm.Window
	prev     float64 // count of the previous window
	e        int64   // ms into the current window
	ceiling  float64 // the current count plus cost must stay at most this
	before   float64 // current count before the request
	cur      float64 // current count after the decision
	counted  bool
	passable bool
}

func (g *group) state() windowState {
	return windowState{cur: g.cur, prev: g.prev, size: g.sr.Size(), e: g.e}
}

// bgroup is the work on one bucket of a Check: bucket limits of one
// algorithm and window share it.
type bgroup struct {
	t        *shm.Buckets
	rate     float64 // Limit: level drained per ms
	burst    float64 // the smallest capacity of the limits sharing it
	before   bucketState
	after    bucketState
	counted  bool
	passable bool
}

// plan is a Check's working state: the limits grouped by what they read,
// the state read, and what the executor did.
type plan struct {
	req     Request
	n       *ns
	now     int64
	groups  []group
	buckets []bgroup
	idx     []int // per limit: its group, or -1 - its bucket group
}

func (p *plan) parts() int { return len(p.groups) + len(p.buckets) }

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
	var (
		gbuf [stackLimits]group
		bbuf [2]bgroup
		ibuf [stackLimits]int
	)
	p := plan{req: req, groups: gbuf[:0], buckets: bbuf[:0], idx: ibuf[:0]}
	if len(req.Limits) > stackLimits {
		p.groups, p.idx = make([]group, 0, len(req.Limits)), make([]int, 0, len(req.Limits))
	}
	p.now = in.now()
	if err := in.prepare(&p); err != nil {
		return Decision{}, err
	}
	p.read()
	allowed, err := in.execute(ctx, &p)
	if err != nil {
		return Decision{}, err
	}
	if p.n.closed() { // the namespace went away meanwhile: see shm.Series.Closed
		p.refund()
		return Decision{}, ErrClosed
	}
	return p.decide(allowed), nil
}

// execute applies the plan with the executor of the namespace's mode and
// reports whether the request passed.
func (in *Instance) execute(ctx context.Context, p *plan) (bool, error) {
	n, req := p.n, p.req
	switch {
	case n.syncer != nil && n.cfg.SyncRate == 0:
		return in.checkSynchronous(ctx, p)
	case n.cfg.NearLimit && !req.Penalty && req.Cost > 0 && n.syncer != nil:
		return in.checkNearLimit(ctx, p)
	case req.Penalty:
		return in.checkPenalty(p), nil
	}
	return in.checkLocal(p), nil
}

// closed reports whether the namespace was removed.
func (n *ns) closed() bool {
	if len(n.series) > 0 {
		return n.series[0].Closed()
	}
	return false
}

// prepare validates req and groups its limits: window limits by size,
// bucket limits by algorithm and window.
func (in *Instance) prepare(p *plan) error {
	req := p.req
	if err := checkValue("cost", req.Cost); err != nil {
		return err
	}
	if req.Cost < 0 {
		return &InputError{Field: "cost", Value: fmt.Sprint(req.Cost), Allowed: "must be >= 0 (refund with Increment)"}
	}
	if len(req.Limits) == 0 {
		return &InputError{Field: "limits", Value: "[]", Allowed: "at least one limit is required"}
	}
	n, err := in.lookup(req.Namespace)
	if err != nil {
		return err
	}
	p.n = n
	for i, l := range req.Limits {
		if err := validateLimit(i, l, req.Cost, req.Penalty); err != nil {
			return err
		}
		if l.Algorithm.bucket() {
			j, err := p.addBucket(i, l)
			if err != nil {
				return err
			}
			p.idx = append(p.idx, -1-j)
			continue
		}
		sr := n.seriesOf(l.Window)
		if sr == nil {
			return &InputError{Field: limitField(i, "window"), Value: l.Window.String(), Allowed: fmt.Sprintf("must be one of the window sizes of namespace %q: %v", n.cfg.Name, n.cfg.WindowSizes)}
		}
		j := 0
		for j < len(p.groups) && p.groups[j].sr != sr {
			j++
		}
		if j == len(p.groups) {
			p.groups = append(p.groups, group{sr: sr, ceiling: l.Limit})
		}
		p.idx = append(p.idx, j)
	}
	p.sortGroups()
	return nil
}

// addBucket finds or adds the bucket group of limit i.
func (p *plan) addBucket(i int, l Limit) (int, error) {
	n := p.n
	if err := n.bucketsAllowed(); err != nil {
		return 0, &InputError{Field: limitField(i, "algorithm"), Value: l.Algorithm.String(), Allowed: err.Error()}
	}
	for j := range p.buckets {
		b := &p.buckets[j]
		if b.t.Kind() != uint8(l.Algorithm) || b.t.Window() != l.Window.Milliseconds() {
			continue
		}
		if b.rate != l.Limit {
			return 0, &InputError{Field: limitField(i, "limit"), Value: fmt.Sprint(l.Limit), Allowed: fmt.Sprintf("names the %s of window %v another limit names with limit %v: one bucket has one rate", l.Algorithm, l.Window, b.rate)}
		}
		b.burst = min(b.burst, l.burst())
		return j, nil
	}
	t := n.dict.Buckets(n.cfg.Name, uint8(l.Algorithm), l.Window, n.cfg.Local(), p.now)
	p.buckets = append(p.buckets, bgroup{t: t, rate: l.Limit, burst: l.burst()})
	return len(p.buckets) - 1, nil
}

// sortGroups sorts the window groups by size (insertion sort: a handful),
// keeping idx pointing at the same groups.
func (p *plan) sortGroups() {
	groups, idx := p.groups, p.idx
	for i := 1; i < len(groups); i++ {
		for j := i; j > 0 && groups[j].sr.Size() < groups[j-1].sr.Size(); j-- {
			groups[j], groups[j-1] = groups[j-1], groups[j]
			for k := range idx {
				switch idx[k] {
				case j:
					idx[k] = j - 1
				case j - 1:
					idx[k] = j
				}
			}
		}
	}
}

// read takes each window group's windows and ceiling as of p.now.
func (p *plan) read() {
	now := p.now
	for i := range p.groups {
		g := &p.groups[i]
		g.w = g.sr.Current(now)
		g.e = now - g.w.Start()
		if w := g.w.Prev(); w != nil {
			g.prev = w.Value(p.req.Key)
		}
	}
	for i, l := range p.req.Limits {
		if j := p.idx[i]; j >= 0 {
			g := &p.groups[j]
			g.ceiling = min(g.ceiling, windowCeiling(g.prev, l.Limit, g.sr.Size(), g.e, l.fixed()))
		}
	}
}

// decide builds the Decision from the state the executor left.
func (p *plan) decide(allowed bool) Decision {
	req := p.req
	d := Decision{Allowed: allowed, Limits: make([]LimitState, len(req.Limits))}
	for i, l := range req.Limits {
		var st LimitState
		if j := p.idx[i]; j >= 0 {
			g := &p.groups[j]
			st = windowLimitState(l, g.state(), g.before, req.Cost, allowed)
		} else {
			b := &p.buckets[-1-j]
			st = bucketLimitState(l, b.before, b.after, req.Cost, p.now, allowed)
		}
		if !st.Allowed {
			d.RetryAfter = max(d.RetryAfter, st.RetryAfter)
		}
		d.Limits[i] = st
	}
	return d
}

// refund takes back what the executor counted on this node.
func (p *plan) refund() {
	for i := range p.groups {
		if g := &p.groups[i]; g.counted {
			g.w.Add(p.req.Key, -p.req.Cost, p.now)
			g.cur, g.counted = g.before, false
		}
	}
	for i := range p.buckets {
		if b := &p.buckets[i]; b.counted {
			if bk := b.t.Get(p.req.Key, b.rate, p.now); bk != nil {
				b.t.Refund(bk, p.req.Cost)
			}
			b.after, b.counted = b.before, false
		}
	}
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
