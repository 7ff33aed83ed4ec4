package postgres

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"time"

	"github.com/ratesync/ratesync/internal/arith"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/ratesync/ratesync/strategy"
)

// getSQL selects a namespace's counters in the windows ($2 sizes, $3
// starts) given as pairs, optionally restricted to the keys $4.
//
// The whole namespace: each pair is a range of the primary key.
//
// Keys: one primary-key probe per (window, key), whatever the table's
// statistics and whether the plan is custom or generic. The LATERAL
// subquery (OFFSET 0 keeps the planner from flattening it into a join)
// can only be the inner side of a nested loop driven by the arrays, its
// four equalities an index condition on the whole primary key. A filter
// c.key = ANY ($4) on the window's range was an index condition only when
// the statistics said the window was large: with stale ones it scanned the
// whole window, and in a generic plan (the plan cache's choice after five
// executions) it searched the array linearly for each of the window's rows.
// A plain join with unnest($4) may become a hash join over a scan of the
// window in the same way. The caller passes the keys sorted (bytewise, as
// bytea compares) and each once: each window's probes walk the index
// forward, and no counter is yielded twice.
func getSQL(n names, keys bool) string {
	if keys {
		return `SELECT c.key, c.window_size, c.window_start, c.count
FROM unnest($2::bigint[], $3::bigint[]) AS w(window_size, window_start)
CROSS JOIN unnest($4::bytea[]) AS k(key)
CROSS JOIN LATERAL (SELECT c.key, c.window_size, c.window_start, c.count
	FROM ` + n.counters + ` c
	WHERE c.namespace = $1 AND c.window_size = w.window_size
	  AND c.window_start = w.window_start AND c.key = k.key
	OFFSET 0) c`
	}
	return `SELECT c.key, c.window_size, c.window_start, c.count
FROM unnest($2::bigint[], $3::bigint[]) AS w(window_size, window_start)
JOIN ` + n.counters + ` c ON c.namespace = $1 AND c.window_size = w.window_size AND c.window_start = w.window_start`
}

func windowSQL(n names) string {
	return `SELECT count FROM ` + n.counters + `
WHERE namespace = $1 AND window_size = $2 AND window_start = $3 AND key = $4`
}

// GetCounters yields the counters of q.Namespace in the current and the
// previous window of each size of q.WindowSizes as of q.Now, and the ones
// before them down to q.Depth of the size (restricted to q.Keys when not
// nil), from one query, streamed: rows are decoded and
// yielded as they arrive, and the query's connection is held until the
// loop ends. Stopping the loop early discards the remaining rows.
func (s *Store) GetCounters(ctx context.Context, q strategy.Query) iter.Seq2[strategy.Counter, error] {
	return func(yield func(strategy.Counter, error) bool) {
		if err := ctx.Err(); err != nil {
			yield(strategy.Counter{}, err)
			return
		}
		if err := checkNamespace(q.Namespace); err != nil {
			yield(strategy.Counter{}, err)
			return
		}
		var sizes, starts []int64
		for i, size := range q.WindowSizes {
			if err := checkSize("", size); err != nil {
				yield(strategy.Counter{}, fmt.Errorf("postgres: query of namespace %q: WindowSizes[%d] = %v: must be > 0 and whole milliseconds", q.Namespace, i, size))
				return
			}
			if slices.Contains(q.WindowSizes[:i], size) {
				continue // each window once, as deep as the deepest entry of its size
			}
			depth := q.Depth(i)
			for j := i + 1; j < len(q.WindowSizes); j++ {
				if q.WindowSizes[j] == size {
					depth = max(depth, q.Depth(j))
				}
			}
			ms := size.Milliseconds()
			cur := arith.WindowStart(q.Now, size).UnixMilli()
			for back := range int64(depth) {
				sizes = append(sizes, ms)
				starts = append(starts, cur-back*ms)
			}
		}
		if len(sizes) == 0 || (q.Keys != nil && len(q.Keys) == 0) {
			return
		}
		sql, args := s.q.get, []any{q.Namespace, sizes, starts}
		if q.Keys != nil {
			// Sorted (Go compares strings bytewise, as PostgreSQL
			// compares bytea), each once: see getSQL.
			sorted := slices.Clone(q.Keys)
			slices.Sort(sorted)
			sorted = slices.Compact(sorted)
			keys := make([][]byte, len(sorted))
			for i, k := range sorted {
				keys[i] = []byte(k)
			}
			sql, args = s.q.getKeys, append(args, keys)
		}
		what := func() string { return fmt.Sprintf("get counters of namespace %q", q.Namespace) }
		rows, err := s.pool.Query(ctx, sql, args...)
		if err != nil {
			yield(strategy.Counter{}, dbErr(ctx, what(), err))
			return
		}
		defer rows.Close()
		var (
			key         pgtype.DriverBytes // valid until the next row: copied by string()
			size, start int64
			count       float64
		)
		for rows.Next() {
			if err := rows.Scan(&key, &size, &start, &count); err != nil {
				yield(strategy.Counter{}, dbErr(ctx, what(), err))
				return
			}
			c := strategy.Counter{
				Key:         string(key),
				WindowStart: time.UnixMilli(start),
				WindowSize:  time.Duration(size) * time.Millisecond,
				Count:       count,
			}
			if !yield(c, nil) {
				return
			}
		}
		if err := rows.Err(); err != nil {
			yield(strategy.Counter{}, dbErr(ctx, what(), err))
		}
	}
}

// GetWindow returns one counter's count, 0 when the store does not hold it.
func (s *Store) GetWindow(ctx context.Context, namespace, key string, windowStart time.Time, windowSize time.Duration) (float64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := checkNamespace(namespace); err != nil {
		return 0, err
	}
	if err := checkSize(key, windowSize); err != nil {
		return 0, err
	}
	var count float64
	err := s.pool.QueryRow(ctx, s.q.window, namespace, windowSize.Milliseconds(), windowStart.UnixMilli(), []byte(key)).Scan(&count)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, dbErr(ctx, fmt.Sprintf("get window of key %q in namespace %q", key, namespace), err)
	}
	return count, nil
}
