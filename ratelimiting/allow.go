package ratelimiting

import (
	"cmp"
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"time"

	"github.com/ratesync/ratesync/shm"
	"github.com/ratesync/ratesync/strategy"
)

// Limit is one limit a request is checked against.
type Limit struct {
	Limit  float64       // hits allowed per window
	Window time.Duration // window size: one of the namespace's window sizes
	Fixed  bool          // count in fixed windows instead of sliding ones
}

// LimitState is one limit's part of a Decision.
type LimitState struct {
	Limit Limit
	// Rate is the rate counted against the limit after the decision: it
	// includes the request's cost when the request was counted.
	Rate float64
	// Remaining is floor(max(Limit - Rate, 0)).
	Remaining float64
	// Reset is the time until the hits counted against this limit no longer
	// weigh on it, if no more come: the end of the window for a fixed
	// window; for a sliding window, the end of the next window while the
	// current one has hits, else the end of the current one.
	Reset time.Duration
	// RetryAfter is the time until this limit alone would let the same
	// request pass, if no more hits come; 0 when it lets it pass now.
	RetryAfter time.Duration
	// Allowed reports whether this limit lets the request pass.
	Allowed bool
}

// Decision is the answer to Allow and Check.
type Decision struct {
	Allowed bool
	// RetryAfter is when the same request could pass, if no more hits come,
	// computed exactly at millisecond resolution: for a sliding window, when
	// the decaying previous window lets rate + cost <= limit; for a fixed
	// window, the end of the window. 0 when allowed.
	RetryAfter time.Duration
	Limits     []LimitState // one per limit, in the order given
}

// Request is a decision to make: Check's argument.
type Request struct {
	Namespace string
	Key       string
	Cost      float64 // >= 0; 0 asks without counting
	Limits    []Limit
	// Penalty counts denied requests too, as Kong does by default: limits
	// are taken by ascending Limit, and the request is counted in each
	// window up to and including the first that denies it. Without it a
	// denied request is not counted at all.
	Penalty bool
}

// Allow decides whether a request of cost passes every limit, and counts it
// only when it does: it passes when, for every limit, rate + cost <= limit.
// It is Check without penalty.
func (in *Instance) Allow(ctx context.Context, ns, key string, cost float64, limits ...Limit) (Decision, error) {
	return in.Check(ctx, Request{Namespace: ns, Key: key, Cost: cost, Limits: limits})
}

// group is the work on one window size of a Check: limits may share one.
type group struct {
	sr       *shm.Series
	w        *shm.Window
	prev     float64 // count of the previous window
	weight   float64 // sliding weight of prev now
	e        int64   // ms into the current window
	ceiling  float64 // the current count plus cost must stay at most this
	before   float64 // current count before the request
	cur      float64 // current count after the decision
	counted  bool
	passable bool
}

// Check decides req. All-or-nothing across limits; atomic on this node for
// concurrent callers: N goroutines racing for the last L slots of a limit
// get exactly L passes (in a synchronous namespace, atomic across nodes too
// when the store implements strategy.Checker, as memory, Redis and
// PostgreSQL do; with another store, synchronous Allow decides on the view
// and then counts, and may admit a few over the limit). A denial is a result, not an error; errors are for
// bad input (ErrInvalidInput), unknown namespaces and a canceled ctx.
func (in *Instance) Check(ctx context.Context, req Request) (Decision, error) {
	var (
		gbuf [stackLimits]group
		ibuf [stackLimits]int
	)
	groups, idx := gbuf[:0], ibuf[:0]
	if len(req.Limits) > stackLimits {
		groups, idx = make([]group, 0, len(req.Limits)), make([]int, 0, len(req.Limits))
	}
	n, groups, idx, err := in.prepare(req, groups, idx)
	if err != nil {
		return Decision{}, err
	}
	now := in.now()
	for i := range groups {
		g := &groups[i]
		g.w = g.sr.Current(now)
		g.e = now - g.w.Start()
		g.weight = weight(now, g.w.Start(), g.sr.Size())
		if p := g.w.Prev(); p != nil {
			g.prev = p.Value(req.Key)
		}
	}
	for i, l := range req.Limits {
		g := &groups[idx[i]]
		c := l.Limit
		if !l.Fixed {
			c -= g.prev * g.weight
		}
		g.ceiling = min(g.ceiling, c)
	}
	var allowed bool
	switch {
	case n.syncer != nil && n.cfg.SyncRate == 0:
		allowed, err = in.checkSynchronous(ctx, n, req, groups, idx, now)
		if err != nil {
			return Decision{}, err
		}
	case n.cfg.NearLimit && !req.Penalty && req.Cost > 0 && n.syncer != nil:
		allowed, err = in.checkNearLimit(ctx, n, req, groups, idx, now)
		if err != nil {
			return Decision{}, err
		}
	case req.Penalty:
		allowed = in.checkPenalty(req, groups, idx, now)
	default:
		allowed = in.checkExact(req, groups, now)
	}
	if groups[0].sr.Closed() { // the namespace went away meanwhile: see shm.Series.Closed
		for i := range groups {
			if g := &groups[i]; g.counted {
				g.w.Add(req.Key, -req.Cost, now)
			}
		}
		return Decision{}, ErrClosed
	}
	return decide(req, groups, idx, allowed), nil
}

