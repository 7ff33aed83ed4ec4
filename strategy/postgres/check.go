package postgres

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/ratesync/ratesync/internal/arith"
	"github.com/ratesync/ratesync/strategy"
)

// checkSQL calls the schema's check function (migrations/001_schema.sql)
// with the checkParams arguments CheckAndCount binds.
func checkSQL(n names) string {
	params := make([]string, checkParams)
	for i := range params {
		params[i] = fmt.Sprintf("$%d", i+1)
	}
	return `SELECT applied, allowed, counts, st_at, st_level, st_retry FROM ` + n.check + `(` + strings.Join(params, ", ") + `)`
}

// checkParams is the number of arguments of the check function.
const checkParams = 31

// group is the state a limit keeps: window counters, a bucket, an anchored
// window or a sliding log. Each but windows has its own table.
type group uint8

const (
	groupWindow group = iota
	groupBucket
	groupAnchored
	groupLog
)

// groupOf returns the group of limits of kind (CheckLimit.Kind): kinds
// other than 0, KindAnchored and KindLog are buckets.
func groupOf(kind uint8) group {
	switch kind {
	case 0:
		return groupWindow
	case strategy.KindAnchored:
		return groupAnchored
	case strategy.KindLog:
		return groupLog
	}
	return groupBucket
}

func checkChecks(node string, checks []strategy.Check) error {
	if err := checkNode(node); err != nil {
		return err
	}
	for i, c := range checks {
		if err := checkNamespace(c.Namespace); err != nil {
			return fmt.Errorf("%w (checks[%d])", err, i)
		}
		if math.IsNaN(c.Cost) || math.IsInf(c.Cost, 0) || c.Cost < 0 {
			return fmt.Errorf("postgres: check of key %q: cost %v: must be finite and >= 0 (checks[%d])", c.Key, c.Cost, i)
		}
		for j, l := range c.Limits {
			if err := checkSize(c.Key, l.WindowSize); err != nil {
				return fmt.Errorf("%w (checks[%d].Limits[%d])", err, i, j)
			}
			if !finitePositive(l.Limit) {
				return fmt.Errorf("postgres: check of key %q: limit %v: must be finite and > 0 (checks[%d].Limits[%d])", c.Key, l.Limit, i, j)
			}
			if groupOf(l.Kind) == groupBucket && !finitePositive(l.Burst) {
				return fmt.Errorf("postgres: check of key %q: bucket kind %d: burst %v: must be finite and > 0 (checks[%d].Limits[%d])", c.Key, l.Kind, l.Burst, i, j)
			}
			if p := l.Precision; p != 0 && (p < 0 || p%time.Millisecond != 0 || l.WindowSize%p != 0 || l.Kind != 0 || l.Fixed) {
				return fmt.Errorf("postgres: check of key %q: precision %v: must be whole milliseconds dividing window %v, on a sliding window limit (checks[%d].Limits[%d])", c.Key, p, l.WindowSize, i, j)
			}
		}
	}
	return nil
}

// CheckAndCount decides and counts checks atomically, at most once per
// (node, seq), in one round trip: a call of the schema's check function.
// The function locks the lane's row (serializing
// calls of one lane, as PushDiffs does), then the buckets, the anchored
// windows and the logs' headers the checks name, then each counter row the
// checks read, each table in the one order pushes lock it in too
// (bucketKey.compare, rowKey.compare), so that no caller deadlocks another,
// creating absent rows as placeholders to lock them. It does so in a few
// set-based statements, whatever the number of checks (per table one lock
// and one read; for counters one per run of previous or of current windows,
// one read; one write each), plus, per check, a statement for each log it
// trims or counts in. Checks need not be sorted by key: all their rows are
// held before the first is decided.
//
// With every row held it decides the checks in order (so each key's checks
// see each other in order), each limit with strategy's arithmetic at the
// check's Now: WindowFits (SpanFits for a precision limit: its Depth
// windows), Level and BucketFits, AnchoredCount and AnchoredFits, a
// log's Trim then LogFits. A passing check's cost, when above 0, is
// counted once in each distinct current window (of size Sub) and once in
// each distinct bucket (BucketAdd), anchored window (AnchoredAdd) and log
// (Log.Add, an entry made or added to); a denied check that a log refuses
// gets the log's RetryAt. The changed rows are written back and
// placeholders nothing was counted in are dropped, and the lane's row
// records seq with the decision of each check.
//
// When (node, seq) was applied before, it counts nothing and returns the
// current state (each check still trims its logs, as the memory store's
// does): when seq is the lane's last and a call set it (a retry of the
// same call, the same checks in the same order, whose reply was lost),
// each check as decided then, allowed or not; when seq is below the
// lane's last (its decisions are no longer kept) or a push set it, every
// check denied.
func (s *Store) CheckAndCount(ctx context.Context, node string, seq uint64, checks []strategy.Check) ([]strategy.CheckResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkChecks(node, checks); err != nil {
		return nil, err
	}
	idx := make(map[rowKey]int) // row -> position, here so that it stays on the stack
	kidx := make(map[bucketKey]int)
	rows := checkRows(checks, idx)
	keyed := checkKeyed(checks, kidx)
	a := newCheckArgs(checks, idx, kidx)
	b, an, g := keyed[groupBucket], keyed[groupAnchored], keyed[groupLog]
	var r checkReply
	err := s.pool.QueryRow(ctx, s.q.check, node, seqParam(seq),
		rows.ns, rows.size, rows.start, rows.key, rows.create,
		b.ns, b.key, b.kind, b.window,
		an.ns, an.key, an.window,
		g.ns, g.key, g.window,
		a.costs, a.counts, a.nows,
		a.kinds, a.refs, a.first, a.sizes, a.limits, a.nrows, a.elapsed, a.fixed, a.caps, a.cws,
		a.wrows,
	).Scan(&r.applied, &r.allowed, &r.counts, &r.at, &r.level, &r.retry)
	if err != nil {
		return nil, dbErr(ctx, fmt.Sprintf("check and count batch %d of node %q (%d checks)", seq, node, len(checks)), err)
	}
	nlim := len(a.limits)
	if len(r.allowed) != len(checks) || len(r.counts) != len(a.wrows) || len(r.at) != nlim || len(r.level) != nlim || len(r.retry) != nlim {
		return nil, fmt.Errorf("postgres: check and count batch %d of node %q: %d results, %d counts and %d states for %d checks, %d windows and %d limits",
			seq, node, len(r.allowed), len(r.counts), len(r.at), len(checks), len(a.wrows), nlim)
	}
	return r.results(checks, a.refs), nil
}

