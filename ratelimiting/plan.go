package ratelimiting

import (
	"fmt"
	"time"

	"github.com/ratesync/ratesync/internal/arith"
	"github.com/ratesync/ratesync/shm"
)

// The plan phase: a request's limits, validated and grouped by the state
// they read (window groups, spans, buckets, anchored windows and logs).

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
	// A leased namespace's request (lease.go): the grant it was taken from
	// and what that holds after it, or the refusal that stands.
	grant  *grant
	left   float64
	denial *denial
	// local makes the executor decide on this node's view whatever the
	// namespace's mode (the store-down behaviour's own decision).
	local bool
	// inStore makes the executor decide in the store (checkInStore), and
	// on this node's view when the store cannot answer.
	inStore bool
	// What the store-down behaviour decided (storedown.go): the states of
	// the request against the shares of its limits, or a refusal.
	shared      []LimitState
	sharedRetry time.Duration
	refused     time.Duration
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
