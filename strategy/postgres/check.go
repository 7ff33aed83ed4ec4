package postgres

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/ratesync/ratesync/strategy"
)

// checkSQL calls the function created by migration 002 and replaced, with
// the same arguments and results, by migration 003
// (migrations/003_check_set.sql).
func checkSQL(n names) string {
	return `SELECT applied, allowed, cur, prev FROM ` + n.check + `($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`
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
			return fmt.Errorf("postgres: check of key %q: cost %v: must be finite and >= 0", c.Key, c.Cost)
		}
		for j, l := range c.Limits {
			if err := checkSize(c.Key, l.WindowSize); err != nil {
				return fmt.Errorf("%w (checks[%d].Limits[%d])", err, i, j)
			}
			if math.IsNaN(l.Limit) || math.IsInf(l.Limit, 0) || l.Limit <= 0 {
				return fmt.Errorf("postgres: check of key %q: limit %v: must be finite and > 0 (checks[%d].Limits[%d])", c.Key, l.Limit, i, j)
			}
		}
	}
	return nil
}

// CheckAndCount decides and counts checks atomically, at most once per
// (node, seq), in one round trip: a call of the function of migration 003.
// The function locks the lane's row (serializing calls of one lane, as
// PushDiffs does), then locks each counter row the checks read, in the one
// order pushes lock rows in too (rowKey.compare), so that no caller
// deadlocks another, creating absent current windows as placeholders to
// lock them. It does so in a few set-based statements, whatever the number
// of checks (one per run of previous or of current windows in that order,
// one read, one write). Checks need not be sorted by key: all their rows
// are held before the first is decided.
// With every row held it decides the checks in order (so each key's checks
// see each other in order) with
//
//	current + previous * weight + cost <= limit
//
// for every limit, the weight computed here from the check's Now
// (strategy.Weight; 0 for fixed windows), counts a passing check's cost
// once in each distinct current window, writes the changed rows back and
// drops placeholders nothing was counted in. When (node, seq) was applied
// before, it locks and counts nothing and denies every check, returning the
// current totals.
func (s *Store) CheckAndCount(ctx context.Context, node string, seq uint64, checks []strategy.Check) ([]strategy.CheckResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkChecks(node, checks); err != nil {
		return nil, err
	}
	idx := make(map[rowKey]int) // row -> position, here so that it stays on the stack
	rows := checkRows(checks, idx)
	a := newCheckArgs(checks, idx)
	var (
		applied   bool
		allowed   []bool
		cur, prev []float64
	)
	err := s.pool.QueryRow(ctx, s.q.check, node, seqParam(seq),
		rows.ns, rows.size, rows.start, rows.key, rows.create, a.costs, a.counts, a.lcur, a.lprev, a.weights, a.limits,
	).Scan(&applied, &allowed, &cur, &prev)
	if err != nil {
		return nil, dbErr(ctx, fmt.Sprintf("check and count batch %d of node %q (%d checks)", seq, node, len(checks)), err)
	}
	nlim := len(a.limits)
	if len(allowed) != len(checks) || len(cur) != nlim || len(prev) != nlim {
		return nil, fmt.Errorf("postgres: check and count batch %d of node %q: %d results and %d totals for %d checks and %d limits", seq, node, len(allowed), len(cur), len(checks), nlim)
	}
	out := make([]strategy.CheckResult, len(checks))
	j := 0
	for i, c := range checks {
		out[i].Allowed = allowed[i]
		out[i].Totals = make([]strategy.Totals, len(c.Limits))
		for t := range c.Limits {
			out[i].Totals[t] = strategy.Totals{Current: cur[j], Previous: prev[j]}
			j++
		}
	}
	return out, nil
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

// checkRows returns the rows the checks read, and sets idx (empty) to the
// position of each in them (1-based: PostgreSQL arrays).
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

// checkArgs are the checks as the function's arrays: the cost and number
// of limits of each check, and for each limit in order the positions of
// its current and previous rows (idx), its weight and its limit.
type checkArgs struct {
	costs           []float64
	counts          []int32
	lcur, lprev     []int32
	weights, limits []float64
}

func newCheckArgs(checks []strategy.Check, idx map[rowKey]int) checkArgs {
	nlim := 0
	for _, c := range checks {
		nlim += len(c.Limits)
	}
	a := checkArgs{
		costs: make([]float64, len(checks)), counts: make([]int32, len(checks)),
		lcur: make([]int32, 0, nlim), lprev: make([]int32, 0, nlim),
		weights: make([]float64, 0, nlim), limits: make([]float64, 0, nlim),
	}
	for i, c := range checks {
		a.costs[i], a.counts[i] = c.Cost, int32(len(c.Limits))
		for _, l := range c.Limits {
			cur := limitKey(c, l)
			w := 0.0
			if !l.Fixed {
				w = strategy.Weight(c.Now, l.WindowSize)
			}
			a.lcur = append(a.lcur, int32(idx[cur]))
			a.lprev = append(a.lprev, int32(idx[cur.prev()]))
			a.weights = append(a.weights, w)
			a.limits = append(a.limits, l.Limit)
		}
	}
	return a
}
