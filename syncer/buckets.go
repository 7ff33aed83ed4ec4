package syncer

import (
	"context"
	"fmt"
	"time"

	"github.com/ratesync/ratesync/internal/arith"
	"github.com/ratesync/ratesync/shm"
	"github.com/ratesync/ratesync/strategy"
)

// Buckets. A node's bucket holds its view (shm.Buckets): the store's bucket
// as last read or decided, plus the cost this node took since. What it took
// is pushed as bucket diffs (strategy.BucketDiff) in the lane's batches,
// dated by the first hit; a fetch reads back every bucket the node holds and
// sets each to the store's state plus what is still in flight or pending.

// takePending appends the cost pending in t (key's only, when key is not
// empty) to out as bucket diffs.
func takePending(c *conf, t *shm.Buckets, key string, out []strategy.BucketDiff) []strategy.BucketDiff {
	window := time.Duration(t.Window()) * time.Millisecond
	t.TakePending(key, func(k string, at int64, cost, rate float64) {
		out = append(out, strategy.BucketDiff{Namespace: c.Namespace, Key: k, Kind: t.Kind(), Window: window, At: at, Cost: cost, Rate: rate})
	})
	return out
}

// takeKeyed appends the hits of anchored windows and logs counted on this
// node (key's only, when key is not empty) to out as diffs: each the cost
// of one millisecond (see strategy.BucketDiff). Rate is not used for them:
// it is 1.
func takeKeyed(c *conf, key string, out []strategy.BucketDiff) []strategy.BucketDiff {
	if c.Keyed == nil || !c.buckets {
		return out
	}
	for _, t := range c.Keyed() {
		if !t.HasPending() {
			continue
		}
		window := time.Duration(t.Window()) * time.Millisecond
		t.TakePending(key, func(k string, at int64, cost float64) {
			out = append(out, strategy.BucketDiff{Namespace: c.Namespace, Key: k, Kind: t.Kind(), Window: window, At: at, Cost: cost, Rate: 1})
		})
	}
	return out
}

// installBucket sets key's bucket in t to st, the store's state, plus the
// diffs of it still in flight and what is pending, as of now. Callers hold
// lane.mu.
func (s *Syncer) installBucket(t *shm.Buckets, key string, st strategy.BucketState, rate float64, now int64) {
	w := t.Window()
	for _, b := range s.lane.inflight {
		for _, d := range b.Buckets {
			if d.Key == key && d.Kind == t.Kind() && d.Window.Milliseconds() == w {
				st.Level, st.At = arith.BucketAdd(st.Level, st.At, d.Rate, d.Cost, w, d.At)
			}
		}
	}
	t.Install(key, now, func(cost float64, at int64, r float64) float64 {
		if cost != 0 {
			st.Level, st.At = arith.BucketAdd(st.Level, st.At, r, cost, w, at)
		}
		return arith.Level(st.Level, st.At, rate, now)
	})
}

// fetchBuckets reads every bucket the node holds and installs it (see
// installBucket); buckets the store does not hold are empty there. It
// returns the buckets read. With a store that keeps no buckets (a namespace
// moved to one by Reconfigure: it takes no new bucket limit) the buckets
// held are left to drain on this node, and their pending cost is not pushed.
func (s *Syncer) fetchBuckets(ctx context.Context, c *conf, now int64) (int, error) {
	if c.Buckets == nil || !c.buckets {
		return 0, nil
	}
	bs := c.Strategy.(strategy.BucketStore)
	n := 0
	for _, t := range c.Buckets() {
		if t.Len() == 0 {
			continue
		}
		window := time.Duration(t.Window()) * time.Millisecond
		var refs []strategy.BucketRef
		t.Keys(func(k string) bool {
			refs = append(refs, strategy.BucketRef{Key: k, Kind: t.Kind(), Window: window})
			return true
		})
		got, err := bs.GetBuckets(ctx, c.Namespace, refs)
		s.countCall(callFetch, err)
		if err != nil {
			return n, fmt.Errorf("syncer: namespace %q: get buckets: %w", c.Namespace, err)
		}
		s.lane.calls++
		n += len(got)
		held := make(map[string]strategy.BucketState, len(got))
		for _, b := range got {
			held[b.Key] = b
		}
		for _, r := range refs {
			st, ok := held[r.Key]
			if !ok {
				st = strategy.BucketState{Key: r.Key, Kind: r.Kind, Window: r.Window}
			}
			if rate := t.RateOf(r.Key); rate > 0 {
				s.installBucket(t, r.Key, st, rate, now)
			}
		}
	}
	return n, nil
}
