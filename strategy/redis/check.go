package redis

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/ratesync/ratesync/strategy"
)

// CheckAndCount decides and counts each check in the store, at most once
// per (node, seq): the checks of one namespace shard (so every check of one
// key) run in one check.lua script, in order, atomically; the shards run in
// one pipelined round trip. A check passes when every limit lets it:
// strategy.WindowFits for a window limit, with the time elapsed in the
// current window from the check's Now (strategy.SpanFits over the Depth
// sub-windows of a limit with a Precision), and strategy.BucketFits for a
// bucket limit (the bucket (Key, Kind, WindowSize), refilling Limit per
// WindowSize up to Burst), strategy.AnchoredFits for an anchored window
// and strategy.LogFits for a log (trimmed at Now first), at Now; Redis
// computes them as the node does, bit for bit. A passing check adds Cost
// once to the current window of each distinct size (Sub) of its window
// limits and, when Cost > 0, to each of its distinct buckets, anchored
// windows and logs (strategy.BucketAdd, AnchoredAdd, Log.Add at Now). A
// precision limit's result holds all its Depth counts in Windows; a log's
// state holds, for a check that did not pass and that the log refuses,
// the instant it fits (strategy.RetryAt).
//
// Each shard records seq with the decisions of its checks, in the same
// atomic step (the lane record: see the package documentation). When seq
// is the last one applied in a check's shard and was applied by a call (a
// retry of the same call, the same checks in the same order: its reply was
// lost, or go-redis resent the script), that check counts nothing again
// and is returned as decided then, with the current totals and keyed
// states. When seq is below the last one applied there (its decisions are
// no longer kept), or was applied by a push (or by a release that recorded
// no decisions), the check counts nothing and is returned not allowed,
// with the current totals and keyed states. Checks share lane records with
// PushDiffs: a node numbers its pushes and checks from one sequence, or
// uses different node names for them.
func (s *Store) CheckAndCount(ctx context.Context, node string, seq uint64, checks []strategy.Check) ([]strategy.CheckResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	nlim := 0
	for i := range checks {
		if err := validCheck(i, &checks[i]); err != nil {
			return nil, err
		}
		nlim += len(checks[i].Limits)
	}
	out := make([]strategy.CheckResult, len(checks))
	if len(checks) == 0 {
		return out, nil
	}
	strs := newCheckStrings(checks, nlim)
	gr := grouper{shards: s.cfg.Shards}
	for i, c := range checks {
		g := gr.of(c.Namespace, c.Key)
		g.items = append(g.items, i)
	}
	lims, hashes := s.checkHashes(gr.gs, checks, nlim)
	sq := any(seqArg(seq))
	for _, g := range gr.gs {
		lims = s.encodeCheck(g, node, sq, checks, lims, hashes, &strs)
	}

	gs := gr.gs
	op := func() string { return fmt.Sprintf("check %d requests of node %q, seq %d", len(checks), node, seq) }
	if err := s.call(ctx, op, func(ctx context.Context) error { return s.runScript(ctx, checkScript, gs) }); err != nil {
		return nil, err
	}
	if err := checkResults(gs, checks, nlim, out, op); err != nil {
		return nil, err
	}
	return out, nil
}

// limitKeys locates the keys of one limit of a check in its group: the
// hashes of a window limit are hashes[lo:hi] of the call (hash numbers,
// the window holding the check's Now first, then the ones before it); the
// key of a bucket, anchored window or log is number keyed of the group's
// buckets (see group.keyed).
type limitKeys struct{ lo, hi, keyed int }

// checkHashes gives each group the hashes of its checks' windows, with
// the TTL of each (the longest any check counting in it asks), and the
// keys of its checks' buckets, anchored windows and logs, and returns the
// keys of every limit, in the order of the groups' items, with the hash
// numbers they point into.
//
// A window limit reads Depth windows of size Sub: its current and previous
// windows, or the sub-windows of a precision limit. It counts in the
// current one, which lasts until the limit's span (WindowSize) slides past
// it.
func (s *Store) checkHashes(gs []*group, checks []strategy.Check, nlim int) ([]limitKeys, []int) {
	lims := make([]limitKeys, 0, nlim)
	hashes := make([]int, 0, 2*nlim)
	for _, g := range gs {
		for _, i := range g.items {
			c := &checks[i]
			now := c.Now.UnixMilli()
			for j := range c.Limits {
				l := &c.Limits[j]
				if l.Kind != 0 {
					lims = append(lims, limitKeys{keyed: g.keyed(c.Key, l.Kind, l.WindowSize.Milliseconds())})
					continue
				}
				size := l.Sub().Milliseconds()
				start := strategy.WindowStart(c.Now, l.Sub()).UnixMilli()
				lo := len(hashes)
				for back := range l.Depth() {
					h, added := g.hash(window{size, start - int64(back)*size})
					if added {
						g.ttls = append(g.ttls, 0) // read only, unless a check counts in it
					}
					hashes = append(hashes, h)
				}
				cur := hashes[lo]
				g.ttls[cur-1] = max(g.ttls[cur-1], s.windowTTL(start, size, l.WindowSize.Milliseconds(), now))
				lims = append(lims, limitKeys{lo: lo, hi: len(hashes)})
			}
		}
	}
	return lims, hashes
}

