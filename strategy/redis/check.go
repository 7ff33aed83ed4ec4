package redis

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratesync/ratesync/internal/arith"
	"github.com/ratesync/ratesync/strategy"
)

// CheckAndCount decides and counts each check in the store, at most once
// per (node, seq): the checks of one namespace shard (so every check of one
// key) run in one check.lua script, in order, atomically, and on a client
// of one server the shards of the call (up to mergeMax checks) share that
// script; the scripts run in one pipelined round trip. A check passes when every limit lets it:
// arith.WindowFits for a window limit, with the time elapsed in the
// current window from the check's Now (arith.SpanFits over the Depth
// sub-windows of a limit with a Precision), and arith.BucketFits for a
// bucket limit (the bucket (Key, Kind, WindowSize), refilling Limit per
// WindowSize up to Burst), arith.AnchoredFits for an anchored window
// and arith.LogFits for a log (trimmed at Now first), at Now; Redis
// computes them as the node does, bit for bit. A passing check adds Cost
// once to the current window of each distinct size (Sub) of its window
// limits and, when Cost > 0, to each of its distinct buckets, anchored
// windows and logs (arith.BucketAdd, AnchoredAdd, Log.Add at Now). A
// precision limit's result holds all its Depth counts in Windows; a log's
// state holds, for a check that did not pass and that the log refuses,
// the instant it fits (arith.RetryAt).
//
// Each script records seq with the decisions of its checks, in the same
// atomic step, in the lane record of its first shard, which stands for
// every shard of the script (see the package documentation). When seq is
// the last one that record holds and a call applied it (a retry of the
// same call, the same checks in the same order: its reply was lost, or
// go-redis resent the script), the checks count nothing again and are
// returned as decided then, with the current totals and keyed states.
// When seq is below the last one applied there (its decisions are no
// longer kept), or was applied by a push (whose record holds the seq
// alone), the checks count nothing and are returned not allowed, with
// the current totals and keyed states. Checks share lane records with
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
	cc := s.encodeChecks(node, seq, checks)
	gs := cc.gs
	op := func() string { return fmt.Sprintf("check %d requests of node %q, seq %d", len(checks), node, seq) }
	if err := s.call(ctx, op, func(ctx context.Context) error { return s.runScript(ctx, checkScript, gs, cc.invocations) }); err != nil {
		return nil, err
	}
	if err := checkResults(gs, checks, nlim, out, op); err != nil {
		return nil, err
	}
	return out, nil
}

// checkCall is a CheckAndCount call encoded as check.lua reads it: the
// windows and plans of the call, which every group shares, the groups'
// heads and the checks' plans as two strings of bytes, then each group's
// checks. Its values live in slices of the call, never in the caller's
// checks: the exchange may outlive the call (see call).
type checkCall struct {
	gs []*group

	wins  []window       // the call's windows, numbered 1.. in this order: every group has the hash of each
	ttls  []int64        // TTL (ms) of each window's hash: the longest a check of the call counting in it asks (0: none counts in it)
	spans []bool         // each window is read over a span longer than its size (a precision limit counts in it)
	index map[window]int // window -> its number, once wins outgrows a linear search

	plans []plan
	width int    // bytes per plan number in planBytes: 1, or 2 past 255 plans
	heads string // 5 bytes per group: how check.lua runs it ('s', 'r' or 'g': see how), its checks, its keys (2 bytes each, big-endian)
	pns   string // each check's plan number, width bytes each (big-endian), group after group

	args argv     // seq, lane TTL, windows, plans (the head of them), heads, pns, then the groups' checks (each g.lo:g.hi)
	buf  struct { // room for the windows of most calls, and their numbers
		wins  [4]window
		ttls  [4]int64
		spans [4]bool
		ints  [8]int64
	}
	head  int      // len of the head of args
	keys  []string // the first group's lane record, then the groups' keys (each g.klo:g.khi)
	nums  *numArgs // numbers of args that go by pointer
	field []string // each check's key, the field it names
	costs floatMemo
	lims  floatMemo
}

