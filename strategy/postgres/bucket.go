package postgres

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/ratesync/ratesync/strategy"
)

// bucketKey is a bucket's primary key (window in milliseconds).
type bucketKey struct {
	ns     string
	key    string
	kind   uint8
	window int64
}

// compare is the order every writer locks bucket rows in: namespace, key
// (bytes), kind, window. Like rowKey.compare, what matters is that all
// writers use this one order.
func (k bucketKey) compare(o bucketKey) int {
	if c := strings.Compare(k.ns, o.ns); c != 0 {
		return c
	}
	if c := strings.Compare(k.key, o.key); c != 0 {
		return c
	}
	if c := cmp.Compare(k.kind, o.kind); c != 0 {
		return c
	}
	return cmp.Compare(k.window, o.window)
}

// bucketColumns are buckets as the parallel arrays the statements unnest.
type bucketColumns struct {
	ns     []string
	key    [][]byte
	kind   []int16
	window []int64
}

func newBucketColumns(n int) bucketColumns {
	return bucketColumns{ns: make([]string, 0, n), key: make([][]byte, 0, n), kind: make([]int16, 0, n), window: make([]int64, 0, n)}
}

func (c *bucketColumns) add(k bucketKey) {
	c.ns = append(c.ns, k.ns)
	c.key = append(c.key, []byte(k.key))
	c.kind = append(c.kind, int16(k.kind))
	c.window = append(c.window, k.window)
}

func finitePositive(v float64) bool { return v > 0 && !math.IsInf(v, 0) }

func checkBucketDiff(d strategy.BucketDiff) error {
	if err := checkNamespace(d.Namespace); err != nil {
		return err
	}
	switch {
	case d.Kind == 0:
		return fmt.Errorf("postgres: bucket diff of key %q: kind 0: must be a bucket kind (> 0)", d.Key)
	case d.Window <= 0 || d.Window%time.Millisecond != 0:
		return fmt.Errorf("postgres: bucket diff of key %q: window %v: must be > 0 and whole milliseconds", d.Key, d.Window)
	case !d.CostValid():
		return fmt.Errorf("postgres: bucket diff of key %q: cost %v: must be finite and not 0 (> 0 for an anchored window or a log)", d.Key, d.Cost)
	case !finitePositive(d.Rate):
		return fmt.Errorf("postgres: bucket diff of key %q: rate %v: must be finite and > 0", d.Key, d.Rate)
	}
	return nil
}

// bucketDiffArgs are a batch's bucket diffs as the arguments of the
// schema's bucket_add function that applies them: the buckets', then the
// anchored windows', then the logs' (the order every writer locks those
// tables in); within each group in rounds (round r holds the r-th diff of
// each bucket that has one, in batch order), each round sorted by bucket,
// ends[r] its last index (1-based).
type bucketDiffArgs struct {
	bucketColumns
	at   []int64
	cw   []float64 // cost * window, as arith.BucketAdd computes it
	rate []float64
	ends []int32
	cost []float64
}

func newBucketDiffArgs(diffs []strategy.BucketDiff) bucketDiffArgs {
	type item struct {
		k     bucketKey
		g     group
		round int
		d     strategy.BucketDiff
	}
	items := make([]item, len(diffs))
	for i, d := range diffs {
		items[i] = item{k: bucketKey{d.Namespace, d.Key, d.Kind, d.Window.Milliseconds()}, g: groupOf(d.Kind), d: d}
	}
	slices.SortStableFunc(items, func(a, b item) int { return a.k.compare(b.k) })
	for i := 1; i < len(items); i++ {
		if items[i].k == items[i-1].k {
			items[i].round = items[i-1].round + 1
		}
	}
	slices.SortStableFunc(items, func(a, b item) int {
		return cmp.Or(cmp.Compare(a.g, b.g), cmp.Compare(a.round, b.round))
	})
	a := bucketDiffArgs{bucketColumns: newBucketColumns(len(items)),
		at: make([]int64, 0, len(items)), cw: make([]float64, 0, len(items)), rate: make([]float64, 0, len(items)),
		cost: make([]float64, 0, len(items))}
	for i, x := range items {
		a.add(x.k)
		a.at = append(a.at, x.d.At)
		a.cw = append(a.cw, float64(x.d.Cost*float64(x.k.window)))
		a.rate = append(a.rate, x.d.Rate)
		a.cost = append(a.cost, x.d.Cost)
		if i == len(items)-1 || items[i+1].round != x.round || items[i+1].g != x.g {
			a.ends = append(a.ends, int32(i+1))
		}
	}
	return a
}

// getBucketsSQL reads the buckets of namespace $1 named by $2..$4, one
// primary-key probe each (see getSQL), returning each one's position
// (1-based) in the arrays and its state, in that order.
func getBucketsSQL(n names) string {
	return `SELECT r.i, b.at_ms, b.level
FROM unnest($2::bytea[], $3::smallint[], $4::bigint[]) WITH ORDINALITY AS r(key, kind, window_ms, i)
CROSS JOIN LATERAL (SELECT b.at_ms, b.level FROM ` + n.buckets + ` b
	WHERE b.namespace = $1 AND b.key = r.key AND b.kind = r.kind AND b.window_ms = r.window_ms
	OFFSET 0) b
ORDER BY r.i`
}

func checkBucketRefs(namespace string, refs []strategy.BucketRef) error {
	if err := checkNamespace(namespace); err != nil {
		return err
	}
	for i, r := range refs {
		if r.Kind == 0 {
			return fmt.Errorf("postgres: get buckets of namespace %q: refs[%d] (key %q): kind 0: must be a bucket kind (> 0)", namespace, i, r.Key)
		}
		if r.Window <= 0 || r.Window%time.Millisecond != 0 {
			return fmt.Errorf("postgres: get buckets of namespace %q: refs[%d] (key %q): window %v: must be > 0 and whole milliseconds", namespace, i, r.Key, r.Window)
		}
	}
	return nil
}

// GetBuckets returns the state of each bucket of refs that the store holds,
// in the order of refs (a ref named twice, twice), in one query.
func (s *Store) GetBuckets(ctx context.Context, namespace string, refs []strategy.BucketRef) ([]strategy.BucketState, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkBucketRefs(namespace, refs); err != nil {
		return nil, err
	}
	if len(refs) == 0 {
		return nil, nil
	}
	c := newBucketColumns(len(refs))
	for _, r := range refs {
		c.add(bucketKey{namespace, r.Key, r.Kind, r.Window.Milliseconds()})
	}
	what := func() string { return fmt.Sprintf("get %d buckets of namespace %q", len(refs), namespace) }
	rows, err := s.pool.Query(ctx, s.q.getBuckets, namespace, c.key, c.kind, c.window)
	if err != nil {
		return nil, dbErr(ctx, what(), err)
	}
	defer rows.Close()
	var out []strategy.BucketState
	for rows.Next() {
		var (
			i     int64
			at    int64
			level float64
		)
		if err := rows.Scan(&i, &at, &level); err != nil {
			return nil, dbErr(ctx, what(), err)
		}
		if i < 1 || i > int64(len(refs)) {
			return nil, fmt.Errorf("postgres: %s: position %d out of range", what(), i)
		}
		r := refs[i-1]
		out = append(out, strategy.BucketState{Key: r.Key, Kind: r.Kind, Window: r.Window, At: at, Level: level})
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr(ctx, what(), err)
	}
	return out, nil
}
