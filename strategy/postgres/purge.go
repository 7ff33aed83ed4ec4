package postgres

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/ratesync/ratesync/internal/arith"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
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
// as of $2 (arith.Level at the rate they last drained at is 0,
// written as in migrations/001_schema.sql), among those after ($3, $4, $5) in
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

// purgeAnchoredSQL deletes at most $5 anchored windows of namespace $1
// that are closed as of $2 (arith.AnchoredCount is 0: no count, or
// $2 >= at + window), among those after ($3, $4) in primary-key order,
// and returns how many it deleted and the last of them, as
// purgeBucketsSQL does.
func purgeAnchoredSQL(n names) string {
	return `WITH gone AS (
	DELETE FROM ` + n.anchored + ` WHERE ctid = ANY (ARRAY(
		SELECT ctid FROM ` + n.anchored + `
		WHERE namespace = $1 AND (key, window_ms) > ($3::bytea, $4::bigint)
		  AND NOT (level > 0 AND $2::bigint < at_ms + window_ms)
		ORDER BY key, window_ms
		LIMIT $5 FOR UPDATE SKIP LOCKED))
	RETURNING key, window_ms
)
SELECT d.deleted, l.key, l.window_ms
FROM (SELECT count(*) AS deleted FROM gone) d
LEFT JOIN (SELECT key, window_ms FROM gone ORDER BY key DESC, window_ms DESC LIMIT 1) l ON true`
}

// purgeLogsSQL locks at most $4 logs' headers of namespace $1 after
// ($2, $3) in primary-key order, skipping those a writer holds, and
// returns them in that order.
func purgeLogsSQL(n names) string {
	return `SELECT key, window_ms, id, sum, entries, ctid FROM ` + n.logs + `
WHERE namespace = $1 AND (key, window_ms) > ($2::bytea, $3::bigint)
ORDER BY key, window_ms
LIMIT $4 FOR UPDATE SKIP LOCKED`
}

// trimLogsSQL deletes the entries of each log $1 at or before its instant
// $2, one primary-key range each, and returns per log its deleted costs,
// oldest first.
func trimLogsSQL(n names) string {
	return `WITH gone AS (
	DELETE FROM ` + n.logEntries + ` le WHERE le.ctid = ANY (ARRAY(
		SELECT y.ctid FROM unnest($1::bigint[], $2::bigint[]) AS u(id, cut)
		CROSS JOIN LATERAL (
			SELECT le.ctid FROM ` + n.logEntries + ` le
			WHERE le.log_id = u.id AND le.at_ms <= u.cut
			OFFSET 0
		) y))
	RETURNING le.log_id, le.at_ms, le.cost
)
SELECT log_id, array_agg(cost ORDER BY at_ms) FROM gone GROUP BY log_id`
}