// plan is what checks of one call that share their cost, clock and limits
// share in check.lua: their plan number (1..) stands for all three.
type plan struct {
	now    int64 // ms
	cost   float64
	limits []strategy.CheckLimit
	simple int // the number of the current window of its one limit, a plain window limit (Depth 2); 0 for any other plan
}

// planMax bounds the plans a check's plan is looked up among: the newest
// ones. A call with more distinct plans sends some twice.
const planMax = 32

// encodeChecks encodes the checks of node's call seq: groups by namespace
// shard, the windows and plans they share, each group's keys and
// arguments, and the reply each group adds (g.nout).
func (s *Store) encodeChecks(node string, seq uint64, checks []strategy.Check) *checkCall {
	cc := &checkCall{}
	cc.wins, cc.ttls, cc.spans = cc.buf.wins[:0], cc.buf.ttls[:0], cc.buf.spans[:0]
	cc.nums = &numArgs{ints: cc.buf.ints[:0]}
	pl, nargs := cc.group(s, checks)
	cc.encodeHead(seq, s.laneTTL, nargs)
	cc.encodeKeys(s, node, checks, pl)
	cc.encodeGroups(checks)
	return cc
}

// group sorts the checks into the shard groups a call touches, numbers
// each check's plan (pl, by check) and picks each group's way through the
// script; nargs is the number of per-check arguments (a field, and a key
// position per keyed limit).
func (cc *checkCall) group(s *Store, checks []strategy.Check) (pl []int, nargs int) {
	n := len(checks)
	gr := grouper{shards: s.cfg.Shards}
	ints := make([]int, 3*n) // each check's plan number, its group's number, then the groups' items
	pl, gi, items := ints[:n], ints[n:2*n], ints[2*n:]
	cc.field = make([]string, n)
	for i := range checks {
		c := &checks[i]
		cc.field[i] = c.Key
		g := gr.of(c.Namespace, c.Key)
		g.n++
		gi[i] = slices.Index(gr.gs, g) // gr.gs is short: the shards a call touches
		pl[i] = cc.plan(s, c)
		nargs++
		for _, l := range c.Limits {
			if l.Kind != 0 {
				nargs++
			}
		}
	}
	cc.gs = gr.gs
	off := 0
	for _, g := range cc.gs {
		g.items, off = items[off:off:off+g.n], off+g.n
	}
	for i := range checks {
		g := cc.gs[gi[i]]
		g.items = append(g.items, i)
	}
	for _, g := range cc.gs {
		g.how = cc.how(g, pl)
	}
	cc.fastFirst(pl)
	return pl, nargs
}

// encodeHead starts the call's arguments: the seq, the lane TTL, the
// windows (their TTLs and span flags), and the plans' numbers in one
// string.
func (cc *checkCall) encodeHead(seq uint64, laneTTL any, nargs int) {
	head := 3 + 2*len(cc.wins) + 2 + len(cc.plans) + nkeyed(cc.plans)
	cc.args = make(argv, 0, head+2+nargs)
	cc.args = append(cc.args, seqArg(seq), laneTTL, len(cc.wins))
	for w := range cc.wins {
		flag := "0"
		if cc.spans[w] {
			flag = "1"
		}
		cc.args = append(cc.args, &cc.ttls[w], flag)
	}
	cc.args = append(cc.args, len(cc.plans), nil) // then the plans' numbers, set below
	nums := make([]byte, 0, 8*(4+8)*len(cc.plans))
	for k := range cc.plans {
		nums = cc.encodePlan(nums, &cc.plans[k])
	}
	cc.args[len(cc.args)-1-len(cc.plans)-nkeyed(cc.plans)] = string(nums)
	cc.head = len(cc.args)
	cc.width = 1
	if len(cc.plans) > 255 {
		cc.width = 2
	}
}

