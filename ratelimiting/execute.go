package ratelimiting

import (
	"cmp"
	"context"
	"errors"
	"math"
	"slices"
	"time"

	"github.com/ratesync/ratesync/internal/arith"
	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/shm"
	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/syncer"
)

// The execute phase: each executor applies a plan (plan.go, read.go) in one
// mode, judging the request with internal/arith's comparisons as it takes
// it (on this node, or in the store), and leaves in the plan the state the
// decide phase (decide.go) builds the Decision from.

// checkLocal counts the request in every window and bucket only when every
// limit lets it pass: each window takes it with a compare-and-swap bounded
// by its ceiling, each bucket with a compare-and-swap of its word; when one
// refuses, those taken before are refunded. It decides on this node's view:
// local-only counts, or in a namespace that syncs, the store's totals as
// last read plus this node's hits since.
func (in *Instance) checkLocal(p *plan, key string) bool {
	if p.cost == 0 {
		return in.judgeLocal(p, key)
	}
	defer in.lock(key, p.parts()).unlock()
	if len(p.keyed) == 0 {
		return p.take(key, true)
	}
	// Anchored windows and logs are locked first, judged, and counted last,
	// once everything else took the request.
	ok := p.take(key, p.lockKeyed(key))
	p.settleKeyed(ok)
	return ok
}

// judgeLocal decides the request on this node's view without counting it.
func (in *Instance) judgeLocal(p *plan, key string) bool {
	if len(p.keyed) > 1 { // slots are locked in the request's order: one such peek at a time
		defer in.lock(key, len(p.keyed)).unlock()
	}
	return p.peek(key, p.cost)
}

// holdInDoubt keeps an allowed request that the store may have counted in
// this node's view of its windows, as taken by the syncer (never pushed
// from here): the syncer has the store count it once, and the store's
// totals replace it. Its buckets, anchored windows and logs learn it from
// the store.
func (p *plan) holdInDoubt(key string) {
	for i := range p.groups {
		g := &p.groups[i]
		if g.w.AddTaken(key, p.cost, p.now) != nil {
			g.cur, g.counted = g.before+p.cost, true
		}
	}
}

// take counts the request in every window and bucket when ok and every
// one lets it pass (checkLocal); otherwise it reads their states.
func (p *plan) take(key string, ok bool) bool {
	for i := range p.groups {
		g := &p.groups[i]
		if !ok {
			g.before = g.w.Value(key)
			g.cur = g.before
			continue
		}
		before, added, _ := g.w.AddIf(key, p.cost, func(before float64) bool { return p.fits(i, before, p.cost) }, p.now)
		g.before, g.cur, g.passable, g.counted = before, before, added, added
		if added {
			g.cur = before + p.cost
		}
		ok = added
	}
	if ok && len(p.buckets) > 1 {
		// Buckets go last, each judged before any is taken: a refund of a
		// bucket whose cost the syncer took meanwhile would leave the cost
		// counted in the store, so refunds of buckets are kept to the rare
		// bucket that a sync filled between this judgement and its take.
		for i := range p.buckets {
			p.readBucket(&p.buckets[i], key)
			ok = ok && p.buckets[i].passable
		}
		if !ok {
			p.refund(key)
			return false
		}
	}
	for i := range p.buckets {
		b := &p.buckets[i]
		if !ok {
			p.readBucket(b, key)
			continue
		}
		ok = p.takeBucket(b, key)
	}
	if !ok {
		p.refund(key)
		return false
	}
	return true
}

// peek judges a request of cost on this node's view and counts nothing:
// a request of cost 0 (cost 0), or one the store may have counted
// (judgeLocal: cost p.cost). Buckets, anchored windows and logs are
// judged at p.cost.
func (p *plan) peek(key string, cost float64) bool {
	ok := true
	for i := range p.groups {
		g := &p.groups[i]
		g.before = g.w.Value(key)
		g.cur = g.before
		g.passable = p.fits(i, g.before, cost)
		ok = ok && g.passable
	}
	for i := range p.buckets {
		b := &p.buckets[i]
		p.readBucket(b, key)
		ok = ok && b.passable
	}
	if len(p.keyed) > 0 {
		ok = p.lockKeyed(key) && ok
		p.settleKeyed(false)
	}
	return ok
}

