package ratelimiting

import (
	"context"
	"errors"
	"time"

	"github.com/ratesync/ratesync/namespace"
)

// storeDown decides a request that needs the store when the store does not
// answer (a synchronous namespace's request, a leased namespace's grant),
// by the namespace's store-down behaviour (namespace.Config.StoreDown):
//
//   - share: on this node's view against each limit divided by the nodes
//     seen using the store recently (the syncer counts them through the
//     store while it answers): nodes cut off together admit at most the
//     limit between them, as their counts reach the store once it is back;
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
	if nodes <= 1 {
		return in.checkLocal(p, key), nil
	}
	return in.decideShare(ctx, p, n, key, nodes, plan{cost: p.cost, penalty: p.penalty, local: true}, n.syncer.RetryIn())
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

// recovering decides a request of a leased namespace whose store came
// back less than a sync ago (syncer.Recovering): in the store, counted at
// once, against each limit divided by the nodes, as storeDown's share
// (whatever the behaviour), and by storeDown when the store does not
// answer. A node that has not yet seen the store back admits at most its
// share on its own, unseen by the store until its next push; the nodes
// that have seen it admit, seen by all, only while the count stays within
// one share. So the limit holds while the nodes' views converge.
func (in *Instance) recovering(ctx context.Context, p *plan, n *ns, key string) (bool, error) {
	return in.decideShare(ctx, p, n, key, n.syncer.Nodes(), plan{cost: p.cost, inStore: true}, n.cfg.SyncRate)
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
