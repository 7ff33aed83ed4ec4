package redis

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesync/ratesync/strategy"
)

// PushDiffs adds each diff of b to its counter, and each bucket diff to its
// bucket (arith.BucketAdd at the diff's At, with no regard to capacity),
// anchored window (arith.AnchoredAdd at At) or log (arith.Log.Add at
// At, in its place among the entries, not trimmed), at most once per
// (b.Node, b.Seq): one push.lua script per namespace shard
// the batch touches, all in one pipelined round trip. A batch whose
// (Node, Seq) was already applied (a retry after a lost reply) counts
// nothing and returns nil. On an error, some shard groups may have been
// applied: a retry with the same (Node, Seq) applies the others only.
func (s *Store) PushDiffs(ctx context.Context, b strategy.Batch) error {
	_, err := s.push(ctx, b, false)
	return err
}

// PushAndCount applies b like PushDiffs and returns, for each diff in
// order (bucket diffs have none), its key's count in the diff's window and
// in the window before it, right after that diff: one round trip. When
// (b.Node, b.Seq) was already applied, it applies nothing and returns the
// current counts.
func (s *Store) PushAndCount(ctx context.Context, b strategy.Batch) ([]strategy.Totals, error) {
	return s.push(ctx, b, true)
}

// group is the part of a batch (or of a set of checks) that falls in one
// namespace shard: one script call.
type group struct {
	ns    string
	shard int
	tag   string
	keys  []string       // KEYS: lane record, window hashes (push count mode: then the previous windows not among them), buckets
	wins  []window       // window of each hash, parallel to keys[1:]
	index map[window]int // window -> hash number h (1-based, keys[h]), once wins outgrows a linear search
	runs  []run          // push: diffs by hash, in the order the script applies them
	items []int          // check: the checks of the group, in order
	ttls  []int64        // TTL of each hash, ms, parallel to wins (passed by pointer: no boxing)
	spans []int64        // push: the longest Diff.Span (ms) of each hash's diffs, parallel to wins; nil while no diff has one above its size
	args  argv           // push: ARGV of a script running this group alone
	n     int            // diffs, bucket diffs or checks
	nout  int            // values the group adds to the script's reply
	res   []any          // the group's part of the reply

	// check: its lane record, its other keys and arguments in those of its
	// call (checkCall.keys[klo:khi], checkCall.args[lo:hi]), and where its
	// checks' plan numbers start in checkCall.pns
	lane                 string
	klo, khi, lo, hi, c0 int
	how                  byte // how check.lua runs it (checkCall.how)

	bkeys  []bucketRef       // buckets, numbered 1.. (keys after the window hashes)
	bindex map[bucketRef]int // bucket -> its number, once bkeys outgrows a linear search
	bdiffs []bucketUse       // push: the group's bucket diffs, in batch order
}

type window struct{ size, start int64 }

// run is a sequence of diffs going to one hash.
type run struct {
	h   int
	idx []int // positions in the batch
}

// linearMax is how many groups or windows are searched linearly before a
// map is built: batches of synchronous decisions touch few of each.
const linearMax = 16

// hash returns the hash number of w in g, adding it.
func (g *group) hash(w window) (int, bool) {
	if g.index == nil {
		for i, x := range g.wins {
			if x == w {
				return i + 1, false
			}
		}
		if len(g.wins) < linearMax {
			g.wins = append(g.wins, w)
			return len(g.wins), true
		}
		g.index = make(map[window]int, 2*len(g.wins))
		for i, x := range g.wins {
			g.index[x] = i + 1
		}
	}
	if h, ok := g.index[w]; ok {
		return h, false
	}
	g.wins = append(g.wins, w)
	h := len(g.wins)
	g.index[w] = h
	return h, true
}

type shardID struct {
	ns    string
	shard int
}

// grouper collects the groups of one call, in the order of first use.
type grouper struct {
	shards int
	gs     []*group
	index  map[shardID]*group // once gs outgrows a linear search
	chunk  []group            // where new groups are made, a few at a time
}

// add returns a new group of shard of ns.
func (gr *grouper) add(ns string, shard int) *group {
	if len(gr.chunk) == cap(gr.chunk) {
		gr.chunk = make([]group, 0, min(2*max(cap(gr.chunk), 1), linearMax))
	}
	gr.chunk = append(gr.chunk, group{ns: ns, shard: shard})
	g := &gr.chunk[len(gr.chunk)-1]
	gr.gs = append(gr.gs, g)
	return g
}