// checkStrings holds the strings and numbers of a CheckAndCount call's
// arguments, which the scripts get by pointer: the checks' fields, then
// each check's cost and each limit's limit (rate, burst); the sizes and
// elapsed times of window limits, the clocks and windows of bucket limits
// (a batch mostly repeats the same few strings, formatted once). They live
// in slices of this call, never in the caller's checks: the exchange may
// outlive the call (see call).
type checkStrings struct {
	fields []string
	nums   []string // a cost per check, two per limit
	k      int      // nums used
	ints   *numArgs

	costs, limits, bursts floatMemo
}

func newCheckStrings(checks []strategy.Check, nlim int) checkStrings {
	strs := make([]string, 2*len(checks)+2*nlim)
	cs := checkStrings{fields: strs[:len(checks)], nums: strs[len(checks):], ints: newNumArgs(2 * nlim)}
	for i, c := range checks {
		cs.fields[i] = c.Key
	}
	return cs
}

// format returns the next of nums, holding v as m formats it.
func (cs *checkStrings) format(m *floatMemo, v float64) *string {
	p := &cs.nums[cs.k]
	*p = m.format(v)
	cs.k++
	return p
}

// encodeCheck sets the keys and ARGV of check group g of node's call, whose
// limits' keys start lims (pointing into hashes), and returns the rest of
// lims.
func (s *Store) encodeCheck(g *group, node string, seq any, checks []strategy.Check, lims []limitKeys, hashes []int, strs *checkStrings) []limitKeys {
	s.setKeys(g, node)
	// Distinct keys of one plain window limit each: check.lua skips its
	// value cache.
	simple := len(g.bkeys) == 0 && distinctKeys(strs.fields, g.items)
	for _, i := range g.items {
		simple = simple && len(checks[i].Limits) == 1 && checks[i].Limits[0].Depth() == 2
	}
	a := newArgv(seq, s.laneTTL, checkArgs(len(g.wins), len(g.items)))
	a.checkGroup(len(g.keys), simple, g.ttls)
	g.n, g.nout = len(g.items), 0
	for _, i := range g.items {
		c := &checks[i]
		g.nout += replyLen(c)
		nb := 0
		for _, l := range c.Limits {
			if l.Kind != 0 {
				nb++
			}
		}
		a.check(&strs.fields[i], strs.format(&strs.costs, c.Cost), len(c.Limits)-nb, nb)
		encodeLimits(&a, g, c, lims[:len(c.Limits)], hashes, strs)
		lims = lims[len(c.Limits):]
	}
	g.args = a.done()
	return lims
}

// replyLen returns the number of values check.lua replies for c: its
// decision, the Depth counts of each window limit, two values per bucket
// or anchored window limit and three per log limit.
func replyLen(c *strategy.Check) int {
	n := 1
	for j := range c.Limits {
		switch l := &c.Limits[j]; l.Kind {
		case 0:
			n += l.Depth()
		case strategy.KindLog:
			n += 3
		default:
			n += 2
		}
	}
	return n
}

// encodeLimits appends the limits of check c of group g, whose keys are
// lims (pointing into hashes): its window limits, then its keyed limits
// (buckets, anchored windows, logs), each in order.
func encodeLimits(a *argv, g *group, c *strategy.Check, lims []limitKeys, hashes []int, strs *checkStrings) {
	now := c.Now.UnixMilli()
	n := strs.ints
	for j := range c.Limits {
		l := &c.Limits[j]
		if l.Kind != 0 {
			continue
		}
		var elapsed *int64 // a fixed window
		if !l.Fixed {
			elapsed = n.intArg(now - strategy.WindowStart(c.Now, l.Sub()).UnixMilli())
		}
		a.limit(hashes[lims[j].lo:lims[j].hi], n.intArg(l.Sub().Milliseconds()), elapsed, strs.format(&strs.limits, l.Limit))
		strs.k++ // its second place stays empty
	}
	for j, l := range c.Limits {
		if l.Kind == 0 {
			continue
		}
		limit := strs.format(&strs.limits, l.Limit)
		var burst any = ""
		if isBucket(l.Kind) {
			burst = strs.format(&strs.bursts, l.Burst)
		} else {
			strs.k++
		}
		a.keyedLimit(keyedType(l.Kind), len(g.wins)+lims[j].keyed, n.intArg(now), n.intArg(l.WindowSize.Milliseconds()), limit, burst)
	}
}