// takeBucket takes the request's cost from b when it fits.
func (p *plan) takeBucket(b *bgroup, key string) bool { return b.take(key, p.cost, p.now) }

// take takes cost from the bucket when it fits, with one compare-and-swap
// of the bucket's word (again when another request changed it meanwhile).
// A dict too full to hold the bucket judges it empty and counts nothing, as
// for a window counter it cannot make.
func (b *bgroup) take(key string, cost float64, now int64) bool {
	st := arith.Bucket{Rate: b.rate, Window: b.t.Window(), Origin: b.t.Epoch()}
	for {
		bk := b.t.Get(key, b.rate, now)
		if bk == nil {
			b.before = arith.Bucket{Rate: b.rate, Window: b.t.Window(), Origin: now}
			b.after, b.passable = b.before, true
			return true
		}
		word, level, alive := b.t.Level(bk, now)
		if !alive {
			continue
		}
		st.Base = math.Float64frombits(word)
		b.before, b.after = st, st
		if b.passable = arith.BucketFits(level, cost, b.burst, st.Window); !b.passable {
			return false
		}
		if nw, ok := b.t.Take(bk, key, word, cost, now); ok {
			b.after.Base, b.counted = math.Float64frombits(nw), true
			return true
		}
	}
}

// allowBucket is AllowOne's executor for one bucket decided on this node
// (local-only namespaces, and periodic ones without NearLimit): checkLocal
// for a plan of one bucket, with no plan to build. ok is false when the
// namespace decides elsewhere (Check's executors then apply).
func (in *Instance) allowBucket(out *LimitState, name, key string, cost float64, l *Limit) (ok bool, err error) {
	if err := checkCost(cost); err != nil {
		return true, err
	}
	if err := validateLimit(0, l, cost, false); err != nil {
		return true, err
	}
	n, err := in.lookup(name)
	if err != nil {
		return true, err
	}
	if n.syncer != nil && (n.cfg.SyncRate == 0 || n.cfg.NearLimit || n.leases != nil) {
		return false, nil
	}
	if err := n.bucketsAllowed(); err != nil {
		return true, &InputError{Field: limitField(0, "algorithm"), Value: l.Algorithm.String(), Allowed: err.Error()}
	}
	now := in.nowIn(n)
	b := bgroup{t: n.bucketTable(uint8(l.Algorithm), l.Window, now), rate: l.Limit, burst: l.burst()}
	allowed := false
	if cost == 0 {
		b.read(key, 0, now)
		allowed = b.passable
	} else {
		allowed = b.take(key, cost, now)
	}
	if n.closed() {
		if b.counted {
			b.t.Refund(key, cost)
		}
		return true, ErrClosed
	}
	bucketLimitState(out, l, &b.before, &b.after, cost, now, allowed)
	return true, nil
}

// checkPenalty is Kong's order: by ascending limit, count the request in
// each window until a limit denies it, that one included. Window limits
// only.
func (in *Instance) checkPenalty(p *plan, key string) bool {
	defer in.lock(key, p.parts()).unlock()
	return penalize(p, key, counter{now: p.now}) == nil && !denied(p)
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
func penalize(p *plan, key string, c counter) error {
	var buf [stackLimits]int
	order := buf[:0]
	if len(p.limits) > stackLimits {
		order = make([]int, 0, len(p.limits))
	}
	for i := range p.limits {
		order = append(order, i)
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(p.limits[a].Limit, p.limits[b].Limit) })
	for _, i := range order {
		g := &p.groups[p.idx[i].j] // penalty takes window limits only
		if !g.counted {
			if err := c.count(g, key, p.cost); err != nil {
				return err
			}
			g.before, g.counted = g.cur-p.cost, true
		}
		if !arith.WindowFits(g.before, g.prev, p.cost, p.limits[i].Limit, g.sr.Size(), g.e, p.limits[i].fixed()) {
			break
		}
	}
	for i := range p.groups {
		if g := &p.groups[i]; !g.counted {
			g.before = g.w.Value(key)
			g.cur = g.before
		}
	}
	return nil
}