// checkReply is what the function returns: per check whether it passed,
// per window a limit reads its count, and per limit the state of its
// bucket, anchored window or log after its check.
type checkReply struct {
	applied bool
	allowed []bool
	counts  []float64
	at      []int64
	level   []float64
	retry   []int64
}

// results returns the checks' results; refs are the function's l_ref: for
// window limits the position (1-based) of their first window in counts.
func (r *checkReply) results(checks []strategy.Check, refs []int32) []strategy.CheckResult {
	out := make([]strategy.CheckResult, len(checks))
	j := 0
	for i, c := range checks {
		res := &out[i]
		res.Allowed = r.allowed[i]
		res.Totals = make([]strategy.Totals, len(c.Limits))
		for t, l := range c.Limits {
			if l.Kind == 0 {
				off := int(refs[j]) - 1
				res.Totals[t] = strategy.Totals{Current: r.counts[off], Previous: r.counts[off+1]}
				if d := l.Depth(); d > 2 {
					if res.Windows == nil {
						res.Windows = make([][]float64, len(c.Limits))
					}
					res.Windows[t] = slices.Clone(r.counts[off : off+d])
				}
			} else {
				if res.Buckets == nil {
					res.Buckets = make([]strategy.BucketState, len(c.Limits))
				}
				res.Buckets[t] = strategy.BucketState{Key: c.Key, Kind: l.Kind, Window: l.WindowSize, At: r.at[j], Level: r.level[j], RetryAt: r.retry[j]}
			}
			j++
		}
	}
	return out
}

// limitKey is the row of the current window of a check's window limit: of
// size Sub, a precision limit's windows.
func limitKey(c strategy.Check, l strategy.CheckLimit) rowKey {
	size := l.Sub()
	return rowKey{c.Namespace, size.Milliseconds(), arith.WindowStart(c.Now, size).UnixMilli(), c.Key}
}

// checkRowColumns are the rows the checks read, as the function's arrays:
// each once, sorted by primary key, create set for current windows (which
// the function creates, as placeholders, when absent).
type checkRowColumns struct {
	columns
	create []bool
}

// checkRows returns the counter rows the window limits of the checks read
// (each limit's current window and the Depth-1 before it), and sets idx
// (empty) to the position of each in them (1-based: PostgreSQL arrays).
func checkRows(checks []strategy.Check, idx map[rowKey]int) checkRowColumns {
	type row struct {
		k      rowKey
		create bool
	}
	var rows []row
	add := func(k rowKey, create bool) {
		if i, ok := idx[k]; ok {
			rows[i].create = rows[i].create || create
			return
		}
		idx[k] = len(rows)
		rows = append(rows, row{k, create})
	}
	for _, c := range checks {
		for _, l := range c.Limits {
			if l.Kind != 0 {
				continue
			}
			k := limitKey(c, l)
			add(k, true)
			for range l.Depth() - 1 {
				k = k.prev()
				add(k, false)
			}
		}
	}
	slices.SortFunc(rows, func(a, b row) int { return a.k.compare(b.k) })
	r := checkRowColumns{*newColumns(len(rows), false), make([]bool, len(rows))}
	for i, x := range rows {
		idx[x.k] = i + 1
		r.add(x.k)
		r.create[i] = x.create
	}
	return r
}