// encodeKeys makes the call's keys, in one string: each group's lane
// record, then its windows' hashes and keyed keys; and the groups' heads
// and the checks' plan numbers (pl), two arguments.
func (cc *checkCall) encodeKeys(s *Store, node string, checks []strategy.Check, pl []int) {
	klen, nkeys := 0, 1
	for _, g := range cc.gs {
		g.wins = cc.wins
		for _, i := range g.items {
			for _, l := range checks[i].Limits {
				if l.Kind != 0 {
					g.keyed(checks[i].Key, l.Kind, l.WindowSize.Milliseconds())
				}
			}
		}
		klen += s.keysLen(g, node)
		nkeys += len(cc.wins) + len(g.bkeys)
	}
	var b strings.Builder
	b.Grow(klen)
	ends := make([]int, 0, nkeys+len(cc.gs))
	for _, g := range cc.gs {
		ends = s.appendKeys(&b, ends, g, node)
	}
	all := b.String()
	cc.keys = make([]string, 1, nkeys)
	heads := make([]byte, 0, 5*len(cc.gs)+cc.width*len(checks))
	k, start := 0, 0
	for _, g := range cc.gs {
		g.lane = all[start:ends[k]]
		start, k = ends[k], k+1
		g.klo = len(cc.keys)
		for range len(cc.wins) + len(g.bkeys) {
			cc.keys = append(cc.keys, all[start:ends[k]])
			start, k = ends[k], k+1
		}
		g.khi = len(cc.keys)
		nk := g.khi - g.klo
		heads = append(heads, g.how, byte(len(g.items)>>8), byte(len(g.items)), byte(nk>>8), byte(nk))
	}
	cc.keys[0] = cc.gs[0].lane
	for _, g := range cc.gs {
		g.c0 = len(heads) - 5*len(cc.gs)
		for _, i := range g.items {
			if cc.width == 2 {
				heads = append(heads, byte(pl[i]>>8))
			}
			heads = append(heads, byte(pl[i]))
		}
	}
	hs := string(heads)
	cc.heads, cc.pns = hs[:5*len(cc.gs)], hs[5*len(cc.gs):]
	cc.args = append(cc.args, cc.heads, cc.pns)
}

// encodeGroups adds each group's per-check arguments: the check's field,
// and for each keyed limit its key's position.
func (cc *checkCall) encodeGroups(checks []strategy.Check) {
	for _, g := range cc.gs {
		g.lo = len(cc.args)
		g.nout = 0
		for _, i := range g.items {
			c := &checks[i]
			g.nout += replyLen(c)
			cc.args = append(cc.args, &cc.field[i])
			for _, l := range c.Limits {
				if l.Kind != 0 {
					cc.args = append(cc.args, len(cc.wins)+g.keyed(c.Key, l.Kind, l.WindowSize.Milliseconds()))
				}
			}
		}
		g.hi = len(cc.args)
	}
}

// fastMax is the most checks a group check.lua's fast loop runs may have
// (fastMax there).
const fastMax = 4

// fastFirst puts first, in their order, the groups check.lua's fast loop
// runs: up to fastMax checks, each with one plain window limit (Depth 2),
// all on the same window, and an integer cost below 1e6. The loop runs
// them before the script makes the functions other groups need, and stops
// at the first other group. The order is the checks': a call sent again
// has the same groups in the same order, led by the same one.
func (cc *checkCall) fastFirst(pl []int) {
	fast := func(g *group) bool {
		if len(g.items) > fastMax || g.how == 'g' {
			return false
		}
		for _, i := range g.items {
			if c := cc.plans[pl[i]-1].cost; c != math.Trunc(c) || c >= 1e6 {
				return false
			}
		}
		return true
	}
	var others []*group
	gs := make([]*group, 0, len(cc.gs))
	for _, g := range cc.gs {
		if fast(g) {
			gs = append(gs, g)
		} else {
			others = append(others, g)
		}
	}
	if len(others) > 0 && len(gs) > 0 {
		cc.gs = append(gs, others...)
	}
}

