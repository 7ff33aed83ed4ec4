package ratelimiting

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/ratesync/ratesync/namespace"
)

// storeDown decides a request that needs the store when the store does not
// answer (a synchronous namespace's request, a leased namespace's grant),
// by the namespace's store-down behaviour (namespace.Config.StoreDown):
//
//   - share: on this node's view against each limit divided by the nodes
//     seen using the store recently (the syncer counts them through the
//     store while it answers), in windows that start once the outage has
//     lasted long enough (mayShare), refused before: nodes cut off together
//     admit at most the limit between them, as their counts reach the store
//     once it is back; a node alone, or started during the outage, decides
//     against the whole limit, and one that reached the store but has not
//     counted the nodes yet refuses;
//   - local: on this node's view against the whole limit;
//   - deny: refused, with RetryAfter until the store's next probe.
func (in *Instance) storeDown(ctx context.Context, p *plan, n *ns, key string) (bool, error) {
	switch n.cfg.StoreDown {
	case namespace.StoreDownLocal:
		return in.checkLocal(p, key), nil
	case namespace.StoreDownDeny:
		p.refused = max(time.Millisecond, n.syncer.RetryIn())
		return false, nil
	}
	nodes := n.syncer.Nodes()
	switch {
	case n.alone():
		return in.checkLocal(p, key), nil
	case nodes == 0:
		// The store answered, the count of the nodes not yet: no share
		// is known to be safe.
		p.refused = max(time.Millisecond, n.syncer.RetryIn())
		return false, nil
	case !in.mayShare(p, n):
		return false, nil
	}
	return in.decideShare(ctx, p, n, key, nodes, plan{cost: p.cost, penalty: p.penalty, local: true}, n.syncer.RetryIn())
}

// alone reports whether this node's share of a limit is the whole of it:
// it counted only itself using the store, or it started during an outage
// (the store never answered it) and knows of no other node.
func (n *ns) alone() bool {
	nodes := n.syncer.Nodes()
	return nodes == 1 || nodes == 0 && !n.syncer.Answered()
}

// mayShare reports whether the node may decide p's request on its shares;
// when not, it refuses it (p.refused). Other nodes took quota from the
// store until it went down, and this node does not know how much: a share
// is safe only in windows that start after the outage, and, since a store
// that loses some replies still answers the other nodes, only once it has
// lasted long enough that every node would have seen it back
// (syncer.ShareIn). Until then the node refuses what its leases do not
// cover: the outage costs admissions, never the limit.
func (in *Instance) mayShare(p *plan, n *ns) bool {
	wait, down := n.syncer.ShareIn()
	if !down {
		// Marked up since the store failed this request: ask again.
		p.refused = time.Millisecond
		return false
	}
	from := p.now + int64(math.Ceil(float64(wait)/float64(time.Millisecond)))
	at := p.freshFrom(from)
	if p.now >= at {
		return true
	}
	retry := time.Duration(at-p.now) * time.Millisecond
	if probe := n.syncer.RetryIn(); probe > 0 && probe < retry {
		retry = probe // the store may be back before then
	}
	p.refused = max(time.Millisecond, retry)
	return false
}

// freshFrom returns the first instant (Unix ms) at which every state p's
// limits read began at or after from: a fixed window that starts then, a
// sliding window whose previous window does, a precision limit's whole
// span, a bucket that has had time to refill from empty, an anchored
// window or a log that opened then.
func (p *plan) freshFrom(from int64) int64 {
	at := from
	for i := range p.limits {
		l := &p.limits[i]
		switch r := p.idx[i]; r.kind {
		case refWindow, refSpan:
			g := p.windowOf(i)
			size, start := g.sr.Size(), g.w.Start()
			first := start
			if from > start {
				first += (from - start + size - 1) / size * size
			}
			switch {
			case r.kind == refSpan:
				first += p.spans[r.j].span
			case !l.fixed():
				first += size
			}
			at = max(at, first)
		case refBucket, refKeyed:
			fill := float64(l.Window.Milliseconds())
			if r.kind == refBucket {
				fill *= l.burst() / l.Limit
			}
			at = max(at, from+int64(min(math.Ceil(fill), 1<<53)))
		}
	}
	return at
}

// decideShare decides p's request as q, with each of p's limits (and
// bursts) divided by nodes, and keeps the states in p; a request larger
// than a share is refused, with RetryAfter refused.
func (in *Instance) decideShare(ctx context.Context, p *plan, n *ns, key string, nodes int, q plan, refused time.Duration) (bool, error) {
	q.limits = make([]Limit, len(p.limits))
	for i, l := range p.limits {
		l.Limit /= float64(nodes)
		l.Burst /= float64(nodes)
		q.limits[i] = l
	}
	out := make([]LimitState, len(p.limits))
	allowed, retry, err := in.check(ctx, n.cfg.Name, key, q, out)
	var bad *InputError
	if errors.As(err, &bad) {
		// The request is larger than a share of a limit: it cannot pass
		// here until the store is back.
		p.refused = max(time.Millisecond, refused)
		return false, nil
	}
	if err != nil {
		return false, err
	}
	p.shared, p.sharedRetry = out, retry
	return allowed, nil
}

// recovering decides a request of a leased or synchronous namespace whose
// store came back from an outage less than a probe interval ago
// (syncer.Recovering): in the store, counted at
// once, against each limit divided by the nodes, as storeDown's share
// (whatever the behaviour), and by storeDown when the store does not
// answer. A node that has not yet seen the store back admits at most its
// share on its own, unseen by the store until its next push; the nodes
// that have seen it admit, seen by all, only while the count stays within
// one share. So the limit holds while the nodes' views converge.
func (in *Instance) recovering(ctx context.Context, p *plan, n *ns, key string) (bool, error) {
	return in.decideShare(ctx, p, n, key, max(1, n.syncer.Nodes()), plan{cost: p.cost, inStore: true}, max(n.cfg.SyncRate, time.Millisecond))
}

// storeDownStates writes the states of a request the store-down behaviour
// decided into out and returns the Decision's RetryAfter; ok is false
// when the plan was decided otherwise.
func (p *plan) storeDownStates(out []LimitState) (retry time.Duration, ok bool) {
	switch {
	case p.shared != nil:
		for i := range out {
			out[i] = p.shared[i]
			out[i].Limit = p.limits[i] // the caller's limit; the figures are the share's
		}
		return p.sharedRetry, true
	case p.refused > 0:
		for i := range out {
			out[i] = LimitState{Limit: p.limits[i], RetryAfter: p.refused}
		}
		return p.refused, true
	}
	return 0, false
}