// denied reports whether a limit, judged on its window before the request
// was counted, refuses it.
func denied(p *plan) bool {
	for i, l := range p.limits {
		if g := &p.groups[p.idx[i].j]; g.counted && !arith.WindowFits(g.before, g.prev, p.cost, l.Limit, g.sr.Size(), g.e, l.fixed()) {
			return true
		}
	}
	return false
}

// checkInStore decides the request in the store, atomically with its count
// (strategy.Checker), and reports ok=false when the store could not decide.
// The syncer first pushes this node's hits of the key that the store has
// not seen, so the store decides on all of them.
func (in *Instance) checkInStore(ctx context.Context, p *plan, n *ns, key string) (allowed, ok bool, err error) {
	allowed, ok, err = in.askStore(ctx, p, n, key)
	if errors.Is(err, syncer.ErrInDoubt) && (n.cfg.StoreDown == namespace.StoreDownDeny ||
		n.cfg.StoreDown == namespace.StoreDownShare && !n.alone()) {
		// Refused: the store counts it once if it did (errs toward less).
		// A share of a window under way is never safe (storeDown).
		p.refused = max(time.Millisecond, n.syncer.RetryIn())
		return false, true, nil
	}
	if errors.Is(err, syncer.ErrInDoubt) {
		// The store may have counted the request: judge it on this node's
		// view, and keep it there, not to be pushed (the syncer has the
		// store count it once).
		allowed = in.judgeLocal(p, key)
		if allowed {
			p.holdInDoubt(key)
		}
		return allowed, true, nil
	}
	return allowed, ok, err
}

// askStore is checkInStore's exchange: the plan's request as one
// strategy.Check, decided and counted in the store, its answer read into
// the plan. ok is false when the store could not decide; err is
// syncer.ErrInDoubt when it may have counted the request unconfirmed.
func (in *Instance) askStore(ctx context.Context, p *plan, n *ns, key string) (allowed, ok bool, err error) {
	var (
		lbuf [stackLimits]strategy.CheckLimit
		wbuf [stackLimits]*shm.Window
		bbuf [stackLimits]*shm.Buckets
	)
	limits, windows, tables := lbuf[:0], wbuf[:0], bbuf[:0]
	for i, l := range p.limits {
		cl := strategy.CheckLimit{WindowSize: l.Window, Limit: l.Limit}
		var w *shm.Window
		var t *shm.Buckets
		switch r := p.idx[i]; r.kind {
		case refWindow:
			cl.Fixed, w = l.fixed(), p.groups[r.j].w
		case refSpan:
			cl.Precision, w = l.Precision, p.windowOf(i).w
		case refBucket:
			b := &p.buckets[r.j]
			b.t.Get(key, b.rate, p.now) // held, so that the store's answer is kept in the view
			cl.Kind, cl.Burst, t = uint8(l.Algorithm), b.burst, b.t
		case refKeyed:
			cl.Kind = strategy.KindAnchored
			if l.Algorithm == SlidingLog {
				cl.Kind = strategy.KindLog
			}
		}
		limits, windows, tables = append(limits, cl), append(windows, w), append(tables, t)
	}
	c := strategy.Check{Namespace: n.cfg.Name, Key: key, Cost: p.cost, Now: time.UnixMilli(p.now), Limits: limits}
	res, ok, err := n.syncer.Check(ctx, c, windows, tables)
	if err != nil || !ok {
		return false, false, err
	}
	for i, t := range res.Totals {
		switch r := p.idx[i]; r.kind {
		case refBucket:
			b := &p.buckets[r.j]
			st := res.Buckets[i]
			b.after = arith.Bucket{Base: st.Level, Origin: st.At, Rate: b.rate, Window: b.t.Window()}
			b.before, b.counted = b.after, res.Allowed
		case refKeyed:
			k, st := &p.keyed[r.j], res.Buckets[i]
			k.count, k.at, k.counted, k.before = st.Level, st.At, res.Allowed, st.Level
			if res.Allowed {
				k.before = st.Level - p.cost
			}
			if k.algo == SlidingLog {
				p.retry[i] = st.RetryAt
			}
		default:
			g := p.windowOf(i)
			g.prev, g.counted = t.Previous, res.Allowed
			if c := g.w.Counter(key); c != nil {
				g.cur = c.Value() // the store's count plus this node's unpushed hits
			} else {
				g.cur = t.Current
			}
			g.before = g.cur
			if res.Allowed {
				g.before = g.cur - p.cost
			}
		}
	}
	p.readSpans(key) // the store's answer is in the view now
	return res.Allowed, true, nil
}

