package strategytest

import (
	"context"
	"time"

	"github.com/ratesync/ratesync/strategy"
)

// LateReply wraps a strategy whose CheckAndCount and PushAndCount reach the
// store at once and answer late: the call is applied, then its reply takes
// Delay, or until the call's context ends, in which case the caller gets
// ctx.Err() for a call the store has applied. Applied signals each such
// call once it is applied and its reply is on its way. The other methods
// pass through. The inner strategy must implement strategy.Checker and
// strategy.PushCounter (strategy/memory does). It is safe for concurrent
// use.
type LateReply struct {
	strategy.Strategy
	delay   time.Duration
	applied chan string
}

var (
	_ strategy.PushCounter = (*LateReply)(nil)
	_ strategy.Checker     = (*LateReply)(nil)
)

// NewLateReply wraps inner; the replies of its CheckAndCount and
// PushAndCount take delay.
func NewLateReply(inner strategy.Strategy, delay time.Duration) *LateReply {
	return &LateReply{Strategy: inner, delay: delay, applied: make(chan string, 64)}
}

// Applied receives the method name ("CheckAndCount", "PushAndCount") of each
// call once the store has applied it and before it replies. It holds up to
// 64 names unread; later calls are not signalled then.
func (l *LateReply) Applied() <-chan string { return l.applied }

// reply signals the applied call of method, then waits the delay or the end
// of ctx.
func (l *LateReply) reply(ctx context.Context, method string) error {
	select {
	case l.applied <- method:
	default:
	}
	t := time.NewTimer(l.delay)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// CheckAndCount applies the checks in the inner strategy, then replies
// late.
func (l *LateReply) CheckAndCount(ctx context.Context, node string, seq uint64, checks []strategy.Check) ([]strategy.CheckResult, error) {
	res, err := l.Strategy.(strategy.Checker).CheckAndCount(context.WithoutCancel(ctx), node, seq, checks)
	if err != nil {
		return nil, err
	}
	if err := l.reply(ctx, "CheckAndCount"); err != nil {
		return nil, err
	}
	return res, nil
}

// PushAndCount applies b in the inner strategy, then replies late.
func (l *LateReply) PushAndCount(ctx context.Context, b strategy.Batch) ([]strategy.Totals, error) {
	totals, err := l.Strategy.(strategy.PushCounter).PushAndCount(context.WithoutCancel(ctx), b)
	if err != nil {
		return nil, err
	}
	if err := l.reply(ctx, "PushAndCount"); err != nil {
		return nil, err
	}
	return totals, nil
}

// GetBuckets forwards to the inner strategy's GetBuckets.
func (l *LateReply) GetBuckets(ctx context.Context, ns string, refs []strategy.BucketRef) ([]strategy.BucketState, error) {
	return l.Strategy.(strategy.BucketStore).GetBuckets(ctx, ns, refs)
}