// of returns the group of key's shard of namespace ns, adding it.
func (gr *grouper) of(ns, key string) *group {
	shard := shardOf(key, gr.shards)
	if gr.index == nil {
		for _, g := range gr.gs {
			if g.shard == shard && g.ns == ns {
				return g
			}
		}
		if len(gr.gs) < linearMax {
			return gr.add(ns, shard)
		}
		gr.index = make(map[shardID]*group, 2*len(gr.gs))
		for _, g := range gr.gs {
			gr.index[shardID{g.ns, g.shard}] = g
		}
	}
	id := shardID{ns, shard}
	if g := gr.index[id]; g != nil {
		return g
	}
	g := gr.add(ns, shard)
	gr.index[id] = g
	return g
}

// groups returns the shard groups of diffs and bucket diffs, in the order
// of first use, with their runs: in push mode one run per hash, so that the
// script gets each field and value with no per-diff hash number; in count
// mode the diffs in batch order, since a diff's totals include the diffs
// before it. A group is one script call and is never split: the seq record
// of a shard must change with all of its increments.
func (s *Store) groups(diffs []strategy.Diff, buckets []strategy.BucketDiff, count bool) []*group {
	gr := grouper{shards: s.cfg.Shards}
	for i, d := range diffs {
		g := gr.of(d.Namespace, d.Key)
		h, added := g.hash(window{d.WindowSize.Milliseconds(), d.WindowStart.UnixMilli()})
		if d.Span > d.WindowSize {
			g.spans = append(g.spans, make([]int64, len(g.wins)-len(g.spans))...)
			g.spans[h-1] = max(g.spans[h-1], d.Span.Milliseconds())
		}
		switch {
		case !count && added:
			g.runs = append(g.runs, run{h: h}) // push mode: one run per hash, h == len(runs)
			fallthrough
		case !count:
			g.runs[h-1].idx = append(g.runs[h-1].idx, i)
		case len(g.runs) == 0 || g.runs[len(g.runs)-1].h != h:
			g.runs = append(g.runs, run{h: h, idx: []int{i}}) // count mode: keep the batch order
		default:
			g.runs[len(g.runs)-1].idx = append(g.runs[len(g.runs)-1].idx, i)
		}
	}
	for i, d := range buckets {
		g := gr.of(d.Namespace, d.Key)
		g.bdiffs = append(g.bdiffs, bucketUse{i, g.keyed(d.Key, d.Kind, d.Window.Milliseconds())})
	}
	return gr.gs
}

// push applies b, in one round trip, and with count returns its totals.
func (s *Store) push(ctx context.Context, b strategy.Batch, count bool) ([]strategy.Totals, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := validDiffs(b); err != nil {
		return nil, err
	}
	if err := validBuckets(b); err != nil {
		return nil, err
	}
	if len(b.Diffs)+len(b.Buckets) == 0 {
		if count {
			return []strategy.Totals{}, nil
		}
		return nil, nil
	}
	ba := newBatchArgs(b)
	gs := s.groups(b.Diffs, b.Buckets, count)
	now := time.Now().UnixMilli()
	seq := any(seqArg(b.Seq))
	for _, g := range gs {
		s.encodePush(g, b.Node, seq, ba, count, now)
	}
	op := func() string {
		if len(b.Buckets) == 0 {
			return fmt.Sprintf("push batch %d of node %q (%d diffs)", b.Seq, b.Node, len(b.Diffs))
		}
		return fmt.Sprintf("push batch %d of node %q (%d diffs, %d bucket diffs)", b.Seq, b.Node, len(b.Diffs), len(b.Buckets))
	}
	err := s.call(ctx, op, func(ctx context.Context) error { return s.runScript(ctx, pushScript, gs, s.invocations) })
	if err != nil || !count {
		return nil, err
	}
	return pushTotals(gs, len(b.Diffs), op)
}

// validDiffs checks that every diff of b has a finite value and a window
// size of whole milliseconds.
func validDiffs(b strategy.Batch) error {
	for i, d := range b.Diffs {
		if math.IsNaN(d.Value) || math.IsInf(d.Value, 0) || d.WindowSize <= 0 || d.WindowSize%time.Millisecond != 0 {
			what := fmt.Sprintf("batch %d of node %q: diff %d (key %s)", b.Seq, b.Node, i, quote(d.Key))
			if err := checkFinite(what, "Value", d.Value); err != nil {
				return err
			}
			return checkSize(what, d.WindowSize)
		}
	}
	return nil
}

// diffStrings returns the field and the formatted value of each diff, as
// the scripts get them. They live in slices of this call, never in the
// caller's diffs: the exchange may outlive the call (see call). The values
// share one string.
func diffStrings(diffs []strategy.Diff) (fields, values []string) {
	n := len(diffs)
	strs := make([]string, 2*n)
	fields, values = strs[:n], strs[n:]
	var offBuf [33]int
	offs := offBuf[:]
	if n+1 > len(offBuf) {
		offs = make([]int, n+1)
	}
	buf := make([]byte, 0, 4*n)
	for i, d := range diffs {
		fields[i] = d.Key
		buf = strconv.AppendFloat(buf, d.Value, 'g', -1, 64)
		offs[i+1] = len(buf)
	}
	all := string(buf)
	for i := range values {
		values[i] = all[offs[i]:offs[i+1]]
	}
	return fields, values
}

