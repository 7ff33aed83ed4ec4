package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/ratesync/ratesync/strategy"
)

// pushWith returns the head of the push statement, shared by PushDiffs and
// PushAndCount. One statement is one transaction, so the lane record, the
// buckets and the counters change together or not at all:
//
//   - lane upserts the lane's row only when the batch's seq is above the
//     recorded one, and returns a row only then. Its row lock serializes
//     pushes of one lane: a retry racing its still-running first attempt
//     waits for it, then (READ COMMITTED re-checks the newest row version)
//     finds seq not above the record and returns nothing;
//   - with bucket diffs (bucketArg > 0: the number of the first of their
//     parameters), bk calls the schema's bucket_add function that applies
//     them (buckets', anchored windows' and logs'), once per row of lane:
//     only when the batch is new, and after the lane row is locked;
//   - up adds the batch's counters only WHERE EXISTS (SELECT 1 FROM lane),
//     or FROM bk when there is one, a one-time filter evaluated before the
//     first counter row, so the lane row, then the buckets, anchored
//     windows and logs, are always locked first (the order CheckAndCount
//     locks them in too). Rows arrive
//     aggregated (ON CONFLICT cannot touch a row twice in one statement) and
//     sorted by rowKey.compare, and the plan feeds the insert straight from
//     the function scan, in array order, so concurrent pushes (and checks)
//     lock shared rows in one order and never deadlock.
//
// returning is up's RETURNING clause, if any.
func pushWith(n names, returning string, bucketArg int) string {
	gate, bk := "lane", ""
	if bucketArg > 0 {
		gate = "bk"
		p := func(i int, typ string) string { return fmt.Sprintf("$%d::%s", bucketArg+i, typ) }
		bk = `, bk AS (
	SELECT ` + n.bucketAdd + `(` + strings.Join([]string{p(0, "text[]"), p(1, "bytea[]"), p(2, "smallint[]"), p(3, "bigint[]"),
			p(4, "bigint[]"), p(5, "float8[]"), p(6, "float8[]"), p(7, "integer[]"), p(8, "float8[]")}, ", ") + `) FROM lane
)`
	}
	return `WITH lane AS (
	INSERT INTO ` + n.lanes + ` AS l (node, seq, updated_at) VALUES ($6, $7, now())
	ON CONFLICT (node) DO UPDATE SET seq = EXCLUDED.seq, updated_at = EXCLUDED.updated_at
	WHERE l.seq < EXCLUDED.seq
	RETURNING 1
)` + bk + `, up AS (
	INSERT INTO ` + n.counters + ` AS c (namespace, window_size, window_start, key, count)
	SELECT d.namespace, d.window_size, d.window_start, d.key, d.count
	FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bytea[], $5::float8[])
	     AS d(namespace, window_size, window_start, key, count)
	WHERE EXISTS (SELECT 1 FROM ` + gate + `)
	ON CONFLICT (namespace, window_size, window_start, key)
	DO UPDATE SET count = c.count + EXCLUDED.count` + returning + `
)
`
}

// pushParams and pushCountParams are the number of parameters of pushSQL
// and pushCountSQL without bucket diffs: their bucket diffs come after.
const (
	pushParams      = 7
	pushCountParams = 11
)

// pushSQL returns whether the batch was applied (1) or not (0). With
// buckets, the batch's bucket diffs are $8..$16.
func pushSQL(n names, buckets bool) string {
	return pushWith(n, "", bucketArg(buckets, pushParams)) + `SELECT count(*) FROM lane`
}

// pushCountSQL returns the final count of every counter the batch changed
// (first column true; none when the batch was not applied), then the count
// of each previous window named in $8..$11 that the batch did not change
// (first column false, as of the statement's start; absent rows omitted).
// With buckets, the batch's bucket diffs are $12..$20.
func pushCountSQL(n names, buckets bool) string {
	return pushWith(n, `
	RETURNING c.namespace, c.window_size, c.window_start, c.key, c.count`, bucketArg(buckets, pushCountParams)) + `SELECT true, namespace, window_size, window_start, key, count FROM up
UNION ALL
SELECT false, c.namespace, c.window_size, c.window_start, c.key, c.count
FROM unnest($8::text[], $9::bigint[], $10::bigint[], $11::bytea[]) AS e(namespace, window_size, window_start, key)
JOIN ` + n.counters + ` c ON c.namespace = e.namespace AND c.window_size = e.window_size
	AND c.window_start = e.window_start AND c.key = e.key`
}

// bucketArg is the number of the first bucket parameter of a statement of
// params parameters, 0 without buckets.
func bucketArg(buckets bool, params int) int {
	if !buckets {
		return 0
	}
	return params + 1
}

