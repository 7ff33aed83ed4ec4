package ratelimiting

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/puzpuzpuz/xsync/v3"

	"github.com/ratesync/ratesync/internal/arith"
	"github.com/ratesync/ratesync/shm"
	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/syncer"
)

// Leases (namespace.Config.Leases). A node decides a leased namespace's
// requests from quota the store granted it: a grant is a check of k units
// (strategy.Check with Cost k) that the store decides and counts at once,
// atomically, exactly once per (node, seq), like any synchronous check. The
// units are then counted in the store whether or not the node uses them, so
// the cluster never admits more than a limit; the node admits from what it
// holds, one compare-and-swap, no store call. What a grant lets the node
// admit stays safe while the state the store judged it on can only have
// become more favourable:
//
//   - windows (sliding, fixed, precision): until the (sub-)window the units
//     are counted in ends; the previous window's weight only falls inside it;
//   - anchored windows: until the window the grant opened or joined closes;
//   - buckets: until the store's bucket, as the grant left it, would have
//     drained empty, the units held shrinking at the bucket's refill rate
//     meanwhile: as hits really come, the bucket may fill up and waste
//     refill that the store, holding the units as taken, does not (avail).
//
// Units a node did not use go back: a window's as a negative diff of the
// window they were counted in (exact: the store's count stays at least what
// was admitted), a bucket's as they stand after shrinking (avail), an
// anchored window's never (an opening cannot be taken back). A
// node that crashes leaves its units counted: a fault admits less, never
// more. Sliding logs are not leased (each hit weighs from its own instant):
// they are decided in the store, as in a synchronous namespace.

// leaseTable is a leased namespace's leases: per key, one lease per limit
// set the key was asked with.
type leaseTable struct {
	m       *xsync.MapOf[string, *lease]
	doubtMu sync.Mutex
	doubts  map[grantID]int // grants in doubt: given back when the lane resends them
	horizon atomic.Int64    // ms a grant should last at the key's recent rate: the sync rate
	stats   leaseCounters
}

// grantID names a grant request: its key, instant and size.
type grantID struct {
	key  string
	at   int64
	cost float64
}

// doubt records a grant request whose answer never came.
func (t *leaseTable) doubt(key string, at int64, cost float64) {
	t.doubtMu.Lock()
	defer t.doubtMu.Unlock()
	if t.doubts == nil {
		t.doubts = map[grantID]int{}
	}
	t.doubts[grantID{key, at, cost}]++
}

// resolve reports whether the check c was a grant request in doubt, and
// forgets it.
func (t *leaseTable) resolve(c *strategy.Check) bool {
	id := grantID{c.Key, c.Now.UnixMilli(), c.Cost}
	t.doubtMu.Lock()
	defer t.doubtMu.Unlock()
	if t.doubts[id] == 0 {
		return false
	}
	if t.doubts[id]--; t.doubts[id] == 0 {
		delete(t.doubts, id)
	}
	return true
}

// leaseCounters are a namespace's lease figures (LeaseStats).
type leaseCounters struct {
	held       atomic.Int64 // grants live
	grants     atomic.Uint64
	granted    floatCounter
	returned   floatCounter
	expired    floatCounter
	storeCalls atomic.Uint64
	denials    atomic.Uint64 // requests denied at the store
	local      atomic.Uint64 // requests denied on the node while the store said the quota was gone
	fallbacks  atomic.Uint64 // requests decided by the store-down behaviour
}

// floatCounter is a float64 sum kept in an atomic word.
type floatCounter struct{ bits atomic.Uint64 }

