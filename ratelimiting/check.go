package ratelimiting

import (
	"context"
	"fmt"
	"hash/maphash"
	"time"

	"github.com/ratesync/ratesync/internal/arith"

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
	sliding  float64 // the smallest sliding limit on the window, 0 when none
	fixed    float64 // the smallest fixed limit on the window, 0 when none
	before   float64 // current count before the request
	cur      float64 // current count after the decision
	counted  bool
	passable bool
}

func (g *group) state() arith.Window {
	return arith.Window{Cur: g.cur, Prev: g.prev, Size: g.sr.Size(), Elapsed: g.e}
}

// bgroup is the work on one bucket of a Check: bucket limits of one
// algorithm and window share it.
type bgroup struct {
	t        *shm.Buckets
	first    int     // the first limit of the request naming it
	rate     float64 // Limit: level drained per ms
	burst    float64 // the smallest capacity of the limits sharing it
	before   arith.Bucket
	after    arith.Bucket
	counted  bool
	passable bool
}

// sgroup is the work on one precision limit's span of a Check: a sliding
// window of span ms over the sub-windows of window group g.
type sgroup struct {
	g     int
	span  int64   // ms
	limit float64 // the smallest limit with this span
	mid   float64 // counts of the sub-windows between the current and the oldest, summed from the newest
	old   float64 // count of the oldest sub-window, the one holding now - span
}

// Which of a plan's parts a limit reads (ref.kind).
const (
	refWindow uint8 = iota // groups[j]
	refSpan                // spans[j], over the windows of groups[spans[j].g]
	refBucket              // buckets[j]
	refKeyed               // keyed[j]
)

// ref is the part of a plan a limit reads.
type ref struct {
	kind uint8
	j    int
}

// plan is a Check's working state: the limits grouped by what they read,
// the state read, and what the executor did. It holds no pointer that the
// executors let escape (the namespace and the key travel beside it), so
// that its arrays stay on the caller's stack.
type plan struct {
	cost    float64
	penalty bool
	limits  []Limit
	now     int64
	groups  []group
	spans   []sgroup
	buckets []bgroup
	keyed   []kgroup
	idx     []ref   // per limit: the part it reads
	retry   []int64 // per limit of a sliding log: when the request fits it (Unix ms), 0 when it does now
}

func (p *plan) parts() int { return len(p.groups) + len(p.buckets) + len(p.keyed) }

// windowOf returns the window group of limit i, a window or a span.
func (p *plan) windowOf(i int) *group {
	r := p.idx[i]
	if r.kind == refSpan {
		return &p.groups[p.spans[r.j].g]
	}
	return &p.groups[r.j]
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
	if limit.Algorithm.bucket() {
		if ok, err := in.allowBucket(&st, ns, key, cost, &limit); ok || err != nil {
			return st, err
		}
	}
	limits := [1]Limit{limit}
	var out [1]LimitState
	if _, _, err := in.check(ctx, ns, key, plan{cost: cost, limits: limits[:]}, out[:]); err != nil {
		return LimitState{}, err
	}
	return out[0], nil
}

// check is Check of the request p holds (cost, penalty, limits), writing
// each limit's state into out (len(p.limits)). The namespace and key come
// apart from p: they escape, p's arrays must not.
func (in *Instance) check(ctx context.Context, name, key string, p plan, out []LimitState) (allowed bool, retry time.Duration, err error) {
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
	return allowed, p.decide(key, allowed, out), nil
}