// readRowsSQL reads the counters named in $1..$4 (absent rows omitted).
func readRowsSQL(n names) string {
	return `SELECT c.namespace, c.window_size, c.window_start, c.key, c.count
FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bytea[]) AS e(namespace, window_size, window_start, key)
JOIN ` + n.counters + ` c ON c.namespace = e.namespace AND c.window_size = e.window_size
	AND c.window_start = e.window_start AND c.key = e.key`
}

// rowKey is a counter's primary key (sizes and starts in milliseconds).
type rowKey struct {
	ns          string
	size, start int64
	key         string
}

func diffKey(d strategy.Diff) rowKey {
	return rowKey{d.Namespace, d.WindowSize.Milliseconds(), d.WindowStart.UnixMilli(), d.Key}
}

// prev is the same counter one window earlier.
func (k rowKey) prev() rowKey { k.start -= k.size; return k }

// compare is the order every writer locks counter rows in: namespace,
// size, start, key, strings by bytes. It need not match the index's
// collation; what rules out deadlocks is that all writers use this one.
func (k rowKey) compare(o rowKey) int {
	if c := strings.Compare(k.ns, o.ns); c != 0 {
		return c
	}
	if c := cmp.Compare(k.size, o.size); c != 0 {
		return c
	}
	if c := cmp.Compare(k.start, o.start); c != 0 {
		return c
	}
	return strings.Compare(k.key, o.key)
}

// columns are rows as the parallel arrays the statements unnest.
type columns struct {
	ns     []string
	size   []int64
	start  []int64
	key    [][]byte
	counts []float64
}

func newColumns(n int, counts bool) *columns {
	c := &columns{ns: make([]string, 0, n), size: make([]int64, 0, n), start: make([]int64, 0, n), key: make([][]byte, 0, n)}
	if counts {
		c.counts = make([]float64, 0, n)
	}
	return c
}

func (c *columns) add(k rowKey) {
	c.ns = append(c.ns, k.ns)
	c.size = append(c.size, k.size)
	c.start = append(c.start, k.start)
	c.key = append(c.key, []byte(k.key))
}

type sum struct {
	k rowKey
	v float64
}

// aggregate sums the diffs of each counter and sorts the sums in lock order.
func aggregate(diffs []strategy.Diff) []sum {
	idx := make(map[rowKey]int, len(diffs))
	sums := make([]sum, 0, len(diffs))
	for _, d := range diffs {
		k := diffKey(d)
		if i, ok := idx[k]; ok {
			sums[i].v += d.Value
			continue
		}
		idx[k] = len(sums)
		sums = append(sums, sum{k, d.Value})
	}
	slices.SortFunc(sums, func(a, b sum) int { return a.k.compare(b.k) })
	return sums
}

func sumColumns(sums []sum) *columns {
	c := newColumns(len(sums), true)
	for _, s := range sums {
		c.add(s.k)
		c.counts = append(c.counts, s.v)
	}
	return c
}

func checkBatch(b strategy.Batch) error {
	if err := checkNode(b.Node); err != nil {
		return err
	}
	for _, d := range b.Diffs {
		if err := checkDiff(d); err != nil {
			return fmt.Errorf("%w (batch %d of node %q)", err, b.Seq, b.Node)
		}
	}
	for _, d := range b.Buckets {
		if err := checkBucketDiff(d); err != nil {
			return fmt.Errorf("%w (batch %d of node %q)", err, b.Seq, b.Node)
		}
	}
	return nil
}

// withBuckets returns the statement to run for b, sql or, when b has
// bucket diffs, withB, and args followed by those diffs' arguments.
func withBuckets(b strategy.Batch, sql, withB string, args ...any) (string, []any) {
	if len(b.Buckets) == 0 {
		return sql, args
	}
	a := newBucketDiffArgs(b.Buckets)
	return withB, append(args, a.ns, a.key, a.kind, a.window, a.at, a.cw, a.rate, a.ends, a.cost)
}

// batchWhat names b in errors.
func batchWhat(verb string, b strategy.Batch) string {
	return fmt.Sprintf("%s batch %d of node %q (%d diffs, %d bucket diffs)", verb, b.Seq, b.Node, len(b.Diffs), len(b.Buckets))
}

// PushDiffs applies b (its diffs and its bucket diffs) at most once per
// (b.Node, b.Seq), in one statement.
func (s *Store) PushDiffs(ctx context.Context, b strategy.Batch) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkBatch(b); err != nil {
		return err
	}
	c := sumColumns(aggregate(b.Diffs))
	sql, args := withBuckets(b, s.q.push, s.q.pushBuckets, c.ns, c.size, c.start, c.key, c.counts, b.Node, seqParam(b.Seq))
	var applied int64
	if err := s.pool.QueryRow(ctx, sql, args...).Scan(&applied); err != nil {
		return dbErr(ctx, batchWhat("push", b), err)
	}
	return nil
}

