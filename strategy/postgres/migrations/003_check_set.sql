-- {{check}}, set-based: the function of 002 with the same arguments,
-- results and semantics (see 002_check.sql), in a few statements whatever
-- the batch's size instead of one to three per row (a batch of 32 checks
-- on distinct keys ran about 100 statements):
--
--   1. the lane row, as before: it serializes calls and pushes of a lane;
--   2. every row locked in the caller's order (primary-key order, the one
--      every writer of the store locks rows in), run by run of consecutive
--      rows of one kind, each run by one statement whose scan of the arrays
--      drives the locking, one row after the other:
--      - previous windows: one SELECT ... FOR UPDATE, which also returns
--        their counts (an absent previous window counts 0 and is not
--        created);
--      - current windows: one SELECT ... FOR UPDATE as well, returning
--        counts and ctids, but fetched through a cursor one row at a time
--        so that it stops at the first absent row; from that row on, one
--        INSERT ... ON CONFLICT DO UPDATE ... WHERE false, which inserts
--        each absent row as a placeholder (count 0) and locks each present
--        one without writing it, in order, as a push does (waiting like a
--        push for a concurrent insert of the same row).
--      Never two passes over a run (the present rows, then the absent
--      ones): a lock taken after a later row's would break the order and
--      can deadlock against a push locking both in order;
--   3. one read, after every lock is granted (a fresh snapshot: the latest
--      counts), of the rows locked by ON CONFLICT (it returns nothing of
--      the rows it only locks): in the steady state, when the batch's
--      current windows exist, there is none and no read;
--   4. the decision, in memory, check by check in the caller's order;
--   5. one UPDATE of the counted rows and, when a placeholder was made,
--      one DELETE of those nothing was counted in, both by ctid: each such
--      row is locked by this transaction since step 2 (its ctid, from the
--      lock or the read, is that of its newest version and cannot change).
--
-- Every statement that reads counters by key probes the primary key once
-- per row (a LATERAL subquery, ON CONFLICT's own index lookup, or a ctid),
-- whatever the table's statistics and whether the plan is custom or
-- generic: a plain join of the arrays with the table could become a hash
-- join over a scan of the table with stale statistics.
--
-- When the lane's last seq is not below p_seq, the batch was applied before:
-- nothing is locked, created or counted, every check is denied, and the
-- counts are read as they are (step 3, for every row).
CREATE OR REPLACE FUNCTION {{check}}(
    p_node   text,
    p_seq    numeric,
    r_ns     text[],
    r_size   bigint[],
    r_start  bigint[],
    r_key    bytea[],
    r_create boolean[],
    c_cost   double precision[],
    c_nlim   integer[],
    l_cur    integer[],
    l_prev   integer[],
    l_weight double precision[],
    l_limit  double precision[],
    OUT applied boolean,
    OUT allowed boolean[],
    OUT cur     double precision[],
    OUT prev    double precision[]
) LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    n    integer := coalesce(array_length(r_ns, 1), 0);
    m    integer := coalesce(array_length(c_cost, 1), 0);
    nl   integer := coalesce(array_length(l_cur, 1), 0);
    cnt  double precision[] := array_fill(0::double precision, ARRAY[n]); -- counts (absent: 0)
    tids tid[] := array_fill(NULL::tid, ARRAY[n]);      -- ctids of the rows held
    made boolean[] := array_fill(false, ARRAY[n]); -- inserted here as a placeholder
    used boolean[] := array_fill(false, ARRAY[n]); -- counted by a check that passed
    rd   boolean[];     -- still to read once every row is locked
    vals double precision[];
    ins  integer[];     -- positions (in a run's rest) of the placeholders inserted
    walk refcursor;     -- the current windows of a run, locked as fetched
    v    double precision;
    t    tid;
    ok   boolean;
    lo   integer := 1; -- first limit of check k
    i    integer;
    j    integer;
    k    integer;
    p    integer;
BEGIN
    -- The lane row first: it serializes calls (and pushes) of one lane, so a
    -- retry racing its first attempt waits for it and then applies nothing.
    INSERT INTO {{lanes}} AS l (node, seq, updated_at) VALUES (p_node, p_seq, now())
    ON CONFLICT (node) DO UPDATE SET seq = EXCLUDED.seq, updated_at = EXCLUDED.updated_at
    WHERE l.seq < EXCLUDED.seq;
    applied := FOUND;
    rd := array_fill(NOT applied, ARRAY[n]); -- not applied: nothing is locked, all is read

    -- Lock every row in the caller's order, run by run (rows i..j of one
    -- kind). Each statement takes a fresh snapshot, and FOR UPDATE and ON
    -- CONFLICT lock (and FOR UPDATE returns) the newest version of a row
    -- changed by a caller they waited for. In every statement, the scan of
    -- the arrays drives the locking, one row after the other in their order.
    i := 1;
    WHILE applied AND i <= n LOOP
        j := i;
        WHILE j < n AND r_create[j + 1] = r_create[i] LOOP
            j := j + 1;
        END LOOP;
        IF NOT r_create[i] AND i = j THEN
            -- One previous window (e.g. one key's): the same, plainly.
            SELECT c.count INTO v FROM {{counters}} c
            WHERE c.namespace = r_ns[i] AND c.window_size = r_size[i]
              AND c.window_start = r_start[i] AND c.key = r_key[i]
            FOR UPDATE;
            cnt[i] := coalesce(v, 0);
        ELSIF NOT r_create[i] THEN
            -- Previous windows: lock the present ones, take their counts.
            SELECT array_agg(coalesce(x.count, 0) ORDER BY r.o) INTO vals
            FROM unnest(r_ns[i:j], r_size[i:j], r_start[i:j], r_key[i:j])
                 WITH ORDINALITY AS r(ns, size, start, key, o)
            LEFT JOIN LATERAL (
                SELECT c.count FROM {{counters}} c
                WHERE c.namespace = r.ns AND c.window_size = r.size
                  AND c.window_start = r.start AND c.key = r.key
                FOR UPDATE
            ) x ON true;
            cnt[i:j] := vals;
        ELSE
            -- Current windows: lock them one after the other, taking counts
            -- and ctids, up to the first absent one (a cursor fetched row by
            -- row runs the scan no further than the row fetched).
            p := i;
            IF i = j THEN -- one row: the same, plainly
                SELECT c.count, c.ctid INTO v, t FROM {{counters}} c
                WHERE c.namespace = r_ns[i] AND c.window_size = r_size[i]
                  AND c.window_start = r_start[i] AND c.key = r_key[i]
                FOR UPDATE;
                IF FOUND THEN
                    cnt[i] := v;
                    tids[i] := t;
                    p := i + 1;
                END IF;
            ELSE
                OPEN walk NO SCROLL FOR
                    SELECT x.count, x.ctid
                    FROM unnest(r_ns[i:j], r_size[i:j], r_start[i:j], r_key[i:j]) AS r(ns, size, start, key)
                    LEFT JOIN LATERAL (
                        SELECT c.count, c.ctid FROM {{counters}} c
                        WHERE c.namespace = r.ns AND c.window_size = r.size
                          AND c.window_start = r.start AND c.key = r.key
                        FOR UPDATE
                    ) x ON true;
                LOOP
                    FETCH walk INTO v, t;
                    EXIT WHEN NOT FOUND OR t IS NULL;
                    cnt[p] := v;
                    tids[p] := t;
                    p := p + 1;
                END LOOP;
                CLOSE walk;
            END IF;
            IF p <= j THEN
                -- From the first absent row on: insert the absent ones (a
                -- placeholder, locked by its insert; a concurrent insert of
                -- the same row is waited for), lock the present ones (WHERE
                -- false: locked, not updated, not returned), in order; read
                -- them below. RETURNING yields the inserted rows only.
                WITH put AS (
                    INSERT INTO {{counters}} AS c (namespace, window_size, window_start, key, count)
                    SELECT r.ns, r.size, r.start, r.key, 0
                    FROM unnest(r_ns[p:j], r_size[p:j], r_start[p:j], r_key[p:j])
                         WITH ORDINALITY AS r(ns, size, start, key, o)
                    ORDER BY r.o
                    ON CONFLICT (namespace, window_size, window_start, key)
                    DO UPDATE SET count = c.count WHERE false
                    RETURNING c.namespace, c.window_size, c.window_start, c.key
                )
                SELECT array_agg(r.o::integer) INTO ins
                FROM unnest(r_ns[p:j], r_size[p:j], r_start[p:j], r_key[p:j])
                     WITH ORDINALITY AS r(ns, size, start, key, o)
                JOIN put ON put.namespace = r.ns AND put.window_size = r.size
                    AND put.window_start = r.start AND put.key = r.key;
                IF ins IS NOT NULL THEN
                    FOREACH k IN ARRAY ins LOOP
                        made[p + k - 1] := true;
                    END LOOP;
                END IF;
                rd[p:j] := array_fill(true, ARRAY[j - p + 1]);
            END IF;
        END IF;
        i := j + 1;
    END LOOP;

    -- Read what the locking did not (all when not applied), one
    -- primary-key probe each: OFFSET 0 keeps the subquery a per-row probe,
    -- and rd[r.i], a one-time filter, skips it for rows already read.
    IF true = ANY (rd) THEN
        SELECT array_agg(CASE WHEN rd[r.i::integer] THEN coalesce(x.count, 0) ELSE cnt[r.i::integer] END ORDER BY r.i),
               array_agg(CASE WHEN rd[r.i::integer] THEN x.ctid ELSE tids[r.i::integer] END ORDER BY r.i)
        INTO cnt, tids
        FROM unnest(r_ns, r_size, r_start, r_key) WITH ORDINALITY AS r(ns, size, start, key, i)
        LEFT JOIN LATERAL (
            SELECT c.count, c.ctid FROM {{counters}} c
            WHERE rd[r.i::integer]
              AND c.namespace = r.ns AND c.window_size = r.size
              AND c.window_start = r.start AND c.key = r.key
            OFFSET 0
        ) x ON true;
    END IF;

    -- Decide and count, check by check in the caller's order.
    allowed := array_fill(false, ARRAY[m]);
    cur := array_fill(0::double precision, ARRAY[nl]);
    prev := array_fill(0::double precision, ARRAY[nl]);
    FOR k IN 1..m LOOP
        IF c_nlim[k] = 1 THEN -- one limit (the usual case): the same, in fewer steps
            ok := applied AND NOT (cnt[l_cur[lo]] + cnt[l_prev[lo]] * l_weight[lo] + c_cost[k] > l_limit[lo]);
            IF ok THEN
                cnt[l_cur[lo]] := cnt[l_cur[lo]] + c_cost[k];
                used[l_cur[lo]] := true;
            END IF;
            allowed[k] := ok;
            cur[lo] := cnt[l_cur[lo]];
            prev[lo] := cnt[l_prev[lo]];
            lo := lo + 1;
            CONTINUE;
        END IF;
        ok := applied;
        FOR j IN lo .. lo + c_nlim[k] - 1 LOOP
            IF cnt[l_cur[j]] + cnt[l_prev[j]] * l_weight[j] + c_cost[k] > l_limit[j] THEN
                ok := false;
            END IF;
        END LOOP;
        IF ok THEN
            FOR j IN lo .. lo + c_nlim[k] - 1 LOOP
                -- once per distinct current window (limits may share a size)
                IF j = lo OR NOT (l_cur[j] = ANY (l_cur[lo:j - 1])) THEN
                    cnt[l_cur[j]] := cnt[l_cur[j]] + c_cost[k];
                    used[l_cur[j]] := true;
                END IF;
            END LOOP;
        END IF;
        allowed[k] := ok;
        FOR j IN lo .. lo + c_nlim[k] - 1 LOOP
            cur[j] := cnt[l_cur[j]];
            prev[j] := cnt[l_prev[j]];
        END LOOP;
        lo := lo + c_nlim[k];
    END LOOP;

    -- Write back what was counted; drop placeholders nothing counted in.
    -- Both touch only rows locked above, found by ctid.
    IF applied AND n > 0 THEN
        UPDATE {{counters}} c SET count = u.total
        FROM unnest(tids, cnt, used) AS u(t, total, counted)
        WHERE u.counted AND c.ctid = u.t;
        IF true = ANY (made) THEN
            DELETE FROM {{counters}} c
            USING unnest(tids, made, used) AS u(t, placeholder, counted)
            WHERE u.placeholder AND NOT u.counted AND c.ctid = u.t;
        END IF;
    END IF;
END
$$;