// execute applies the plan with the executor of the namespace's mode and
// reports whether the request passed.
func (in *Instance) execute(ctx context.Context, p *plan, n *ns, key string) (bool, error) {
	switch {
	case n.syncer != nil && n.cfg.SyncRate == 0:
		return in.checkSynchronous(ctx, p, n, key)
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

// parts is what prepare makes: a plan's slices, appended to the ones it
// was given and returned apart (assigning them in the plan there would let
// its arrays escape).
type parts struct {
	groups  []group
	spans   []sgroup
	buckets []bgroup
	keyed   []kgroup
	idx     []ref
	retry   []int64
}

// prepare validates the request and groups its limits: window limits by
// size (precision limits by their sub-window size, then span), bucket
// limits by algorithm and window, anchored windows and logs by algorithm
// and window.
func (in *Instance) prepare(p *plan, name string) (*ns, parts, error) {
	pp := parts{groups: p.groups, spans: p.spans, buckets: p.buckets, keyed: p.keyed, idx: p.idx}
	if err := checkCost(p.cost); err != nil {
		return nil, parts{}, err
	}
	if len(p.limits) == 0 {
		return nil, parts{}, &InputError{Field: "limits", Value: "[]", Allowed: "at least one limit is required"}
	}
	n, err := in.lookup(name)
	if err != nil {
		return nil, parts{}, err
	}
	p.now = in.nowIn(n)
	for i, l := range p.limits {
		if err := validateLimit(i, &l, p.cost, p.penalty); err != nil {
			return nil, parts{}, err
		}
		var r ref
		switch {
		case l.Algorithm.bucket():
			r.kind = refBucket
			pp.buckets, r.j, err = addBucket(n, pp.buckets, i, l, p.now)
		case l.Algorithm.keyed():
			r.kind = refKeyed
			pp.keyed, r.j, err = addKeyed(n, pp.keyed, i, l, p.now)
			if err == nil && l.Algorithm == SlidingLog && pp.retry == nil {
				pp.retry = p.retry[:0]
				if cap(pp.retry) < len(p.limits) {
					pp.retry = make([]int64, 0, len(p.limits))
				}
				pp.retry = pp.retry[:len(p.limits)]
			}
		case l.span() == 0:
			r.kind = refWindow
			pp.groups, r.j, err = addGroup(n, pp.groups, i, l.Window, "window")
			if err == nil {
				pp.groups[r.j].tighten(&l)
			}
		default:
			r.kind = refSpan
			pp.groups, pp.spans, r.j, err = addSpan(n, pp.groups, pp.spans, i, &l)
		}
		if err != nil {
			return nil, parts{}, err
		}
		pp.idx = append(pp.idx, r)
	}
	return n, pp, nil
}

// addGroup returns the window group of size in groups, added when
// missing; field names limit i's field that gives the size.
func addGroup(n *ns, groups []group, i int, size time.Duration, field string) ([]group, int, error) {
	sr := n.seriesOf(size)
	if sr == nil {
		return nil, 0, &InputError{Field: limitField(i, field), Value: size.String(), Allowed: fmt.Sprintf("must be one of the window sizes of namespace %q: %v", n.cfg.Name, n.cfg.WindowSizes)}
	}
	for j := range groups {
		if groups[j].sr == sr {
			return groups, j, nil
		}
	}
	return append(groups, group{sr: sr}), len(groups), nil
}

// addSpan adds precision limit i, l, to its span in spans, over its window
// group in groups, and returns them.
func addSpan(n *ns, groups []group, spans []sgroup, i int, l *Limit) ([]group, []sgroup, int, error) {
	groups, j, err := addGroup(n, groups, i, l.Precision, "precision")
	if err != nil {
		return nil, nil, 0, err
	}
	span := l.Window.Milliseconds()
	groups[j].sr.Keep(span)
	for k := range spans {
		if s := &spans[k]; s.g == j && s.span == span {
			s.limit = min(s.limit, l.Limit)
			return groups, spans, k, nil
		}
	}
	return groups, append(spans, sgroup{g: j, span: span, limit: l.Limit}), len(spans), nil
}

// checkCost checks a request's cost.
func checkCost(cost float64) error {
	if err := checkValue("cost", cost); err != nil {
		return err
	}
	if cost < 0 {
		return &InputError{Field: "cost", Value: fmt.Sprint(cost), Allowed: "must be >= 0 (refund with Increment)"}
	}
	return nil
}

// addBucket finds or adds the bucket group of limit i in buckets.
func addBucket(n *ns, buckets []bgroup, i int, l Limit, now int64) ([]bgroup, int, error) {
	if err := n.bucketsAllowed(); err != nil {
		return nil, 0, &InputError{Field: limitField(i, "algorithm"), Value: l.Algorithm.String(), Allowed: err.Error()}
	}
	for j := range buckets {
		b := &buckets[j]
		if b.t.Kind() != uint8(l.Algorithm) || b.t.Window() != l.Window.Milliseconds() {
			continue
		}
		if rate := b.rate; rate != l.Limit {
			return nil, 0, &InputError{Field: limitField(i, "limit"), Value: fmt.Sprint(l.Limit), Allowed: fmt.Sprintf("%s is the same %s with limit %v: limits of one bucket type and window share one bucket, which has one rate", limitField(b.first, "limit"), l.Algorithm, rate)}
		}
		b.burst = min(b.burst, l.burst())
		return buckets, j, nil
	}
	t := n.bucketTable(uint8(l.Algorithm), l.Window, now)
	return append(buckets, bgroup{t: t, rate: l.Limit, burst: l.burst(), first: i}), len(buckets), nil
}

// sortGroups sorts the window groups by size (insertion sort: a handful),
// keeping idx and spans pointing at the same groups.
func (p *plan) sortGroups() {
	groups := p.groups
	swap := func(g *int, j int) {
		switch *g {
		case j:
			*g = j - 1
		case j - 1:
			*g = j
		}
	}
	for i := 1; i < len(groups); i++ {
		for j := i; j > 0 && groups[j].sr.Size() < groups[j-1].sr.Size(); j-- {
			groups[j], groups[j-1] = groups[j-1], groups[j]
			for k := range p.idx {
				if p.idx[k].kind == refWindow {
					swap(&p.idx[k].j, j)
				}
			}
			for k := range p.spans {
				swap(&p.spans[k].g, j)
			}
		}
	}
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

// tighten records limit l of the group: the smallest sliding and fixed
// limits are the ones that decide (WindowFits only grows with the limit).
func (g *group) tighten(l *Limit) {
	if l.fixed() {
		if g.fixed == 0 || l.Limit < g.fixed {
			g.fixed = l.Limit
		}
	} else if g.sliding == 0 || l.Limit < g.sliding {
		g.sliding = l.Limit
	}
}

// fits reports whether a request of cost fits every limit of window group
// j when its current window holds before: arith.WindowFits, the
// comparison every store makes, against the group's tightest limits, and
// for the group's spans arith.SpanFits's.
func (p *plan) fits(j int, before, cost float64) bool {
	g := &p.groups[j]
	if g.fixed != 0 && !arith.WindowFits(before, g.prev, cost, g.fixed, g.sr.Size(), g.e, true) {
		return false
	}
	if g.sliding != 0 && !arith.WindowFits(before, g.prev, cost, g.sliding, g.sr.Size(), g.e, false) {
		return false
	}
	for i := range p.spans {
		if s := &p.spans[i]; s.g == j && !arith.WindowFits(before+s.mid, s.old, cost, s.limit, g.sr.Size(), g.e, false) {
			return false
		}
	}
	return true
}

// decide writes each limit's state, from the state the executor left, into
// out and returns the Decision's RetryAfter.
func (p *plan) decide(key string, allowed bool, out []LimitState) (retry time.Duration) {
	for i := range p.limits {
		st, l := &out[i], &p.limits[i]
		switch r := p.idx[i]; r.kind {
		case refWindow:
			g := &p.groups[r.j]
			ws := g.state()
			windowLimitState(st, l, &ws, g.before, p.cost, allowed)
		case refSpan:
			p.spanLimitState(st, l, &p.spans[r.j], key, allowed)
		case refBucket:
			b := &p.buckets[r.j]
			bucketLimitState(st, l, &b.before, &b.after, p.cost, p.now, allowed)
		case refKeyed:
			p.keyedLimitState(st, i, &p.keyed[r.j], allowed)
		}
		if !st.Allowed {
			retry = max(retry, st.RetryAfter)
		}
	}
	return retry
}

// refund takes back what the executor counted on this node.
func (p *plan) refund(key string) {
	for i := range p.groups {
		if g := &p.groups[i]; g.counted {
			g.w.Add(key, -p.cost, p.now)
			g.cur, g.counted = g.before, false
		}
	}
	for i := range p.buckets {
		if b := &p.buckets[i]; b.counted {
			b.t.Refund(key, p.cost)
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