// checkNearLimit (NearLimit namespaces) decides on this node while every
// limit is far, and in the store, atomically with the count, as soon as one
// is near: until this node's first fetch in the current window (its view
// of the previous window may miss other nodes' last hits); when the key's
// previous window held at least half the limit (a busy key: every admission
// of the window goes to the store); when its rate is within reach of the
// limit: twice what the key's current window shows it gains in one sync
// interval plus a store round trip, and at least a quarter of the limit;
// and for a bucket, when fewer tokens than a quarter of its capacity, or
// than twice what refills in that reach, would be left. A request this
// node's view already refuses is refused here, without asking.
func (in *Instance) checkNearLimit(ctx context.Context, p *plan, n *ns, key string) (bool, error) {
	reach := float64((n.cfg.SyncRate + n.syncer.RTT()).Milliseconds())
	near := false
	for i, l := range p.limits {
		if r := p.idx[i]; r.kind == refBucket {
			b := &p.buckets[r.j]
			p.readBucket(b, key)
			if !b.passable {
				return in.checkLocal(p, key), nil
			}
			w := float64(b.t.Window())
			left := b.burst - b.before.Level(p.now)/w - p.cost
			near = near || left < max(b.burst/4, 2*b.rate*reach/w)
			continue
		}
		g := p.windowOf(i)
		cur := g.w.Value(key)
		mid, prev, fixed := 0.0, g.prev, l.fixed()
		if r := p.idx[i]; r.kind == refSpan {
			mid, prev = p.spans[r.j].mid, p.spans[r.j].old
		}
		if !arith.WindowFits(cur+mid, prev, p.cost, l.Limit, g.sr.Size(), g.e, fixed) {
			return in.checkLocal(p, key), nil // refused by the view: no need to ask
		}
		rate := cur + mid
		if !fixed {
			rate += prev * arith.Weight(g.e, g.sr.Size())
		}
		perMs := cur / float64(max(g.e, 1))
		switch {
		case n.syncer.LastFetch() < g.w.Start():
			near = true // no fetch yet in this window: "busy" cannot be judged
		case mid+prev >= l.Limit/2 || rate+p.cost > l.Limit-max(2*perMs*reach, l.Limit/4):
			near = true
		}
	}
	if near {
		allowed, ok, err := in.checkInStore(ctx, p, n, key)
		if err != nil || ok {
			return allowed, err
		}
	}
	return in.checkLocal(p, key), nil
}

// checkSynchronous decides in the store, in one atomic step with the
// count, when the store can (strategy.Checker): N nodes never admit more
// than a limit between them. When the store cannot answer, it decides on
// this node's counts (pushed later). With penalty, or a store without
// Checker (window limits only), it decides on this node's view, which holds
// the store's totals as of its last synchronous call, then counts through
// the store (Kong's synchronous mode, with its race between nodes).
func (in *Instance) checkSynchronous(ctx context.Context, p *plan, n *ns, key string) (bool, error) {
	// Anchored windows and logs live in the store: even a peek asks it.
	if !p.penalty && (p.cost > 0 || len(p.keyed) > 0) && n.syncer.CanCheck() {
		if p.cost > 0 && n.cfg.StoreDown == namespace.StoreDownShare && n.syncer.Recovering() {
			// Other nodes may still decide on their shares, or not have
			// pushed what they did: decided in the store against the shares.
			return in.recovering(ctx, p, n, key)
		}
		allowed, ok, err := in.checkInStore(ctx, p, n, key)
		if err != nil || ok {
			return allowed, err
		}
		return in.storeDown(ctx, p, n, key)
	}
	hit := counter{ctx: ctx, syncer: n.syncer}
	if p.penalty {
		if err := penalize(p, key, hit); err != nil {
			return false, err
		}
		return !denied(p), nil
	}
	if ok := p.peek(key, 0); !ok || p.cost == 0 {
		return ok, nil
	}
	for i := range p.groups {
		g := &p.groups[i]
		if err := hit.count(g, key, p.cost); err != nil {
			return false, err
		}
		g.before, g.counted = g.cur-p.cost, true
	}
	return true, nil
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