// batchArgs holds what the scripts get of a batch by pointer (see argv):
// the diffs' fields and values (diffStrings) and the numbers of its
// bucket diffs, in slices of the call.
type batchArgs struct {
	fields, values []string
	buckets        []strategy.BucketDiff // the caller's, read while encoding only
	nums           *numArgs              // at and window (ms), cost and rate of each bucket diff
}

func newBatchArgs(b strategy.Batch) *batchArgs {
	fields, values := diffStrings(b.Diffs)
	return &batchArgs{fields: fields, values: values, buckets: b.Buckets, nums: newNumArgs(2 * len(b.Buckets))}
}

// encodePush sets the keys, TTLs and ARGV of push group g of node's batch:
// with count, each run also names the hash of its previous window (added
// to g's hashes when the batch has none in it), and the script returns two
// values per diff. now is the time of the TTLs, in ms.
func (s *Store) encodePush(g *group, node string, seq any, ba *batchArgs, count bool, now int64) {
	m := len(g.wins)
	mode := pushOnly
	var prev []int // count mode: hash number of the window before each, a hash of the diffs or added after them
	if count {
		mode = countDistinct
		if !distinctKeys(ba.fields, g.diffs()) {
			mode = countAny
		}
		prev = make([]int, m)
		for k, w := range g.wins[:m] {
			prev[k], _ = g.hash(window{w.size, w.start - w.size})
		}
	}
	s.setKeys(g, node)
	g.ttls = make([]int64, m)
	for k, w := range g.wins[:m] {
		span := w.size
		if k < len(g.spans) {
			span = max(span, g.spans[k])
		}
		g.ttls[k] = s.windowTTL(w.start, w.size, span, now)
	}
	a := newArgv(seq, s.laneTTL, pushArgs(m, len(g.bdiffs), g.runs))
	a.pushGroup(mode, len(g.keys), len(g.bdiffs), g.ttls, g.spans)
	for _, u := range g.bdiffs {
		d, n := &ba.buckets[u.item], ba.nums
		a.keyedDiff(keyedType(d.Kind), len(g.wins)+u.b, n.intArg(d.At), n.floatArg(d.Cost), n.intArg(d.Window.Milliseconds()), n.floatArg(d.Rate))
	}
	g.n = 0
	for _, r := range g.runs {
		if count {
			a.countRun(r.h, prev[r.h-1], len(r.idx))
		} else {
			a.pushRun(r.h, len(r.idx))
		}
		for _, i := range r.idx {
			a.diff(&ba.fields[i], &ba.values[i])
		}
		g.n += len(r.idx)
	}
	g.args = a.done()
	if count {
		g.nout = 2 * g.n
	}
	g.n += len(g.bdiffs)
}

// diffs returns the positions of g's diffs in the batch, in the order of
// its runs.
func (g *group) diffs() []int {
	if len(g.runs) == 1 {
		return g.runs[0].idx
	}
	var items []int
	for _, r := range g.runs {
		items = append(items, r.idx...)
	}
	return items
}

// pushTotals parses the totals of the n diffs of a batch from the replies
// of its groups.
func pushTotals(gs []*group, n int, op func() string) ([]strategy.Totals, error) {
	totals := make([]strategy.Totals, n)
	for _, g := range gs {
		vals := g.res
		k := 0
		for _, r := range g.runs {
			for _, i := range r.idx {
				if k+1 >= len(vals) {
					return nil, fmt.Errorf("redis: %s: shard %s: reply of %d values: want 2 per diff", op(), g.tag, len(vals))
				}
				var err error
				if totals[i].Current, err = parseCount(vals[k]); err == nil {
					totals[i].Previous, err = parseCount(vals[k+1])
				}
				if err != nil {
					return nil, fmt.Errorf("redis: %s: shard %s: %w", op(), g.tag, err)
				}
				k += 2
			}
		}
	}
	return totals, nil
}

// mergeMax bounds the checks or diffs of a script that runs several
// groups (see runScript): a script runs alone in Redis.
const mergeMax = 256

// invocation is one script call: one group, or on a client of one server several
// (see runScript).
type invocation struct {
	gs   []*group
	keys []string
	args argv
	cmd  []any // the whole command, when its encoder made it (checkCall.invocations); else EVALSHA of keys and args
}

