package postgres

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/ratesync/ratesync/strategy"
)

// checkSQL calls the function of migration 004 (migrations/004_buckets.sql),
// an overload of the one created by 002 and replaced by 003, which nodes
// of the previous release call.
func checkSQL(n names) string {
	params := make([]string, checkParams)
	for i := range params {
		params[i] = fmt.Sprintf("$%d", i+1)
	}
	return `SELECT applied, allowed, cur, prev, bucket_at, bucket_level FROM ` + n.check + `(` + strings.Join(params, ", ") + `)`
}

// checkParams is the number of arguments of the function.
const checkParams = 23

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
			if l.Kind != 0 && !finitePositive(l.Burst) {
				return fmt.Errorf("postgres: check of key %q: bucket kind %d: burst %v: must be finite and > 0 (checks[%d].Limits[%d])", c.Key, l.Kind, l.Burst, i, j)
			}
		}
	}
	return nil
}

// CheckAndCount decides and counts checks atomically, at most once per
// (node, seq), in one round trip: a call of the function of migration 004.
// The function locks the lane's row (serializing calls of one lane, as
// PushDiffs does), then the buckets the checks name, then each counter row
// the checks read, each in the one order pushes lock them in too
// (bucketKey.compare, rowKey.compare), so that no caller deadlocks another,
// creating absent buckets and current windows as placeholders to lock
// them. It does so in a few set-based statements, whatever the number of
// checks (for buckets one lock and one read; for counters one per run of
// previous or of current windows in that order, one read; one write each).
// Checks need not be sorted by key: all their rows are held before the
// first is decided.
//
// With every row held it decides the checks in order (so each key's checks
// see each other in order) with strategy.WindowFits for window limits
// (the elapsed time in the window computed here from the check's Now) and
// strategy.BucketLevel and BucketFits at Now for bucket limits, counts a
// passing check's cost, when above 0, once in each distinct current window
// and once in each distinct bucket (strategy.BucketAdd), writes the changed
// rows back and drops placeholders nothing was counted in. When (node, seq)
// was applied before, it locks and counts nothing and denies every check,
// returning the current state.
func (s *Store) CheckAndCount(ctx context.Context, node string, seq uint64, checks []strategy.Check) ([]strategy.CheckResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkChecks(node, checks); err != nil {
		return nil, err
	}
	idx := make(map[rowKey]int) // row -> position, here so that it stays on the stack
	bidx := make(map[bucketKey]int)
	rows := checkRows(checks, idx)
	buckets := checkBuckets(checks, bidx)
	a := newCheckArgs(checks, idx, bidx)
	var r checkReply
	err := s.pool.QueryRow(ctx, s.q.check, node, seqParam(seq),
		rows.ns, rows.size, rows.start, rows.key, rows.create,
		buckets.ns, buckets.key, buckets.kind, buckets.window,
		a.costs, a.counts, a.nows,
		a.lcur, a.lprev, a.lbucket, a.sizes, a.elapsed, a.fixed, a.limits, a.caps, a.cws,
	).Scan(&r.applied, &r.allowed, &r.cur, &r.prev, &r.at, &r.level)
	if err != nil {
		return nil, dbErr(ctx, fmt.Sprintf("check and count batch %d of node %q (%d checks)", seq, node, len(checks)), err)
	}
	nlim := len(a.limits)
	if len(r.allowed) != len(checks) || len(r.cur) != nlim || len(r.prev) != nlim || len(r.at) != nlim || len(r.level) != nlim {
		return nil, fmt.Errorf("postgres: check and count batch %d of node %q: %d results and %d totals for %d checks and %d limits", seq, node, len(r.allowed), len(r.cur), len(checks), nlim)
	}
	return r.results(checks), nil
}

// checkReply is what the function returns: per check whether it passed,
// and per limit the window totals or the bucket's state after its check.
type checkReply struct {
	applied   bool
	allowed   []bool
	cur, prev []float64
	at        []int64
	level     []float64
}

func (r *checkReply) results(checks []strategy.Check) []strategy.CheckResult {
	out := make([]strategy.CheckResult, len(checks))
	j := 0
	for i, c := range checks {
		out[i].Allowed = r.allowed[i]
		out[i].Totals = make([]strategy.Totals, len(c.Limits))
		for t, l := range c.Limits {
			if l.Kind == 0 {
				out[i].Totals[t] = strategy.Totals{Current: r.cur[j], Previous: r.prev[j]}
			} else {
				if out[i].Buckets == nil {
					out[i].Buckets = make([]strategy.BucketState, len(c.Limits))
				}
				out[i].Buckets[t] = strategy.BucketState{Key: c.Key, Kind: l.Kind, Window: l.WindowSize, At: r.at[j], Level: r.level[j]}
			}
			j++
		}
	}
	return out
}

