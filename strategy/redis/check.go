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
// current window from the check's Now, and strategy.BucketFits for a
// bucket limit (Kind != 0: the bucket (Key, Kind, WindowSize), refilling
// Limit per WindowSize up to Burst), at Now; Redis computes both as the
// node does, bit for bit. A passing check adds Cost once to the current
// window of each distinct size of its window limits and, when Cost > 0, to
// each of its distinct buckets (strategy.BucketAdd at Now).
//
// When (node, seq) was already applied in a check's shard, that check
// counts nothing and is returned not allowed, with the current totals and
// buckets. Checks share lane records with PushDiffs: a node numbers its
// pushes and checks from one sequence, or uses different node names for
// them.
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
	lims := s.checkHashes(gr.gs, checks, nlim)
	sq := any(seqArg(seq))
	for _, g := range gr.gs {
		lims = s.encodeCheck(g, node, sq, checks, lims, &strs)
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

// limitHashes are the hash numbers, in its group, of the current and the
// previous window of a check's window limit, or the bucket number of a
// bucket limit.
type limitHashes struct{ cur, prev, bucket int }

// checkHashes gives each group the hashes of its checks' windows, with
// the TTL of each (the longest any check asks), and its checks' buckets,
// and returns the hash or bucket numbers of every limit, in the order of
// the groups' items.
func (s *Store) checkHashes(gs []*group, checks []strategy.Check, nlim int) []limitHashes {
	lims := make([]limitHashes, 0, nlim)
	for _, g := range gs {
		for _, i := range g.items {
			c := &checks[i]
			now := c.Now.UnixMilli()
			for _, l := range c.Limits {
				size := l.WindowSize.Milliseconds()
				if l.Kind != 0 {
					lims = append(lims, limitHashes{bucket: g.bucket(bucketRef{c.Key, l.Kind, size})})
					continue
				}
				start := strategy.WindowStart(c.Now, l.WindowSize).UnixMilli()
				cur, added := g.hash(window{size, start})
				if added {
					g.ttls = append(g.ttls, 0)
				}
				g.ttls[cur-1] = max(g.ttls[cur-1], s.windowTTL(start, size, size, now))
				prev, added := g.hash(window{size, start - size})
				if added {
					g.ttls = append(g.ttls, s.windowTTL(start-size, size, size, now))
				}
				lims = append(lims, limitHashes{cur: cur, prev: prev})
			}
		}
	}
	return lims
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
// limits' hash numbers start lims, and returns the rest of lims.
func (s *Store) encodeCheck(g *group, node string, seq any, checks []strategy.Check, lims []limitHashes, strs *checkStrings) []limitHashes {
	s.setKeys(g, node)
	// Distinct keys of one window limit each: check.lua skips its value
	// cache.
	simple := len(g.bkeys) == 0 && distinctKeys(strs.fields, g.items)
	for _, i := range g.items {
		simple = simple && len(checks[i].Limits) == 1
	}
	a := newArgv(seq, s.laneTTL, checkArgs(len(g.wins), len(g.items)))
	a.checkGroup(len(g.keys), simple, g.ttls)
	g.n, g.nout = len(g.items), 0
	for _, i := range g.items {
		c := &checks[i]
		g.nout += 1 + 2*len(c.Limits)
		nb := 0
		for _, l := range c.Limits {
			if l.Kind != 0 {
				nb++
			}
		}
		a.check(&strs.fields[i], strs.format(&strs.costs, c.Cost), len(c.Limits)-nb, nb)
		encodeLimits(&a, g, c, lims[:len(c.Limits)], strs)
		lims = lims[len(c.Limits):]
	}
	g.args = a.done()
	return lims
}

// encodeLimits appends the limits of check c of group g, whose hash or
// bucket numbers are lims: its window limits, then its bucket limits,
// each in order.
func encodeLimits(a *argv, g *group, c *strategy.Check, lims []limitHashes, strs *checkStrings) {
	now := c.Now.UnixMilli()
	n := strs.ints
	for j, l := range c.Limits {
		if l.Kind != 0 {
			continue
		}
		var elapsed *int64 // a fixed window
		if !l.Fixed {
			elapsed = n.intArg(now - strategy.WindowStart(c.Now, l.WindowSize).UnixMilli())
		}
		a.limit(lims[j].cur, lims[j].prev, n.intArg(l.WindowSize.Milliseconds()), elapsed, strs.format(&strs.limits, l.Limit))
		strs.k++ // its second place stays empty
	}
	for j, l := range c.Limits {
		if l.Kind == 0 {
			continue
		}
		rate, burst := strs.format(&strs.limits, l.Limit), strs.format(&strs.bursts, l.Burst)
		a.bucketLimit(len(g.wins)+lims[j].bucket, n.intArg(now), n.intArg(l.WindowSize.Milliseconds()), rate, burst)
	}
}

// checkResults parses the decisions, totals and buckets of the checks from
// the replies of their groups into out: per check, the decision, two
// values per window limit, then two per bucket limit (see check.lua).
func checkResults(gs []*group, checks []strategy.Check, nlim int, out []strategy.CheckResult, op func() string) error {
	totals := make([]strategy.Totals, nlim)
	for _, g := range gs {
		vals := g.res
		k := 0
		for _, i := range g.items {
			c := &checks[i]
			nl := len(c.Limits)
			if k+2*nl >= len(vals) {
				return fmt.Errorf("redis: %s: shard %s: reply of %d values: too short", op(), g.tag, len(vals))
			}
			out[i].Allowed = vals[k] == "1"
			out[i].Totals, totals = totals[:nl:nl], totals[nl:]
			if err := checkResult(&out[i], c, vals[k+1:k+1+2*nl]); err != nil {
				return fmt.Errorf("redis: %s: shard %s: %w", op(), g.tag, err)
			}
			k += 1 + 2*nl
		}
	}
	return nil
}

// checkResult parses the totals and buckets of check c into r from vals,
// two values per limit: its window limits' first, then its bucket limits'.
func checkResult(r *strategy.CheckResult, c *strategy.Check, vals []any) error {
	k := 0
	for j, l := range c.Limits {
		if l.Kind != 0 {
			continue
		}
		var err error
		if r.Totals[j].Current, err = parseCount(vals[k]); err == nil {
			r.Totals[j].Previous, err = parseCount(vals[k+1])
		}
		if err != nil {
			return err
		}
		k += 2
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
		if l.WindowSize > 0 && l.WindowSize%time.Millisecond == 0 && positive(l.Limit) && (l.Kind == 0 || positive(l.Burst)) {
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