// runScript runs sc for the groups, in one round trip, and stores each
// group's part of the replies in it. Each script call runs one group, or
// on a client of one server (s.merge: standalone, Sentinel) consecutive
// groups of up to mergeMax checks or diffs in all: every group is still
// applied at most once by its own lane record, and the one script saves
// Redis the fixed cost of a call per group (a batch of 32 decisions on
// distinct keys falls in about 14 of the 16 default shards). Scripts of
// several groups use keys of several Cluster slots; a server that refuses
// them (CROSSSLOT: a proxy of a sharded deployment) turns merging off for
// the store, and the groups are sent again one per script (nothing of a
// refused script ran). Calls are pipelined. Calls that get NOSCRIPT are
// sent again once the scripts are reloaded; every other error fails the
// call (after all replies are read: each call's result is checked, not
// only the first).
func (s *Store) runScript(ctx context.Context, sc *script, gs []*group, invocations func(gs []*group, merge bool) []*invocation) error {
	pending := invocations(gs, s.merge.Load())
	for attempt := 0; ; attempt++ {
		cmds := make([]*goredis.Cmd, len(pending))
		if len(pending) == 1 {
			cmds[0] = s.eval(ctx, s.c, sc, pending[0])
		} else {
			pipe := s.c.Pipeline()
			for i, v := range pending {
				cmds[i] = s.eval(ctx, pipe, sc, v)
			}
			_, _ = pipe.Exec(ctx) // errors are read per command below
		}
		var (
			retry  []*invocation
			failed int
			first  error
			reload bool
		)
		for i, cmd := range cmds {
			v := pending[i]
			err := cmd.Err()
			switch {
			case err == nil:
				res, _ := cmd.Val().([]any)
				for _, g := range v.gs {
					n := min(g.nout, len(res))
					g.res, res = res[:n:n], res[n:]
				}
			case isNoScript(err) && attempt == 0:
				retry, reload = append(retry, v), true
			case len(v.gs) > 1 && goredis.HasErrorPrefix(err, "CROSSSLOT") && attempt == 0:
				s.merge.Store(false)
				retry = append(retry, invocations(v.gs, false)...)
			default:
				failed++
				if first == nil {
					first = fmt.Errorf("shard %s: %w", v.name(), err)
				}
			}
		}
		if first != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if len(pending) > 1 {
				return fmt.Errorf("%d of %d script calls failed, first: %w", failed, len(pending), first)
			}
			return first
		}
		if len(retry) == 0 {
			return nil
		}
		if reload {
			if err := s.loadScripts(ctx); err != nil {
				return err
			}
		}
		pending = retry
	}
}

// evaler is a client or pipeline that runs scripts.
type evaler interface {
	Do(ctx context.Context, args ...any) *goredis.Cmd
	EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *goredis.Cmd
}

// eval sends v, a call of sc, on c.
func (s *Store) eval(ctx context.Context, c evaler, sc *script, v *invocation) *goredis.Cmd {
	if v.cmd != nil {
		return c.Do(ctx, v.cmd...)
	}
	return c.EvalSha(ctx, sc.sha, v.keys, v.args...)
}

// invocations returns the script calls that run gs, merging consecutive
// groups when merge is set.
func (s *Store) invocations(gs []*group, merge bool) []*invocation {
	vs := make([]*invocation, 0, len(gs))
	for k := 0; k < len(gs); {
		j, n, nkeys, nargs := k+1, gs[k].n, len(gs[k].keys), len(gs[k].args)
		for merge && j < len(gs) && n+gs[j].n <= mergeMax {
			n, nkeys, nargs = n+gs[j].n, nkeys+len(gs[j].keys), nargs+len(gs[j].args)-2
			j++
		}
		v := &invocation{gs: gs[k:j:j], keys: gs[k].keys, args: gs[k].args}
		if j > k+1 {
			v.keys, v.args = make([]string, 0, nkeys), gs[k].args.joined(nargs) // seq, lane TTL: the same in every group
			for _, g := range v.gs {
				v.keys = append(v.keys, g.keys...)
				v.args = v.args.join(g.args)
			}
		}
		vs = append(vs, v)
		k = j
	}
	return vs
}

// name names the shards of v in errors.
func (v *invocation) name() string {
	if len(v.gs) == 1 {
		return v.gs[0].tag
	}
	return fmt.Sprintf("%s (and %d more)", v.gs[0].tag, len(v.gs)-1)
}

// parseCount parses a count as a script or HMGET returns it: a decimal
// string, "" or nil for none.
func parseCount(v any) (float64, error) {
	switch v := v.(type) {
	case nil:
		return 0, nil
	case string:
		if v == "" {
			return 0, nil
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) { // out of range: ±Inf or 0, as a float64 sum would be
			return 0, fmt.Errorf("count %q: %w", v, err)
		}
		return f, nil
	case int64:
		return float64(v), nil
	}
	return 0, fmt.Errorf("count of type %T: want a string", v)
}