// putLogsSQL writes the trimmed logs' headers back, by ctid ($1), with
// their sums ($2) and entries ($3), and deletes those left empty.
func putLogsSQL(n names) string {
	return `WITH put AS (
	UPDATE ` + n.logs + ` g SET sum = u.sum, entries = u.entries
	FROM unnest($1::tid[], $2::float8[], $3::integer[]) AS u(t, sum, entries)
	WHERE u.entries > 0 AND g.ctid = u.t
	RETURNING 1
), gone AS (
	DELETE FROM ` + n.logs + ` g USING unnest($1::tid[], $3::integer[]) AS u(t, entries)
	WHERE u.entries = 0 AND g.ctid = u.t
	RETURNING 1
)
SELECT (SELECT count(*) FROM put), (SELECT count(*) FROM gone)`
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
// (at the rate they last drained at), its anchored windows that are closed
// as of now, its logs' entries that no longer weigh at now (each log
// trimmed as arith.Log.Trim does, and deleted when that empties it),
// and lanes that applied nothing for Config.LaneTTL by the server's clock.
// It deletes in batches of Config.PurgeBatch rows (of logs: headers), one
// short statement (of logs: one short transaction) each, until a batch
// comes back short; rows held by concurrent writers are left for the next
// call.
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
		cutoff := arith.WindowStart(now, size).UnixMilli() - purgeKeep*size.Milliseconds()
		if err := s.purgeBatches(ctx, s.q.purge, namespace, size.Milliseconds(), cutoff); err != nil {
			return dbErr(ctx, fmt.Sprintf("purge namespace %q, window size %v", namespace, size), err)
		}
	}
	if err := s.purgeBuckets(ctx, namespace, now.UnixMilli()); err != nil {
		return dbErr(ctx, fmt.Sprintf("purge the buckets of namespace %q", namespace), err)
	}
	if err := s.purgeAnchored(ctx, namespace, now.UnixMilli()); err != nil {
		return dbErr(ctx, fmt.Sprintf("purge the anchored windows of namespace %q", namespace), err)
	}
	if err := s.purgeLogs(ctx, namespace, now.UnixMilli()); err != nil {
		return dbErr(ctx, fmt.Sprintf("purge the logs of namespace %q", namespace), err)
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

// purgeAnchored runs purgeAnchoredSQL from the namespace's first anchored
// window on, each batch after the last window the previous one deleted,
// until a batch deletes less than a full one.
func (s *Store) purgeAnchored(ctx context.Context, namespace string, now int64) error {
	key, window := []byte{}, int64(0) // before every window (windows are > 0)
	for {
		var (
			deleted int64
			k       []byte
			w       *int64
		)
		err := s.pool.QueryRow(ctx, s.q.purgeAnchored, namespace, now, key, window, s.cfg.PurgeBatch).Scan(&deleted, &k, &w)
		if err != nil {
			return err
		}
		if deleted < int64(s.cfg.PurgeBatch) || w == nil {
			return nil
		}
		key, window = k, *w
	}
}

// purgeLogs trims every log of the namespace at now, batch after batch of
// Config.PurgeBatch headers in primary-key order, each in a transaction:
// it locks the batch's headers (skipping those a writer holds), deletes
// their entries that no longer weigh (at <= now - window), subtracts their
// costs from each log's sum, oldest first, as arith.Log.Trim does (0
// once the log is empty), and writes the headers back, deleting those of
// logs left empty.
func (s *Store) purgeLogs(ctx context.Context, namespace string, now int64) error {
	key, window := []byte{}, int64(0) // before every log (windows are > 0)
	for {
		n, err := s.purgeLogBatch(ctx, namespace, now, &key, &window)
		if err != nil {
			return err
		}
		if n < s.cfg.PurgeBatch {
			return nil
		}
	}
}

// logHeader is a log's header as Purge reads and writes it.
type logHeader struct {
	id      int64
	sum     float64
	entries int32
	ctid    pgtype.TID
	trimmed bool
}

// purgeLogBatch trims the batch of logs after (*key, *window), moves them
// to the last log of the batch, and returns how many headers it read.
func (s *Store) purgeLogBatch(ctx context.Context, namespace string, now int64, key *[]byte, window *int64) (int, error) {
	read := 0
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, s.q.purgeLogs, namespace, *key, *window, s.cfg.PurgeBatch)
		if err != nil {
			return err
		}
		var (
			logs      []logHeader
			byID      = make(map[int64]int)
			ids, cuts []int64
		)
		for rows.Next() {
			var (
				h logHeader
				w int64
			)
			if err := rows.Scan(key, &w, &h.id, &h.sum, &h.entries, &h.ctid); err != nil {
				rows.Close()
				return err
			}
			*window = w
			byID[h.id] = len(logs)
			logs = append(logs, h)
			if h.entries > 0 {
				ids, cuts = append(ids, h.id), append(cuts, now-w)
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		read = len(logs)
		if len(logs) == 0 {
			return nil
		}
		rows, err = tx.Query(ctx, s.q.trimLogs, ids, cuts)
		if err != nil {
			return err
		}
		for rows.Next() {
			var (
				id    int64
				costs []float64
			)
			if err := rows.Scan(&id, &costs); err != nil {
				rows.Close()
				return err
			}
			i, ok := byID[id]
			if !ok {
				rows.Close()
				return fmt.Errorf("trimmed entries of log %d, which is not in the batch", id)
			}
			h := &logs[i]
			h.trimmed = true
			for _, c := range costs { // arith.Log.Trim
				h.sum -= c
			}
			if h.entries -= int32(len(costs)); h.entries <= 0 {
				h.entries, h.sum = 0, 0
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		var (
			tids    []pgtype.TID
			sums    []float64
			entries []int32
		)
		for _, h := range logs {
			if h.trimmed || h.entries == 0 {
				tids, sums, entries = append(tids, h.ctid), append(sums, h.sum), append(entries, h.entries)
			}
		}
		if len(tids) == 0 {
			return nil
		}
		_, err = tx.Exec(ctx, s.q.putLogs, tids, sums, entries)
		return err
	})
	return read, err
}
