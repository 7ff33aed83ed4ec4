package postgres

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/ratesync/ratesync/strategy"
)

// purgeSQL deletes at most $4 rows of one namespace and window size that
// start before $3. Each statement is its own short transaction; rows that
// a push or check holds are skipped (SKIP LOCKED), left for the next purge.
// ctid = ANY (ARRAY(...)) plans as a TID scan of exactly the chosen rows.
func purgeSQL(n names) string {
	return `DELETE FROM ` + n.counters + ` WHERE ctid = ANY (ARRAY(
	SELECT ctid FROM ` + n.counters + `
	WHERE namespace = $1 AND window_size = $2 AND window_start < $3
	LIMIT $4 FOR UPDATE SKIP LOCKED))`
}

// purgeLanesSQL deletes at most $2 lanes that applied nothing for $1 ms of
// the server's clock.
func purgeLanesSQL(n names) string {
	return `DELETE FROM ` + n.lanes + ` WHERE ctid = ANY (ARRAY(
	SELECT ctid FROM ` + n.lanes + `
	WHERE updated_at < now() - $1::bigint * interval '1 millisecond'
	LIMIT $2 FOR UPDATE SKIP LOCKED))`
}

// purgeBucketsSQL deletes at most $6 buckets of namespace $1 that are empty
// as of $2 (strategy.BucketLevel at the rate they last drained at is 0,
// written as in migration 004), among those after ($3, $4, $5) in
// primary-key order, and returns how many it deleted and the last of them
// (NULLs when none). Each statement is its own short transaction; buckets
// that a push or check holds are skipped (SKIP LOCKED), left for the next
// purge. Batch after batch, a purge resumes after the last bucket deleted,
// so that it reads the namespace's buckets once in all.
func purgeBucketsSQL(n names) string {
	return `WITH gone AS (
	DELETE FROM ` + n.buckets + ` WHERE ctid = ANY (ARRAY(
		SELECT ctid FROM ` + n.buckets + `
		WHERE namespace = $1 AND (key, kind, window_ms) > ($3::bytea, $4::smallint, $5::bigint)
		  AND CASE WHEN $2::bigint <= at_ms THEN level <= 0
		           WHEN rate >= level THEN true
		           ELSE level - ($2::bigint - at_ms)::double precision * rate <= 0 END
		ORDER BY key, kind, window_ms
		LIMIT $6 FOR UPDATE SKIP LOCKED))
	RETURNING key, kind, window_ms
)
SELECT d.deleted, l.key, l.kind, l.window_ms
FROM (SELECT count(*) AS deleted FROM gone) d
LEFT JOIN (SELECT key, kind, window_ms FROM gone ORDER BY key DESC, kind DESC, window_ms DESC LIMIT 1) l ON true`
}

// purgeKeep is how many windows before the current one Purge keeps: the
// previous window, which every node reads, and one spare for nodes whose
// clock lags by up to a window (their "previous" is our second-to-last)
// and for late retries of batches still in flight. Kong keeps 10 sizes; a
// spare window is enough, because the syncer drops diffs of windows older
// than the previous one rather than pushing them.
const purgeKeep = 2

// Purge deletes the namespace's windows of windowSizes that started more
// than two windows before the current one as of now (keeping the current,
// the previous and one spare window), its buckets that are empty as of now
// (at the rate they last drained at), and lanes that applied nothing for
// Config.LaneTTL by the server's clock. It deletes in batches of
// Config.PurgeBatch rows, one short statement each, until a batch comes
// back short; rows held by concurrent writers are left for the next call.
func (s *Store) Purge(ctx context.Context, namespace string, windowSizes []time.Duration, now time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkNamespace(namespace); err != nil {
		return err
	}
	for i, size := range windowSizes {
		if err := checkSize("", size); err != nil {
			return fmt.Errorf("postgres: purge of namespace %q: windowSizes[%d] = %v: must be > 0 and whole milliseconds", namespace, i, size)
		}
	}
	for i, size := range windowSizes {
		if slices.Contains(windowSizes[:i], size) {
			continue
		}
		cutoff := strategy.WindowStart(now, size).UnixMilli() - purgeKeep*size.Milliseconds()
		if err := s.purgeBatches(ctx, s.q.purge, namespace, size.Milliseconds(), cutoff); err != nil {
			return dbErr(ctx, fmt.Sprintf("purge namespace %q, window size %v", namespace, size), err)
		}
	}
	if err := s.purgeBuckets(ctx, namespace, now.UnixMilli()); err != nil {
		return dbErr(ctx, fmt.Sprintf("purge the buckets of namespace %q", namespace), err)
	}
	if err := s.purgeBatches(ctx, s.q.purgeLanes, s.cfg.LaneTTL.Milliseconds()); err != nil {
		return dbErr(ctx, "purge lanes", err)
	}
	return nil
}

// purgeBatches runs a purge statement (its last parameter the batch size)
// until it deletes less than a full batch.
func (s *Store) purgeBatches(ctx context.Context, sql string, args ...any) error {
	args = append(args, s.cfg.PurgeBatch)
	for {
		tag, err := s.pool.Exec(ctx, sql, args...)
		if err != nil {
			return err
		}
		if tag.RowsAffected() < int64(s.cfg.PurgeBatch) {
			return nil
		}
	}
}

// purgeBuckets runs purgeBucketsSQL from the namespace's first bucket on,
// each batch after the last bucket the previous one deleted, until a batch
// deletes less than a full one.
func (s *Store) purgeBuckets(ctx context.Context, namespace string, now int64) error {
	key, kind, window := []byte{}, int16(0), int64(0) // before every bucket (kinds are >= 1)
	for {
		var (
			deleted int64
			k       []byte
			kd      *int16
			w       *int64
		)
		err := s.pool.QueryRow(ctx, s.q.purgeBuckets, namespace, now, key, kind, window, s.cfg.PurgeBatch).Scan(&deleted, &k, &kd, &w)
		if err != nil {
			return err
		}
		if deleted < int64(s.cfg.PurgeBatch) || kd == nil || w == nil {
			return nil
		}
		key, kind, window = k, *kd, *w
	}
}