func (c *floatCounter) add(v float64) {
	for {
		old := c.bits.Load()
		if c.bits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

func (c *floatCounter) load() float64 { return math.Float64frombits(c.bits.Load()) }

func newLeaseTable(horizon time.Duration) *leaseTable {
	t := &leaseTable{m: xsync.NewMapOf[string, *lease]()}
	t.horizon.Store(max(1, horizon.Milliseconds()))
	return t
}

// lease is what a node holds of one key's limit set.
type lease struct {
	limits []Limit               // the limit set, as the requests name it
	next   atomic.Pointer[lease] // the key's next limit set
	cur    atomic.Pointer[grant] // the grant being spent; nil when none
	mu     keyLock               // one grant at a time; guards the fields below
	denied *denial               // the store's last refusal, while it stands
	k      float64               // the last grant's size
	// starved: what this node refused since the last grant (at since, ms),
	// demand beyond what it held: the next grant follows the rate of the
	// last one and of that together.
	starved float64
	since   int64
	seen    float64 // held at the last sweep: unchanged means idle
}

// keyLock is a lease's lock: a request waiting for another's grant gives
// up when its context ends.
type keyLock chan struct{}

func (l keyLock) lock(ctx context.Context) bool {
	select {
	case l <- struct{}{}:
		return true
	default:
	}
	select {
	case l <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (l keyLock) tryLock() bool {
	select {
	case l <- struct{}{}:
		return true
	default:
		return false
	}
}

func (l keyLock) unlock() { <-l }

// grant is quota the store granted: held units spent by compare-and-swap,
// and the store's state after the grant, to answer from.
type grant struct {
	held  atomic.Uint64 // float64 bits: units left
	k     float64       // units granted
	at    int64         // when granted, ms
	until int64         // valid while now < until, ms
	decay float64       // units per ms the held units lose: a bucket's refill (see avail)
	parts []leasePart   // per limit of the lease
}

// leasePart is one limit's state in the store right after a grant.
type leasePart struct {
	kind     uint8 // refWindow, refSpan, refBucket, refKeyed
	w        *shm.Window
	cur      float64 // window: the current (sub-)window's count; anchored: the count
	prev     float64 // window: the previous window's; span: the oldest sub-window's
	mid      float64 // span: the sub-windows between
	start    int64   // window: the current window's start; anchored: the opening
	size     int64   // window: its size; anchored: the window
	span     int64   // span: the sliding window's size
	bucket   arith.Bucket
	buckets  *shm.Buckets
	bucketOf int // the limit's index whose bucket this is (the first naming it)
}

// denial is the store's refusal of a grant: until until, requests of at
// least cost are refused on the node with the states the store's answer
// gave (RetryAfter counted down).
type denial struct {
	cost   float64
	at     int64
	until  int64
	states []LimitState
}

// find returns key's lease of limits, nil when none.
func (t *leaseTable) find(key string, limits []Limit) *lease {
	l, _ := t.m.Load(key)
	for ; l != nil; l = l.next.Load() {
		if slices.Equal(l.limits, limits) {
			return l
		}
	}
	return nil
}

// get returns key's lease of limits, made when missing.
func (t *leaseTable) get(key string, limits []Limit) *lease {
	if l := t.find(key, limits); l != nil {
		return l
	}
	nl := &lease{limits: slices.Clone(limits), mu: make(keyLock, 1)}
	head, loaded := t.m.LoadOrStore(key, nl)
	if !loaded {
		return nl
	}
	for l := head; ; l = l.next.Load() {
		if slices.Equal(l.limits, limits) {
			return l
		}
		if l.next.CompareAndSwap(nil, nl) {
			return nl
		}
	}
}

// avail returns what a grant holding h may still admit at now. A grant
// with a bucket loses the bucket's refill rate from the moment it was
// made: while this node holds units, the bucket as hits really came may
// fill up and waste refill that the store's bucket, holding the units as
// taken, does not; what the store counted beyond the hits covers that
// waste only as long as the units held shrink with it. (A billionth more
// keeps float rounding on the safe side.)
func (g *grant) avail(h float64, now int64) float64 {
	return arith.LeaseLeft(h, g.decay, g.at, now)
}

// take takes cost from g when it may admit that much at now, and returns
// what it may admit after.
func (g *grant) take(cost float64, now int64) (left float64, ok bool) {
	for {
		old := g.held.Load()
		h := math.Float64frombits(old)
		a := g.avail(h, now)
		if a < cost {
			return a, false
		}
		if g.held.CompareAndSwap(old, math.Float64bits(h-cost)) {
			return a - cost, true
		}
	}
}

// drain takes everything g holds and returns what it could still admit
// at now, and what it lost to its bucket's refill (avail).
func (g *grant) drain(now int64) (left, lost float64) {
	h := math.Float64frombits(g.held.Swap(0))
	left = max(0, g.avail(h, now))
	return left, max(0, h-left)
}

// leaseFast decides a request from the grant this node holds for its key
// and limits, without a plan: handled is false when the request needs more
// (no lease, none left, a limit the plan must check).
func (in *Instance) leaseFast(name, key string, p *plan, out []LimitState) (handled bool) {
	n, err := in.lookup(name)
	if err != nil || n.leases == nil || p.penalty || !(p.cost > 0) || math.IsInf(p.cost, 0) {
		return false
	}
	ls := n.leases.find(key, p.limits)
	if ls == nil {
		return false
	}
	for i := range p.limits {
		if validateLimit(i, &p.limits[i], p.cost, false) != nil {
			return false
		}
	}
	g := ls.cur.Load()
	if g == nil {
		return false
	}
	now := in.nowIn(n)
	if now >= g.until || now < g.at {
		return false
	}
	left, ok := g.take(p.cost, now)
	if !ok {
		return false
	}
	g.states(p.limits, p.cost, left, now, out)
	return true
}

// states writes each limit's state after a request of cost taken from g,
// which holds left now: the store's state after the grant, less what this
// node holds (not yet admitted).
func (g *grant) states(limits []Limit, cost, left float64, now int64, out []LimitState) {
	for i := range limits {
		st, l, pt := &out[i], &limits[i], &g.parts[i]
		switch pt.kind {
		case refWindow:
			ws := arith.Window{Cur: pt.cur - left, Prev: pt.prev, Size: pt.size, Elapsed: now - pt.start}
			windowLimitState(st, l, &ws, ws.Cur-cost, cost, true)
		case refSpan:
			ws := arith.Window{Cur: pt.cur - left + pt.mid, Prev: pt.prev, Size: pt.size, Elapsed: now - pt.start}
			st.Limit, st.Rate = *l, ws.Rate(false)
			st.Remaining = ws.Remaining(l.Limit, math.Floor(l.Limit-st.Rate), false)
			st.Reset = arith.Ms(pt.size - ws.Elapsed + pt.span)
			st.Allowed = true
		case refBucket:
			b := pt.bucket
			b.Base -= left * float64(b.Window)
			bucketLimitState(st, l, &b, &b, cost, now, true)
		case refKeyed:
			count := pt.cur - left
			st.Limit, st.Rate, st.Allowed = *l, count, true
			st.Remaining = arith.WholeFit(func(n float64) bool { return arith.AnchoredFits(count, n, l.Limit) }, l.Limit-count)
			st.Reset = arith.Ms(max(0, pt.start+pt.size-now))
		}
	}
}

// leasable reports whether the plan's request can be decided from a lease:
// a cost to take, no penalty, no sliding log.
func (p *plan) leasable() bool {
	if p.penalty || !(p.cost > 0) {
		return false
	}
	for i := range p.keyed {
		if p.keyed[i].algo == SlidingLog {
			return false
		}
	}
	return true
}

// checkLeased decides a leased namespace's request whose key holds no
// grant that covers it: one grant at a time per key and limit set asks the
// store for quota, sized to the key's recent rate on this node and to what
// the limits have left; the request is admitted from it. A refusal by the
// store stands, for requests at least as large, until the store's
// RetryAfter. When the store cannot answer, the namespace's store-down
// behaviour decides.
func (in *Instance) checkLeased(ctx context.Context, p *plan, n *ns, key string) (bool, error) {
	t := n.leases
	ls := t.get(key, p.limits)
	if !ls.mu.lock(ctx) {
		// The caller gave up while another request of the key waited
		// for the store.
		return false, ctx.Err()
	}
	defer ls.mu.unlock()
	now, cost := p.now, p.cost
	old := ls.cur.Load()
	if old != nil && now < old.until && now >= old.at {
		if left, ok := old.take(cost, now); ok {
			p.grant, p.left = old, left
			return true, nil
		}
	} else if old != nil {
		in.expire(n, key, ls, old, now)
		old = nil
	}
	if d := ls.denied; d != nil {
		if now < d.until && now >= d.at && cost >= d.cost {
			ls.starved += cost
			t.stats.local.Add(1)
			p.denial = d
			return false, nil
		}
		ls.denied = nil
	}
	if n.syncer.Recovering() {
		// Other nodes may still decide on their own, or not yet have pushed
		// what they did: the store's counts can miss up to their shares
		// for one more sync. Until then this node's requests go to the
		// store against the shares too (recovering).
		t.stats.fallbacks.Add(1)
		return in.recovering(ctx, p, n, key)
	}
	want := ls.size(t, old, p, key, now)
	first := want
	for try := 0; try < 2; try++ {
		t.stats.storeCalls.Add(1)
		p.cost = want
		allowed, ok, err := in.askStore(ctx, p, n, key)
		p.cost = cost
		if errors.Is(err, syncer.ErrInDoubt) {
			// The store may have granted it, unconfirmed: the lane sends it
			// again, and what the store granted goes back then
			// (resolveGrants); this request goes to the store-down
			// behaviour.
			t.doubt(key, now, want)
			err, ok = nil, false
		}
		if err != nil {
			return false, err
		}
		if !ok {
			t.stats.fallbacks.Add(1)
			return in.storeDown(ctx, p, n, key)
		}
		if allowed {
			in.granted(n, ls, old, p, key, want, now)
			return true, nil
		}
		fit := p.largestFit(key, cost)
		if fit < cost || fit >= want {
			break
		}
		if c := chunk(p.limits, cost, first); fit < c && p.chunkFitsIn(key, c) < p.windowEnd()-now {
			// Less than a chunk, and more frees before the window ends:
			// wait for a chunk rather than spend a store call on crumbs.
			break
		}
		want = fit
	}
	// Refused: nothing fits the request now. The node refuses on its own
	// until a chunk could fit (chunk): asking for each unit as it frees
	// would cost a store call per unit, and every node would ask for it.
	t.stats.denials.Add(1)
	d := &denial{cost: cost, at: now, states: make([]LimitState, len(p.limits))}
	retry := p.decide(key, false, d.states)
	if c := chunk(p.limits, cost, first); c > cost {
		// Nodes refused alike would all ask at the same instant, and all
		// but one be refused again: each waits a random part of the time
		// the chunk takes to free on top. A bucket's tokens keep until it
		// is full: there each waits a random part of that time per node
		// using the store, so that about one node asks per chunk refilled,
		// and finds it. (A window's quota freed late in a wait would be
		// taken in lumps, and a sliding window's spans hold more.)
		in := p.chunkFitsIn(key, c)
		each := max(1, in-retry.Milliseconds())
		spread := each/2 + 1
		if len(p.groups) == 0 {
			spread += 2 * int64(max(1, n.syncer.Nodes())-1) * each
		}
		wait := in + rand.Int64N(spread)
		// Not past the last moment of the window, when the node takes
		// what is left rather than let it go unused.
		wait = min(wait, p.windowEnd()-now-1)
		retry = max(retry, arith.Ms(wait))
	}
	retry = max(retry, time.Millisecond)
	d.until = now + retry.Milliseconds()
	// Every limit refuses until the node asks again: some may let this
	// request pass on the store's answer (the node waits for a chunk, or
	// other nodes' hits it has not read made the store refuse).
	for i := range d.states {
		d.states[i].Allowed, d.states[i].RetryAfter = false, retry
	}
	ls.denied = d
	ls.starved += cost
	p.denial = d
	return false, nil
}

// chunkFitsIn returns in how many ms a request of c fits the limits as the
// plan holds them (the store's answer): decide's RetryAfter for c.
func (p *plan) chunkFitsIn(key string, c float64) int64 {
	var buf [stackLimits]LimitState
	scratch := buf[:0]
	if len(p.limits) > stackLimits {
		scratch = make([]LimitState, 0, len(p.limits))
	}
	scratch = scratch[:len(p.limits)]
	cost := p.cost
	p.cost = c
	retry := p.decide(key, false, scratch)
	p.cost = cost
	return retry.Milliseconds()
}

// windowEnd returns when the earliest current window of the plan's window
// limits ends (Unix ms); math.MaxInt64 when it has none.
func (p *plan) windowEnd() int64 {
	end := int64(math.MaxInt64)
	for i := range p.groups {
		g := &p.groups[i]
		end = min(end, g.w.Start()+g.sr.Size())
	}
	return end
}

// chunk returns how much quota a refused node waits for before it asks
// again: what it wanted, at most a tenth of the smallest limit (or
// capacity), at least the request's cost.
func chunk(limits []Limit, cost, want float64) float64 {
	c := want
	for i := range limits {
		c = min(c, limits[i].Limit/10, limits[i].burst()/10)
	}
	return max(cost, math.Floor(c))
}

// size returns how much to ask for: the request's cost at least; twice the
// last grant when this node spent it within half a horizon, otherwise what
// it spent per ms times the horizon, or, when it refused requests since
// (starved), the last grant and those per ms times the horizon; at most
// half of what the limits have left as this node's view last read them, so
// that other nodes asking find some too.
func (ls *lease) size(t *leaseTable, old *grant, p *plan, key string, now int64) float64 {
	k, horizon := p.cost, t.horizon.Load()
	switch {
	case old != nil:
		used := old.k - math.Float64frombits(old.held.Load())
		elapsed := max(1, now-old.at)
		if elapsed*2 <= horizon {
			k = max(k, 2*ls.k)
		} else {
			k = max(k, math.Ceil(used/float64(elapsed)*float64(horizon)))
		}
	case ls.k > 0:
		k = max(k, ls.k)
	}
	if ls.starved > 0 {
		k = max(k, math.Ceil((ls.k+ls.starved)/float64(max(1, now-ls.since))*float64(horizon)))
	}
	if left := p.largestFit(key, p.cost); left/2 >= p.cost && left >= 2*chunk(p.limits, p.cost, k) {
		k = min(k, math.Floor(left/2))
	}
	return max(k, p.cost)
}

// largestFit returns the largest whole amount that fits every limit of the
// plan on the state it holds (the store's answer, or this node's view), at
// most the smallest limit, or cost when only that fits; 0 when nothing
// does.
func (p *plan) largestFit(key string, cost float64) float64 {
	hi := math.Inf(1)
	for i := range p.limits {
		hi = min(hi, p.limits[i].Limit, p.limits[i].burst())
	}
	var buf [stackLimits]float64
	cur := buf[:0]
	for i := range p.groups {
		cur = append(cur, p.groups[i].w.Value(key))
	}
	fits := func(n float64) bool {
		for i := range p.groups {
			if !p.fits(i, cur[i], n) {
				return false
			}
		}
		for i := range p.buckets {
			b := &p.buckets[i]
			if !arith.BucketFits(b.after.Level(p.now), n, b.burst, b.after.Window) {
				return false
			}
		}
		for i := range p.keyed {
			if k := &p.keyed[i]; !k.fitsLimit(k.count, n, k.limit) {
				return false
			}
		}
		return true
	}
	lo, up := 0.0, math.Floor(min(hi, 1<<53)) // fits(lo) or lo == 0; the answer is in [lo, up]; whole floats are exact up to 2^53
	for lo < up {
		mid := math.Floor((lo + up + 1) / 2)
		if mid <= lo || mid > up {
			break
		}
		if fits(mid) {
			lo = mid
		} else {
			up = mid - 1
		}
	}
	if lo < cost && fits(cost) {
		return cost
	}
	return lo
}

// granted makes the grant of want units that the store made (its state in
// the plan) the lease's, with what old still held, and takes the request
// from it.
func (in *Instance) granted(n *ns, ls *lease, old *grant, p *plan, key string, want float64, now int64) {
	t := n.leases
	g := &grant{k: want, at: now, until: math.MaxInt64, parts: make([]leasePart, len(p.limits))}
	for i := range p.limits {
		pt := &g.parts[i]
		switch r := p.idx[i]; r.kind {
		case refWindow:
			gr := &p.groups[r.j]
			pt.kind, pt.w, pt.cur, pt.prev, pt.start, pt.size = refWindow, gr.w, gr.cur, gr.prev, gr.w.Start(), gr.sr.Size()
			g.until = min(g.until, arith.WindowLeaseEnd(pt.start, pt.size))
		case refSpan:
			s := &p.spans[r.j]
			gr := &p.groups[s.g]
			pt.kind, pt.w, pt.cur, pt.mid, pt.prev, pt.start, pt.size, pt.span = refSpan, gr.w, gr.cur, s.mid, s.old, gr.w.Start(), gr.sr.Size(), s.span
			g.until = min(g.until, arith.WindowLeaseEnd(pt.start, pt.size))
		case refBucket:
			b := &p.buckets[r.j]
			pt.kind, pt.bucket, pt.buckets, pt.bucketOf = refBucket, b.after, b.t, b.first
			// Valid while the store's bucket, as the grant left it, is not
			// empty (its level reaches 0 at Origin + Base/Rate), the units
			// held shrinking with its refill meanwhile (avail).
			g.until = min(g.until, arith.BucketLeaseEnd(b.after.Base, b.after.Origin, b.after.Rate))
			g.decay = max(g.decay, arith.LeaseDecay(b.rate, b.after.Window))
		case refKeyed:
			k := &p.keyed[r.j]
			pt.kind, pt.cur, pt.start, pt.size = refKeyed, k.count, k.at, k.window
			g.until = min(g.until, arith.WindowLeaseEnd(k.at, k.window))
		}
	}
	held := want - p.cost
	if old != nil {
		left, lost := old.drain(now)
		t.stats.expired.add(lost)
		if left > 0 {
			held += left
			g.until = min(g.until, old.until)
		}
		t.stats.held.Add(-1)
	}
	g.held.Store(math.Float64bits(held))
	ls.k, ls.starved, ls.since = want, 0, now
	ls.cur.Store(g)
	t.stats.held.Add(1)
	t.stats.grants.Add(1)
	t.stats.granted.add(want)
	p.grant, p.left = g, held
}

// expire ends old, which ls holds no more: what it still holds goes back
// (giveBack).
func (in *Instance) expire(n *ns, key string, ls *lease, old *grant, now int64) {
	if ls.cur.CompareAndSwap(old, nil) {
		n.leases.stats.held.Add(-1)
	}
	left, lost := old.drain(now)
	n.leases.stats.expired.add(lost)
	if left > 0 {
		in.giveBack(n, key, ls, old, left, now)
	}
}

// giveBack returns units a node holds and will not use: from each window
// they were counted in (pushed as a negative diff with the next sync),
// from each bucket less what refilled since the grant; an anchored
// window's stay counted.
func (in *Instance) giveBack(n *ns, key string, ls *lease, g *grant, units float64, now int64) {
	t := n.leases
	returned := 0.0
	units = arith.SafeUnits(units)
	for i := range g.parts {
		pt := &g.parts[i]
		switch pt.kind {
		case refWindow, refSpan:
			if pt.w != nil && slices.IndexFunc(g.parts[:i], func(q leasePart) bool { return q.w == pt.w }) < 0 {
				pt.w.Add(key, -units, now)
				returned = units
			}
		case refBucket:
			if pt.bucketOf != i {
				continue
			}
			if units > 0 { // what refilled since the grant is off already (drain)
				pt.buckets.Give(key, units, pt.bucket.Rate, now)
				returned = units
			}
		}
	}
	t.stats.returned.add(returned)
	t.stats.expired.add(units - returned)
}

// resolveGrants gives back the grants the store made in a check call
// whose answer this node never had (it was in doubt, and the lane sent it
// again): the node holds none of those units, so every one goes back, a
// bucket's less its refill since (avail), to each window and bucket once.
// Only checks recorded as grants in doubt (doubt) go back: a request
// decided in the store stays counted.
func (in *Instance) resolveGrants(n *ns, checks []strategy.Check, res []strategy.CheckResult) {
	now := in.nowIn(n)
	for i := range checks {
		c := &checks[i]
		if !n.leases.resolve(c) || !res[i].Allowed {
			continue // a request decided in the store, or a grant it refused
		}
		at := c.Now.UnixMilli()
		decay := 0.0
		for _, l := range c.Limits {
			if l.Kind != 0 && l.Kind != strategy.KindAnchored {
				decay = max(decay, arith.LeaseDecay(l.Limit, l.WindowSize.Milliseconds()))
			}
		}
		units := arith.SafeUnits(arith.LeaseLeft(c.Cost, decay, at, now))
		if units <= 0 {
			continue
		}
		type part struct {
			kind uint8
			size time.Duration
		}
		var done [stackLimits]part
		seen := done[:0]
		for _, l := range c.Limits {
			id := part{l.Kind, l.WindowSize}
			if l.Kind == 0 {
				id.size = l.Sub()
			}
			if slices.Contains(seen, id) {
				continue // limits of one window, or one bucket, share it
			}
			seen = append(seen, id)
			switch {
			case l.Kind == 0:
				size := id.size
				if sr := n.seriesOf(size); sr != nil {
					if w := sr.Window(arith.Start(at, size.Milliseconds()), false, now); w != nil {
						w.Add(c.Key, -units, now)
					}
				}
			case l.Kind != strategy.KindAnchored:
				n.bucketTable(l.Kind, l.WindowSize, now).Give(c.Key, units, l.Limit, now)
			}
		}
		n.leases.stats.returned.add(units)
	}
}

// sweepLeases returns what this node holds and will not use: grants whose
// validity ended, and grants not spent from since the last sweep (an idle
// key), or every grant when all is set (the namespace goes away). Leases
// with nothing held and no refusal standing are forgotten. Called before
// each sync, so that returns ride its push.
func (in *Instance) sweepLeases(n *ns, all bool) {
	t := n.leases
	if t == nil {
		return
	}
	now := in.nowIn(n)
	t.m.Range(func(key string, head *lease) bool {
		empty := true
		for ls := head; ls != nil; ls = ls.next.Load() {
			if !ls.mu.tryLock() {
				empty = false
				continue // a grant under way: next sweep
			}
			g := ls.cur.Load()
			if g != nil {
				h := math.Float64frombits(g.held.Load())
				if all || now >= g.until || now < g.at || h == ls.seen {
					in.expire(n, key, ls, g, now)
					g, ls.seen = nil, -1
				} else {
					ls.seen = h
				}
			}
			if d := ls.denied; d != nil && (now >= d.until || now < d.at) {
				ls.denied = nil
			}
			if g != nil || ls.denied != nil {
				empty = false
			}
			ls.mu.unlock()
		}
		if empty {
			t.m.Compute(key, func(old *lease, loaded bool) (*lease, bool) {
				return old, loaded && old == head && leaseIdle(head)
			})
		}
		return true
	})
}

// leaseIdle reports whether no lease of the chain holds a grant or a
// refusal.
func leaseIdle(head *lease) bool {
	for ls := head; ls != nil; ls = ls.next.Load() {
		if ls.cur.Load() != nil || !ls.mu.tryLock() {
			return false
		}
		d := ls.denied
		ls.mu.unlock()
		if d != nil {
			return false
		}
	}
	return true
}

// LeaseStats is a leased namespace's lease figures.
type LeaseStats struct {
	Held       int64   // grants this node holds
	Grants     uint64  // grants the store made
	Granted    float64 // units granted
	Returned   float64 // units given back to the store
	Expired    float64 // units not used that stayed counted (a bucket's lost to its refill while held included)
	StoreCalls uint64  // grant requests sent to the store
	Denials    uint64  // grant requests the store refused
	Local      uint64  // requests refused on this node while a refusal stood
	Fallbacks  uint64  // requests decided by the store-down behaviour
}

func (t *leaseTable) snapshot() LeaseStats {
	if t == nil {
		return LeaseStats{}
	}
	s := &t.stats
	return LeaseStats{
		Held: s.held.Load(), Grants: s.grants.Load(), Granted: s.granted.load(), Returned: s.returned.load(),
		Expired: s.expired.load(), StoreCalls: s.storeCalls.Load(), Denials: s.denials.Load(), Local: s.local.Load(),
		Fallbacks: s.fallbacks.Load(),
	}
}

// refuse writes the states of the refusal at now into out: the store's
// answer, its times counted down. It returns the Decision's RetryAfter:
// until the node asks again.
func (d *denial) refuse(now int64, out []LimitState) time.Duration {
	elapsed := arith.Ms(now - d.at)
	for i := range out {
		out[i] = d.states[i]
		st := &out[i]
		st.Reset = max(0, st.Reset-elapsed)
		if !st.Allowed {
			st.RetryAfter = max(time.Millisecond, st.RetryAfter-elapsed)
		}
	}
	return arith.Ms(max(1, d.until-now))
}