// limitKey is the row of the current window of a check's limit.
func limitKey(c strategy.Check, l strategy.CheckLimit) rowKey {
	return rowKey{c.Namespace, l.WindowSize.Milliseconds(), strategy.WindowStart(c.Now, l.WindowSize).UnixMilli(), c.Key}
}

// checkRowColumns are the rows the checks read, as the function's arrays:
// each once, sorted by primary key, create set for current windows (which
// the function creates, as placeholders, when absent).
type checkRowColumns struct {
	columns
	create []bool
}

// checkRows returns the counter rows the window limits of the checks read,
// and sets idx (empty) to the position of each in them (1-based:
// PostgreSQL arrays).
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
			cur := limitKey(c, l)
			add(cur, true)
			add(cur.prev(), false)
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

// limitBucket is the bucket of a check's bucket limit.
func limitBucket(c strategy.Check, l strategy.CheckLimit) bucketKey {
	return bucketKey{c.Namespace, c.Key, l.Kind, l.WindowSize.Milliseconds()}
}

// checkBuckets returns the buckets the bucket limits of the checks name,
// each once, sorted by bucketKey.compare, and sets bidx (empty) to the
// position of each in them (1-based).
func checkBuckets(checks []strategy.Check, bidx map[bucketKey]int) bucketColumns {
	var keys []bucketKey
	for _, c := range checks {
		for _, l := range c.Limits {
			if l.Kind == 0 {
				continue
			}
			if k := limitBucket(c, l); bidx[k] == 0 {
				bidx[k] = len(keys) + 1 // any position: it is set below
				keys = append(keys, k)
			}
		}
	}
	slices.SortFunc(keys, bucketKey.compare)
	b := newBucketColumns(len(keys))
	for i, k := range keys {
		bidx[k] = i + 1
		b.add(k)
	}
	return b
}

// checkArgs are the checks as the function's arrays: the cost, number of
// limits and Now (ms) of each check, and for each limit in order:
// window limits: the positions of its current and previous rows (idx), its
// size, the ms elapsed in its current window, whether it is fixed, its
// limit and limit * size; bucket limits: the position of its bucket
// (bidx), its window, its limit (the rate), burst * window and
// cost * window. The products are strategy.WindowFits' and BucketFits', in
// float64 here (see migration 004).
type checkArgs struct {
	costs        []float64
	counts       []int32
	nows         []int64
	lcur, lprev  []int32
	lbucket      []int32
	sizes        []int64
	elapsed      []int64
	fixed        []bool
	limits, caps []float64
	cws          []float64
}

func newCheckArgs(checks []strategy.Check, idx map[rowKey]int, bidx map[bucketKey]int) checkArgs {
	nlim := 0
	for _, c := range checks {
		nlim += len(c.Limits)
	}
	a := checkArgs{
		costs: make([]float64, len(checks)), counts: make([]int32, len(checks)), nows: make([]int64, len(checks)),
		lcur: make([]int32, nlim), lprev: make([]int32, nlim), lbucket: make([]int32, nlim),
		sizes: make([]int64, nlim), elapsed: make([]int64, nlim), fixed: make([]bool, nlim),
		limits: make([]float64, nlim), caps: make([]float64, nlim), cws: make([]float64, nlim),
	}
	j := 0
	for i, c := range checks {
		now := c.Now.UnixMilli()
		a.costs[i], a.counts[i], a.nows[i] = c.Cost, int32(len(c.Limits)), now
		for _, l := range c.Limits {
			size := l.WindowSize.Milliseconds()
			w := float64(size)
			a.sizes[j], a.limits[j] = size, l.Limit
			if l.Kind != 0 {
				a.lbucket[j] = int32(bidx[limitBucket(c, l)])
				a.caps[j] = float64(l.Burst * w)
				a.cws[j] = float64(c.Cost * w)
			} else {
				cur := limitKey(c, l)
				a.lcur[j], a.lprev[j] = int32(idx[cur]), int32(idx[cur.prev()])
				a.elapsed[j] = now - cur.start
				a.fixed[j] = l.Fixed
				a.caps[j] = float64(l.Limit * w)
			}
			j++
		}
	}
	return a
}