// stackLimits is the number of limits a Check handles without allocating
// its working arrays.
const stackLimits = 8

// prepare validates req and groups its limits by window size, appending to
// groups and idx (one entry per limit: its group).
func (in *Instance) prepare(req Request, groups []group, idx []int) (*ns, []group, []int, error) {
	if err := checkValue("cost", req.Cost); err != nil {
		return nil, nil, nil, err
	}
	if req.Cost < 0 {
		return nil, nil, nil, &InputError{Field: "cost", Value: fmt.Sprint(req.Cost), Allowed: "must be >= 0 (refund with Increment)"}
	}
	if len(req.Limits) == 0 {
		return nil, nil, nil, &InputError{Field: "limits", Value: "[]", Allowed: "at least one limit is required"}
	}
	n, err := in.lookup(req.Namespace)
	if err != nil {
		return nil, nil, nil, err
	}
	for i, l := range req.Limits {
		if l.Limit-l.Limit != 0 || l.Limit <= 0 { // NaN, ±Inf, <= 0
			return nil, nil, nil, &InputError{Field: limitField(i, "limit"), Value: fmt.Sprint(l.Limit), Allowed: "must be a finite number > 0"}
		}
		if req.Cost > l.Limit {
			return nil, nil, nil, &InputError{Field: "cost", Value: fmt.Sprint(req.Cost), Allowed: fmt.Sprintf("must be at most %s (%v): a larger cost can never pass", limitField(i, "limit"), l.Limit)}
		}
		sr := n.seriesOf(l.Window)
		if sr == nil {
			return nil, nil, nil, &InputError{Field: limitField(i, "window"), Value: l.Window.String(), Allowed: fmt.Sprintf("must be one of the window sizes of namespace %q: %v", n.cfg.Name, n.cfg.WindowSizes)}
		}
		j := 0
		for j < len(groups) && groups[j].sr != sr {
			j++
		}
		if j == len(groups) {
			groups = append(groups, group{sr: sr, ceiling: l.Limit})
		}
		idx = append(idx, j)
	}
	// Sort the groups by window size (insertion sort: a handful), keeping
	// idx pointing at the same groups.
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
	return n, groups, idx, nil
}

func limitField(i int, name string) string { return fmt.Sprintf("limits[%d].%s", i, name) }