// PushAndCount applies b like PushDiffs and returns, for each diff in
// order, its counter's totals right after that diff, in one round trip.
// The statement returns each changed counter's final count; the totals of
// a counter named several times are derived from it by taking off the
// diffs that come later in b (exact for whole counts, else within
// rounding). When (b.Node, b.Seq) was applied before,
// nothing is applied and the current totals are read with a second query.
func (s *Store) PushAndCount(ctx context.Context, b strategy.Batch) ([]strategy.Totals, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkBatch(b); err != nil {
		return nil, err
	}
	sums := aggregate(b.Diffs)
	extra := unchangedPrev(sums)
	counts := make(map[rowKey]float64, len(sums)+len(extra)) // here so that it may stay on the stack
	applied, err := s.pushCount(ctx, b, sums, extra, counts)
	if err == nil && !applied && len(b.Diffs) > 0 {
		// Replayed (Node, Seq): the statement's snapshot may predate the
		// first attempt it waited for, so read the current totals afresh.
		clear(counts)
		all := keyColumns(sums, extra)
		err = s.readRows(ctx, &all, counts)
	}
	if err != nil {
		return nil, dbErr(ctx, batchWhat("push and count", b), err)
	}
	if !applied {
		return currentTotals(b.Diffs, counts), nil
	}
	return appliedTotals(b.Diffs, counts, len(sums)), nil
}

// unchangedPrev returns the previous windows of the counters of sums that
// are not among them, once each.
func unchangedPrev(sums []sum) []rowKey {
	changed := make(map[rowKey]struct{}, len(sums))
	for _, x := range sums {
		changed[x.k] = struct{}{}
	}
	var extra []rowKey
	for _, x := range sums {
		p := x.k.prev()
		if _, ok := changed[p]; !ok {
			changed[p] = struct{}{} // once each
			extra = append(extra, p)
		}
	}
	return extra
}

// pushCount runs the push-and-count statement for b (sums: its diffs
// aggregated), puts the counts of the counters it changed and of the
// extra ones in counts, and reports whether b was applied.
func (s *Store) pushCount(ctx context.Context, b strategy.Batch, sums []sum, extra []rowKey, counts map[rowKey]float64) (bool, error) {
	c := sumColumns(sums)
	e := keyColumns(nil, extra)
	applied := false
	sql, args := withBuckets(b, s.q.pushCount, s.q.pushCountBuckets, c.ns, c.size, c.start, c.key, c.counts, b.Node, seqParam(b.Seq),
		e.ns, e.size, e.start, e.key)
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			mine bool
			k    rowKey
			key  pgtype.DriverBytes
			v    float64
		)
		if err := rows.Scan(&mine, &k.ns, &k.size, &k.start, &key, &v); err != nil {
			return false, err
		}
		k.key = string(key)
		counts[k] = v
		applied = applied || mine
	}
	rows.Close()
	return applied, rows.Err()
}

// keyColumns returns the keys of sums, then keys, as columns.
func keyColumns(sums []sum, keys []rowKey) columns {
	c := newColumns(len(sums)+len(keys), false)
	for _, x := range sums {
		c.add(x.k)
	}
	for _, k := range keys {
		c.add(k)
	}
	return *c
}

// currentTotals returns the totals of each diff as counts holds them.
func currentTotals(diffs []strategy.Diff, counts map[rowKey]float64) []strategy.Totals {
	totals := make([]strategy.Totals, len(diffs))
	for i, d := range diffs {
		k := diffKey(d)
		totals[i] = strategy.Totals{Current: counts[k], Previous: counts[k.prev()]}
	}
	return totals
}

// appliedTotals returns the totals right after each diff, walking back from
// the final counts of an applied batch of nsums distinct counters.
func appliedTotals(diffs []strategy.Diff, counts map[rowKey]float64, nsums int) []strategy.Totals {
	totals := make([]strategy.Totals, len(diffs))
	later := make(map[rowKey]float64, nsums)
	for i := len(diffs) - 1; i >= 0; i-- {
		d := diffs[i]
		k := diffKey(d)
		p := k.prev()
		totals[i] = strategy.Totals{Current: counts[k] - later[k], Previous: counts[p] - later[p]}
		later[k] += d.Value
	}
	return totals
}

// readRows reads the counters of c into counts.
func (s *Store) readRows(ctx context.Context, c *columns, counts map[rowKey]float64) error {
	rows, err := s.pool.Query(ctx, s.q.readRows, c.ns, c.size, c.start, c.key)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			k   rowKey
			key pgtype.DriverBytes
			v   float64
		)
		if err := rows.Scan(&k.ns, &k.size, &k.start, &key, &v); err != nil {
			return err
		}
		k.key = string(key)
		counts[k] = v
	}
	return rows.Err()
}