// limitBucket is the bucket, anchored window or log of a check's limit.
func limitBucket(c strategy.Check, l strategy.CheckLimit) bucketKey {
	return bucketKey{c.Namespace, c.Key, l.Kind, l.WindowSize.Milliseconds()}
}

// checkKeyed returns, per group, the buckets, anchored windows and logs
// the limits of the checks name, each once, sorted by bucketKey.compare,
// and sets kidx (empty) to the position of each in its group (1-based).
func checkKeyed(checks []strategy.Check, kidx map[bucketKey]int) [groupLog + 1]bucketColumns {
	var keys [groupLog + 1][]bucketKey
	for _, c := range checks {
		for _, l := range c.Limits {
			g := groupOf(l.Kind)
			if g == groupWindow {
				continue
			}
			if k := limitBucket(c, l); kidx[k] == 0 {
				kidx[k] = 1 // any position: it is set below
				keys[g] = append(keys[g], k)
			}
		}
	}
	var out [groupLog + 1]bucketColumns
	for g := groupBucket; g <= groupLog; g++ {
		slices.SortFunc(keys[g], bucketKey.compare)
		out[g] = newBucketColumns(len(keys[g]))
		for i, k := range keys[g] {
			kidx[k] = i + 1
			out[g].add(k)
		}
	}
	return out
}

// checkArgs are the checks as the function's arrays: the cost, number of
// limits and Now (ms) of each check, and for each limit in order its kind,
// its reference (l_ref: a position in its group's arrays, or for a window
// limit the position of its first window in wrows), whether it is the
// first of its check to name its current window or keyed state, its
// window (Sub for window limits) and limit, and: for window limits how
// many windows it reads, the ms elapsed in its current window, whether it
// is fixed, and limit * size; for buckets burst * window and
// cost * window. The products are arith.WindowFits' and BucketFits', in
// float64 here (see migrations/001_schema.sql). wrows are the windows each window
// limit reads, newest first, as positions in the counter rows (idx).
type checkArgs struct {
	costs     []float64
	counts    []int32
	nows      []int64
	kinds     []int16
	refs      []int32
	first     []bool
	sizes     []int64
	limits    []float64
	nrows     []int32
	elapsed   []int64
	fixed     []bool
	caps, cws []float64
	wrows     []int32
}

func newCheckArgs(checks []strategy.Check, idx map[rowKey]int, kidx map[bucketKey]int) checkArgs {
	nlim := 0
	for _, c := range checks {
		nlim += len(c.Limits)
	}
	a := checkArgs{
		costs: make([]float64, len(checks)), counts: make([]int32, len(checks)), nows: make([]int64, len(checks)),
		kinds: make([]int16, nlim), refs: make([]int32, nlim), first: make([]bool, nlim),
		sizes: make([]int64, nlim), limits: make([]float64, nlim), nrows: make([]int32, nlim),
		elapsed: make([]int64, nlim), fixed: make([]bool, nlim), caps: make([]float64, nlim), cws: make([]float64, nlim),
	}
	type named struct {
		g   group
		ref int32 // the current window's row for window limits
	}
	var seen []named // by the check's limits so far
	j := 0
	for i, c := range checks {
		now := c.Now.UnixMilli()
		a.costs[i], a.counts[i], a.nows[i] = c.Cost, int32(len(c.Limits)), now
		seen = seen[:0]
		for _, l := range c.Limits {
			g := groupOf(l.Kind)
			a.kinds[j], a.limits[j] = int16(l.Kind), l.Limit
			var id named
			if g == groupWindow {
				size := l.Sub().Milliseconds()
				k := limitKey(c, l)
				a.refs[j] = int32(len(a.wrows) + 1)
				id = named{g, int32(idx[k])}
				for range l.Depth() {
					a.wrows = append(a.wrows, int32(idx[k]))
					k = k.prev()
				}
				a.sizes[j], a.nrows[j] = size, int32(l.Depth())
				a.elapsed[j] = now - limitKey(c, l).start
				a.fixed[j] = l.Fixed
				a.caps[j] = float64(l.Limit * float64(size))
			} else {
				w := l.WindowSize.Milliseconds()
				a.refs[j] = int32(kidx[limitBucket(c, l)])
				id = named{g, a.refs[j]}
				a.sizes[j] = w
				if g == groupBucket {
					a.caps[j] = float64(l.Burst * float64(w))
					a.cws[j] = float64(c.Cost * float64(w))
				}
			}
			a.first[j] = !slices.Contains(seen, id)
			seen = append(seen, id)
			j++
		}
	}
	return a
}