// lock serializes multi-window checks of one key on this node; it returns
// nil when one window needs no lock.
func (in *Instance) lock(key string, groups []group) *stripe {
	if len(groups) < 2 {
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

// checkExact counts the request in every window only when every limit lets
// it pass. Each window takes it with a compare-and-swap bounded by its
// ceiling; when one refuses, the windows taken before are refunded.
func (in *Instance) checkExact(req Request, groups []group, now int64) bool {
	if req.Cost == 0 {
		for i := range groups {
			g := &groups[i]
			g.before = g.w.Value(req.Key)
			g.cur = g.before
			g.passable = g.before <= g.ceiling
		}
		return allPassable(groups)
	}
	defer in.lock(req.Key, groups).unlock()
	failed := -1
	for i := range groups {
		g := &groups[i]
		if failed >= 0 {
			g.before = g.w.Value(req.Key)
			g.cur = g.before
			g.passable = g.before+req.Cost <= g.ceiling
			continue
		}
		before, added, _ := g.w.AddIfAtMost(req.Key, req.Cost, g.ceiling, now)
		g.before, g.passable, g.counted = before, added, added
		g.cur = before
		if added {
			g.cur = before + req.Cost
		} else {
			failed = i
		}
	}
	if failed < 0 {
		return true
	}
	for i := range failed {
		g := &groups[i]
		g.w.Add(req.Key, -req.Cost, now)
		g.cur, g.counted = g.before, false
	}
	return false
}

// checkPenalty is Kong's order: by ascending limit, count the request in
// each window until a limit denies it, that one included.
func (in *Instance) checkPenalty(req Request, groups []group, idx []int, now int64) bool {
	defer in.lock(req.Key, groups).unlock()
	return penalize(req, groups, idx, counter{now: now}) == nil && !denied(req, groups, idx)
}

// counter counts a request in a group's window: on this node, or through
// the store when syncer is set (synchronous namespaces).
type counter struct {
	now    int64
	ctx    context.Context
	syncer interface {
		Hit(context.Context, *shm.Window, string, float64) (strategy.Totals, error)
	}
}

func (c counter) count(g *group, key string, cost float64) error {
	if c.syncer == nil {
		_, g.cur = g.w.Add(key, cost, c.now)
		return nil
	}
	t, err := c.syncer.Hit(c.ctx, g.w, key, cost)
	if err != nil {
		return err
	}
	g.cur, g.prev = t.Current, t.Previous
	return nil
}

// penalize counts the request, with count, in the windows of the limits by
// ascending limit until one denies it, that one included; the other windows
// are read. A count error stops it.
func penalize(req Request, groups []group, idx []int, c counter) error {
	var buf [stackLimits]int
	order := buf[:0]
	if len(req.Limits) > stackLimits {
		order = make([]int, 0, len(req.Limits))
	}
	for i := range req.Limits {
		order = append(order, i)
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(req.Limits[a].Limit, req.Limits[b].Limit) })
	for _, i := range order {
		g := &groups[idx[i]]
		if !g.counted {
			if err := c.count(g, req.Key, req.Cost); err != nil {
				return err
			}
			g.before, g.counted = g.cur-req.Cost, true
		}
		if rateOf(g, req.Limits[i]) > req.Limits[i].Limit {
			break
		}
	}
	for i := range groups {
		if g := &groups[i]; !g.counted {
			g.before = g.w.Value(req.Key)
			g.cur = g.before
		}
	}
	return nil
}

// denied reports whether a limit's rate, with the request counted, is over it.
func denied(req Request, groups []group, idx []int) bool {
	for i, l := range req.Limits {
		if g := &groups[idx[i]]; g.counted && rateOf(g, l) > l.Limit {
			return true
		}
	}
	return false
}

func rateOf(g *group, l Limit) float64 {
	if l.Fixed {
		return g.cur
	}
	return g.cur + g.prev*g.weight
}

// checkInStore decides req in the store, atomically with its count
// (strategy.Checker), and reports ok=false when the store could not decide.
// The syncer first pushes this node's hits of the key that the store has
// not seen, so the store decides on all of them.
func (in *Instance) checkInStore(ctx context.Context, n *ns, req Request, groups []group, idx []int, now int64) (allowed, ok bool, err error) {
	var (
		lbuf [stackLimits]strategy.CheckLimit
		wbuf [stackLimits]*shm.Window
	)
	limits, windows := lbuf[:0], wbuf[:0]
	for i, l := range req.Limits {
		limits = append(limits, strategy.CheckLimit{WindowSize: l.Window, Limit: l.Limit, Fixed: l.Fixed})
		windows = append(windows, groups[idx[i]].w)
	}
	c := strategy.Check{Namespace: n.cfg.Name, Key: req.Key, Cost: req.Cost, Now: time.UnixMilli(now), Limits: limits}
	res, ok, err := n.syncer.Check(ctx, c, windows)
	if err != nil || !ok {
		return false, false, err
	}
	for i, t := range res.Totals {
		g := &groups[idx[i]]
		g.prev, g.counted = t.Previous, res.Allowed
		if c := g.w.Counter(req.Key); c != nil {
			g.cur = c.Value() // the store's count plus this node's unpushed hits
		} else {
			g.cur = t.Current
		}
		g.before = g.cur
		if res.Allowed {
			g.before = g.cur - req.Cost
		}
	}
	return res.Allowed, true, nil
}

// checkNearLimit (NearLimit namespaces) decides on this node while every
// limit is far, and in the store, atomically with the count, as soon as one
// is near: until this node's first fetch in the current window (its view
// of the previous window may miss other nodes' last hits); when the key's
// previous window held at least half the limit (a busy key: every admission
// of the window goes to the store); or when its rate is within reach of the
// limit: twice what the key's current window shows it gains in one sync
// interval plus a store round trip, and at least a quarter of the limit. A request this node's view already refuses is
// refused here, without asking.
func (in *Instance) checkNearLimit(ctx context.Context, n *ns, req Request, groups []group, idx []int, now int64) (bool, error) {
	reach := float64((n.cfg.SyncRate + n.syncer.RTT()).Milliseconds())
	near := false
	for i, l := range req.Limits {
		g := &groups[idx[i]]
		cur := g.w.Value(req.Key)
		rate := cur
		if !l.Fixed {
			rate += g.prev * g.weight
		}
		if rate+req.Cost > l.Limit {
			return in.checkExact(req, groups, now), nil // refused by the view: no need to ask
		}
		perMs := cur / float64(max(g.e, 1))
		switch {
		case n.syncer.LastFetch() < g.w.Start():
			// No fetch yet in this window: the previous window's count may
			// miss the other nodes' last hits, so "busy" cannot be judged.
			near = true
		case g.prev >= l.Limit/2 || rate+req.Cost > l.Limit-max(2*perMs*reach, l.Limit/4):
			near = true
		}
	}
	if near {
		allowed, ok, err := in.checkInStore(ctx, n, req, groups, idx, now)
		if err != nil || ok {
			return allowed, err
		}
	}
	return in.checkExact(req, groups, now), nil
}

// checkSynchronous decides in the store, in one atomic step with the
// count, when the store can (strategy.Checker): N nodes never admit more
// than a limit between them. When the store cannot answer, it decides on
// this node's counts (pushed later). With penalty, or a store without
// Checker, it decides on this node's view, which holds the store's totals as
// of its last synchronous call, then counts through the store (Kong's
// synchronous mode, with its race between nodes).
func (in *Instance) checkSynchronous(ctx context.Context, n *ns, req Request, groups []group, idx []int, now int64) (bool, error) {
	if !req.Penalty && req.Cost > 0 && n.syncer.CanCheck() {
		allowed, ok, err := in.checkInStore(ctx, n, req, groups, idx, now)
		if err != nil || ok {
			return allowed, err
		}
		return in.checkExact(req, groups, now), nil
	}
	hit := counter{ctx: ctx, syncer: n.syncer}
	if req.Penalty {
		if err := penalize(req, groups, idx, hit); err != nil {
			return false, err
		}
		return !denied(req, groups, idx), nil
	}
	for i := range groups {
		g := &groups[i]
		g.before = g.w.Value(req.Key)
		g.cur = g.before
		g.passable = g.before+req.Cost <= g.ceiling
	}
	if !allPassable(groups) || req.Cost == 0 {
		return allPassable(groups), nil
	}
	for i := range groups {
		g := &groups[i]
		if err := hit.count(g, req.Key, req.Cost); err != nil {
			return false, err
		}
		g.before, g.counted = g.cur-req.Cost, true
	}
	return true, nil
}

func allPassable(groups []group) bool {
	for i := range groups {
		if !groups[i].passable {
			return false
		}
	}
	return true
}

// decide builds the Decision from the groups' final counts.
func decide(req Request, groups []group, idx []int, allowed bool) Decision {
	d := Decision{Allowed: allowed, Limits: make([]LimitState, len(req.Limits))}
	for i, l := range req.Limits {
		g := &groups[idx[i]]
		size := g.sr.Size()
		prevW := g.prev * g.weight
		if l.Fixed {
			prevW = 0
		}
		st := LimitState{Limit: l, Rate: g.cur + prevW}
		st.Remaining = max(0, math.Floor(l.Limit-st.Rate))
		switch {
		case l.Fixed:
			st.Reset = ms(size - g.e)
		case g.cur > 0:
			st.Reset = ms(2*size - g.e)
		case g.prev > 0:
			st.Reset = ms(size - g.e)
		}
		st.Allowed = allowed || g.before+prevW+req.Cost <= l.Limit
		if !st.Allowed {
			st.RetryAfter = ms(retryAfter(g.cur, g.prev, req.Cost, l.Limit, size, g.e, l.Fixed))
			d.RetryAfter = max(d.RetryAfter, st.RetryAfter)
		}
		d.Limits[i] = st
	}
	return d
}

func ms(v int64) time.Duration { return time.Duration(v) * time.Millisecond }

// retryAfter returns the milliseconds from now, e ms into the current window
// of size ms with counts cur and prev, until a request of cost fits under
// limit, if no more hits come. The rate never increases as time passes
// without hits (prev >= 0), so a binary search over each window finds the
// first millisecond that fits, with the very arithmetic Check uses.
func retryAfter(cur, prev, cost, limit float64, size, e int64, fixed bool) int64 {
	fits := func(c, p float64, x int64) bool {
		if fixed {
			return c+cost <= limit
		}
		return c+p*(float64(size-x)/float64(size))+cost <= limit
	}
	first := func(c, p float64, from int64) (int64, bool) {
		if !fits(c, p, size-1) {
			return 0, false
		}
		lo, hi := from, size-1
		for lo < hi {
			mid := lo + (hi-lo)/2
			if fits(c, p, mid) {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		return lo, true
	}
	if x, ok := first(cur, prev, e); ok {
		return x - e
	}
	if x, ok := first(0, cur, 0); ok {
		return size - e + x
	}
	return 2*size - e
}