// nkeyed returns the number of keyed limits of the plans.
func nkeyed(plans []plan) int {
	n := 0
	for _, p := range plans {
		for _, l := range p.limits {
			if l.Kind != 0 {
				n++
			}
		}
	}
	return n
}

// how returns how check.lua runs group g, whose checks have the plans pl:
// 's' (its simple path) when each check has one plain window limit, all
// on the same windows, and they name distinct fields, 'r' when they may
// name a field twice, else 'g' (its general path).
func (cc *checkCall) how(g *group, pl []int) byte {
	w := cc.plans[pl[g.items[0]]-1].simple
	for _, i := range g.items {
		if w == 0 || cc.plans[pl[i]-1].simple != w {
			return 'g'
		}
	}
	if !distinctKeys(cc.field, g.items) {
		return 'r'
	}
	return 's'
}

// window returns the number of window w of the call, adding it.
func (cc *checkCall) window(w window) int {
	if cc.index == nil {
		for i, x := range cc.wins {
			if x == w {
				return i + 1
			}
		}
		if len(cc.wins) < linearMax {
			cc.wins, cc.ttls, cc.spans = append(cc.wins, w), append(cc.ttls, 0), append(cc.spans, false)
			return len(cc.wins)
		}
		cc.index = make(map[window]int, 2*len(cc.wins))
		for i, x := range cc.wins {
			cc.index[x] = i + 1
		}
	}
	if h, ok := cc.index[w]; ok {
		return h
	}
	cc.wins, cc.ttls, cc.spans = append(cc.wins, w), append(cc.ttls, 0), append(cc.spans, false)
	cc.index[w] = len(cc.wins)
	return len(cc.wins)
}

// plan returns the plan number of check c, adding its plan, and the
// windows its window limits read, with the TTL and span each asks of its
// current window.
//
// A window limit reads Depth windows of size Sub: its current and previous
// windows, or the sub-windows of a precision limit. It counts in the
// current one, which lasts until the limit's span (WindowSize) slides past
// it.
func (cc *checkCall) plan(s *Store, c *strategy.Check) int {
	now := c.Now.UnixMilli()
	for _, l := range c.Limits {
		if l.Kind != 0 {
			continue
		}
		size := l.Sub().Milliseconds()
		start := arith.WindowStart(c.Now, l.Sub()).UnixMilli()
		for back := range l.Depth() {
			cc.window(window{size, start - int64(back)*size})
		}
		cur := cc.window(window{size, start}) - 1
		cc.ttls[cur] = max(cc.ttls[cur], s.windowTTL(start, size, l.WindowSize.Milliseconds(), now))
		cc.spans[cur] = cc.spans[cur] || l.WindowSize.Milliseconds() > size
	}
	for k := len(cc.plans) - 1; k >= max(0, len(cc.plans)-planMax); k-- {
		p := &cc.plans[k]
		if p.now == now && math.Float64bits(p.cost) == math.Float64bits(c.Cost) && slices.Equal(p.limits, c.Limits) {
			return k + 1
		}
	}
	p := plan{now: now, cost: c.Cost, limits: c.Limits}
	if len(c.Limits) == 1 && c.Limits[0].Kind == 0 && c.Limits[0].Depth() == 2 {
		l := &c.Limits[0]
		p.simple = cc.window(window{l.Sub().Milliseconds(), arith.WindowStart(c.Now, l.Sub()).UnixMilli()})
	}
	cc.plans = append(cc.plans, p)
	return len(cc.plans)
}