// checkResults parses the decisions, totals and keyed states of the checks
// from the replies of their groups into out: per check, the decision, the
// Depth counts of each window limit, then the state of each keyed limit
// (see replyLen and check.lua).
func checkResults(gs []*group, checks []strategy.Check, nlim int, out []strategy.CheckResult, op func() string) error {
	totals := make([]strategy.Totals, nlim)
	for _, g := range gs {
		vals := g.res
		k := 0
		for _, i := range g.items {
			c := &checks[i]
			nl, nv := len(c.Limits), replyLen(c)
			if k+nv > len(vals) {
				return fmt.Errorf("redis: %s: shard %s: reply of %d values: too short", op(), g.tag, len(vals))
			}
			out[i].Allowed = vals[k] == "1"
			out[i].Totals, totals = totals[:nl:nl], totals[nl:]
			if err := checkResult(&out[i], c, vals[k+1:k+nv]); err != nil {
				return fmt.Errorf("redis: %s: shard %s: %w", op(), g.tag, err)
			}
			k += nv
		}
	}
	return nil
}

// checkResult parses the totals, windows and keyed states of check c into
// r from vals: the Depth counts of each of its window limits first (newest
// first: the current and the previous window are its totals), then the
// state of each keyed limit: at and level, and a log's RetryAt.
func checkResult(r *strategy.CheckResult, c *strategy.Check, vals []any) error {
	k := 0
	for j := range c.Limits {
		l := &c.Limits[j]
		if l.Kind != 0 {
			continue
		}
		d := l.Depth()
		var counts []float64
		if d > 2 {
			if r.Windows == nil {
				r.Windows = make([][]float64, len(c.Limits))
			}
			counts = make([]float64, d)
			r.Windows[j] = counts
		}
		for b := range d {
			v, err := parseCount(vals[k+b])
			if err != nil {
				return err
			}
			switch b {
			case 0:
				r.Totals[j].Current = v
			case 1:
				r.Totals[j].Previous = v
			}
			if counts != nil {
				counts[b] = v
			}
		}
		k += d
	}
	for j, l := range c.Limits {
		if l.Kind == 0 {
			continue
		}
		if r.Buckets == nil {
			r.Buckets = make([]strategy.BucketState, len(c.Limits))
		}
		b := &r.Buckets[j]
		b.Key, b.Kind, b.Window = c.Key, l.Kind, l.WindowSize
		var err error
		if b.At, b.Level, err = parseBucketReply(vals[k], vals[k+1]); err != nil {
			return err
		}
		k += 2
		if l.Kind == strategy.KindLog {
			if b.RetryAt, err = parseMs(vals[k]); err != nil {
				return err
			}
			k++
		}
	}
	return nil
}

// validCheck validates check i.
func validCheck(i int, c *strategy.Check) error {
	what := func() string { return fmt.Sprintf("check %d (key %s)", i, quote(c.Key)) }
	if math.IsNaN(c.Cost) || math.IsInf(c.Cost, 0) {
		return checkFinite(what(), "Cost", c.Cost)
	}
	if c.Cost < 0 {
		return fmt.Errorf("redis: %s: Cost = %v: must be >= 0", what(), c.Cost)
	}
	for j, l := range c.Limits {
		if l.WindowSize > 0 && l.WindowSize%time.Millisecond == 0 && positive(l.Limit) && (l.Kind == 0 || !isBucket(l.Kind) || positive(l.Burst)) && l.Precision == 0 {
			continue
		}
		lwhat := fmt.Sprintf("%s: limit %d", what(), j)
		if err := checkSize(lwhat, l.WindowSize); err != nil {
			return err
		}
		if err := checkFinite(lwhat, "Limit", l.Limit); err != nil {
			return err
		}
		if !(l.Limit > 0) {
			return fmt.Errorf("redis: %s: Limit %v: must be > 0", lwhat, l.Limit)
		}
		if p := l.Precision; p != 0 {
			if p < 0 || p%time.Millisecond != 0 || l.WindowSize%p != 0 || l.Kind != 0 || l.Fixed {
				return fmt.Errorf("redis: %s: Precision = %v: must be whole milliseconds dividing WindowSize %v, on a sliding window limit (Kind 0, not Fixed)", lwhat, p, l.WindowSize)
			}
			continue
		}
		return fmt.Errorf("redis: %s: Burst = %v: must be finite and > 0", lwhat, l.Burst)
	}
	return nil
}

// distinctKeys reports whether the keys at positions items are all
// different: a linear search for the few items of a synchronous batch, a
// set for more.
func distinctKeys(keys []string, items []int) bool {
	if len(items) <= 32 {
		for a := 1; a < len(items); a++ {
			for _, b := range items[:a] {
				if keys[items[a]] == keys[b] {
					return false
				}
			}
		}
		return true
	}
	seen := make(map[string]struct{}, len(items))
	for _, i := range items {
		if _, dup := seen[keys[i]]; dup {
			return false
		}
		seen[keys[i]] = struct{}{}
	}
	return true
}

func formatFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// floatMemo formats floats, reusing the last string for the same value.
type floatMemo struct {
	bits uint64
	s    string
}

func (m *floatMemo) format(v float64) string {
	if b := math.Float64bits(v); b != m.bits || m.s == "" {
		m.bits, m.s = b, formatFloat(v)
	}
	return m.s
}