// encodePlan appends the numbers of plan p to nums, as big-endian
// doubles, and its strings to the head of the call's arguments, and
// returns nums. Numbers: cost, now, its number of window limits and of
// keyed limits, then each window limit (d, the numbers of its d windows,
// current first, their size, the ms elapsed in the current one or -1 for
// a fixed window, the limit), then each keyed limit (type: 1 bucket, 2
// anchored window, 3 log; window, limit or rate, a bucket's burst or 0).
// Strings: the cost, then each keyed limit's limit, as the scripts add
// and store them.
func (cc *checkCall) encodePlan(nums []byte, p *plan) []byte {
	put := func(v float64) { nums = binary.BigEndian.AppendUint64(nums, math.Float64bits(v)) }
	nb := 0
	for _, l := range p.limits {
		if l.Kind != 0 {
			nb++
		}
	}
	put(p.cost)
	put(float64(p.now))
	put(float64(len(p.limits) - nb))
	put(float64(nb))
	cc.args = append(cc.args, cc.costs.format(p.cost))
	now := time.UnixMilli(p.now)
	for j := range p.limits {
		l := &p.limits[j]
		if l.Kind != 0 {
			continue
		}
		size := l.Sub().Milliseconds()
		start := arith.WindowStart(now, l.Sub()).UnixMilli()
		d := l.Depth()
		put(float64(d))
		for back := range d {
			put(float64(cc.window(window{size, start - int64(back)*size})))
		}
		put(float64(size))
		if l.Fixed {
			put(-1)
		} else {
			put(float64(p.now - start))
		}
		put(l.Limit)
	}
	for _, l := range p.limits {
		if l.Kind == 0 {
			continue
		}
		t, burst := 1.0, 0.0
		switch {
		case l.Kind == strategy.KindAnchored:
			t = 2
		case l.Kind == strategy.KindLog:
			t = 3
		default:
			burst = l.Burst
		}
		put(t)
		put(float64(l.WindowSize.Milliseconds()))
		put(l.Limit)
		put(burst)
		cc.args = append(cc.args, cc.lims.format(l.Limit))
	}
	return nums
}

// invocations returns the script calls that run gs, groups of this call:
// consecutive groups of up to mergeMax checks in all when merge is set,
// else one each; each call's lane record is its first group's.
func (cc *checkCall) invocations(gs []*group, merge bool) []*invocation {
	vs := make([]*invocation, 0, 1)
	for k := 0; k < len(gs); {
		j, n := k+1, gs[k].n
		for merge && j < len(gs) && n+gs[j].n <= mergeMax {
			n += gs[j].n
			j++
		}
		v := &invocation{gs: gs[k:j:j]}
		first, last := gs[k], gs[j-1]
		keys, args := cc.keys, cc.args
		if first != cc.gs[0] || last != cc.gs[len(cc.gs)-1] {
			keys = make([]string, 0, 1+last.khi-first.klo)
			keys = append(append(keys, first.lane), cc.keys[first.klo:last.khi]...)
			args = make(argv, 0, cc.head+2+last.hi-first.lo)
			args = append(args, cc.args[:cc.head]...)
			k0 := slices.Index(cc.gs, first)
			args = append(args, cc.heads[5*k0:5*(k0+len(v.gs))], cc.pns[first.c0:last.c0+cc.width*last.n])
			args = append(args, cc.args[first.lo:last.hi]...)
		}
		// The command, its keys by pointer (no boxing) but the first: a
		// Cluster client routes by it.
		v.cmd = make([]any, 0, 3+len(keys)+len(args))
		v.cmd = append(v.cmd, "evalsha", checkScript.sha, len(keys), keys[0])
		for i := range keys[1:] {
			v.cmd = append(v.cmd, &keys[1+i])
		}
		v.cmd = append(v.cmd, args...)
		vs = append(vs, v)
		k = j
	}
	return vs
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

// checkResults parses the decisions, totals and keyed states of the checks
// from the replies of their groups into out: per check, the decision (1 or
// 0), the Depth counts of each window limit, then the state of each keyed
// limit (see replyLen and check.lua).
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
			out[i].Allowed = vals[k] == int64(1)
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
