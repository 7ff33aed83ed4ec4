-- Buckets (strategy.BucketStore): their table, the function that applies a
-- push's bucket diffs, and {{check}} with bucket limits and the exact window
-- comparison.
--
-- The arithmetic is strategy's, in double precision, operation by
-- operation in the order strategy/bucket.go and strategy.WindowFits write
-- it, so that the node and the store decide every request the same way:
--
--   BucketLevel(at, level, rate, now) = max(0, level - max(0, now - at) * rate)
--   BucketFits:  level + cost * window <= burst * window
--   BucketAdd:   level := BucketLevel(...) + cost * window, at := max(at, now)
--   WindowFits:  fixed:   cur + cost <= limit
--                sliding: (cur + cost) * size + prev * (size - elapsed) <= limit * size
--
-- The products of the caller's values alone (cost * window, burst * window,
-- limit * size) come computed by the caller, in float64 like the rest: a
-- product beyond the double precision range is +Infinity there, as in Go,
-- where PostgreSQL would raise an error. BucketLevel is written out as
--
--   CASE WHEN now <= at THEN greatest(level, 0)
--        WHEN rate >= level THEN 0
--        ELSE greatest(level - (now - at)::double precision * rate, 0) END
--
-- The middle case is exact, not an approximation: with now - at >= 1 the
-- rounded product is at least rate, so the difference is at most 0, and it
-- keeps a rate near the top of the range from overflowing the product.

-- One row per bucket, keyed as strategy.BucketState: key is bytea, as in
-- {{counters}}, so that any key is stored byte-exact; kind is 1..255. at_ms
-- and level are the bucket's state; rate is the rate it last drained at,
-- which tells Purge when it is empty (BucketLevel at Purge's now is 0). A
-- bucket without a row is empty: at_ms 0, level 0. at_ms is never negative
-- (BucketAdd takes the max with the empty bucket's 0), which the functions
-- below rely on. An update rewrites one small row; no index covers at_ms,
-- level or rate, so updates are HOT where the page has room.
CREATE TABLE {{buckets}} (
    namespace text             NOT NULL,
    key       bytea            NOT NULL,
    kind      smallint         NOT NULL CHECK (kind BETWEEN 1 AND 255),
    window_ms bigint           NOT NULL CHECK (window_ms > 0),
    at_ms     bigint           NOT NULL CHECK (at_ms >= 0),
    level     double precision NOT NULL,
    rate      double precision NOT NULL,
    PRIMARY KEY (namespace, key, kind, window_ms)
) WITH (fillfactor = 80);

-- Roles that use an existing store were granted rights on its tables (once
-- migrated, New needs no CREATE): the new table gets the rights the
-- counters table has, so that they keep working after this upgrade.
DO $$
DECLARE
    g record;
BEGIN
    FOR g IN
        SELECT a.privilege_type, a.grantee, a.is_grantable
        FROM pg_class c, aclexplode(coalesce(c.relacl, acldefault('r', c.relowner))) AS a
        WHERE c.oid = '{{counters}}'::regclass
    LOOP
        EXECUTE format('GRANT %s ON {{buckets}} TO %s%s', g.privilege_type,
            CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE g.grantee::regrole::text END,
            CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
END
$$;

-- {{bucket_add}}: the bucket diffs of a push (push.go). The push statement
-- calls it once its lane row says the batch is new, before it writes the
-- batch's counters: every writer locks buckets before counters, each in
-- the order the callers sort them in, so that none deadlocks another.
--
-- The diffs come in rounds: round r holds the r-th diff of each bucket
-- that has one, sorted by bucket, and ends at p_ends[r]. One statement per
-- round names each of its buckets once, so that the diffs of a bucket
-- apply one after the other in the batch's order; the first round locks
-- every bucket of the batch, in order. Each diff is BucketAdd at p_at with
-- p_cw = cost * window, with no clamp at any capacity (a bucket may go
-- into debt); rate becomes the diff's. An absent bucket is inserted as
-- BucketAdd of the empty one. It returns the number of diffs applied.
CREATE FUNCTION {{bucket_add}}(
    p_ns   text[],
    p_key  bytea[],
    p_kind smallint[],
    p_win  bigint[],
    p_at   bigint[],
    p_cw   double precision[],
    p_rate double precision[],
    p_ends integer[]
) RETURNS integer LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    lo integer := 1;
    hi integer;
BEGIN
    FOREACH hi IN ARRAY coalesce(p_ends, '{}') LOOP
        -- EXCLUDED.at_ms is max(0, p_at): the same BucketLevel as p_at,
        -- since the row's at_ms is never negative.
        INSERT INTO {{buckets}} AS bk (namespace, key, kind, window_ms, at_ms, level, rate)
        SELECT d.ns, d.key, d.kind, d.win, greatest(d.at, 0), d.cw, d.rate
        FROM unnest(p_ns[lo:hi], p_key[lo:hi], p_kind[lo:hi], p_win[lo:hi], p_at[lo:hi], p_cw[lo:hi], p_rate[lo:hi])
             WITH ORDINALITY AS d(ns, key, kind, win, at, cw, rate, o)
        ORDER BY d.o
        ON CONFLICT (namespace, key, kind, window_ms) DO UPDATE SET
            level = CASE
                WHEN EXCLUDED.at_ms <= bk.at_ms THEN greatest(bk.level, 0)
                WHEN EXCLUDED.rate >= bk.level THEN 0
                ELSE greatest(bk.level - (EXCLUDED.at_ms - bk.at_ms)::double precision * EXCLUDED.rate, 0)
            END + EXCLUDED.level,
            at_ms = greatest(bk.at_ms, EXCLUDED.at_ms),
            rate = EXCLUDED.rate;
        lo := hi + 1;
    END LOOP;
    RETURN lo - 1;
END
$$;

-- {{check}}: CheckAndCount in one round trip (see check.go), the function
-- of 003 (same locking of counters, same placeholders, same replays) with
-- bucket limits and WindowFits. It is a new signature beside 003's, which
-- nodes of the previous release still running call until they are upgraded
-- (a later migration may drop it).
--
-- The caller passes:
--   r_*: the counter rows the checks read, as for 003;
--   b_*: the buckets the checks name, sorted (the order every writer locks
--        buckets in), each once;
--   c_*: per check, in the caller's order: its cost, its number of limits
--        and its Now (Unix ms);
--   l_*: per limit, flattened in check order:
--        window limits: l_cur, l_prev (indexes, 1-based, in r_*), l_size,
--          l_elapsed (ms since the current window's start), l_fixed,
--          l_limit and l_cap = limit * size; l_bucket 0;
--        bucket limits: l_bucket (index in b_*), l_size (window ms),
--          l_limit (the rate: Limit per window), l_cap = burst * window and
--          l_cw = cost * window; l_cur, l_prev 0.
-- It returns whether (p_node, p_seq) was applied, per check whether it
-- passed, and per limit the state right after its check: cur and prev for
-- window limits, bucket_at and bucket_level for bucket limits (0 for the
-- other kind).
--
-- After the lane row, it locks the buckets (one INSERT ... ON CONFLICT DO
-- UPDATE ... WHERE false, which inserts each absent one as a placeholder,
-- an empty bucket, and locks each present one, in order) and reads them,
-- then locks and reads the counter rows as 003 does. A check passes when
-- every limit fits; when it passes with a cost above 0, the cost is counted
-- once in each distinct current window and added once to each distinct
-- bucket (BucketAdd at Now, at the rate of the first limit naming it).
-- Placeholders of either kind that nothing was counted in are dropped.
--
-- When the lane's last seq is not below p_seq, the batch was applied before:
-- nothing is locked, created or counted, every check is denied, and the
-- state is read as it is.
CREATE FUNCTION {{check}}(
    p_node    text,
    p_seq     numeric,
    r_ns      text[],
    r_size    bigint[],
    r_start   bigint[],
    r_key     bytea[],
    r_create  boolean[],
    b_ns      text[],
    b_key     bytea[],
    b_kind    smallint[],
    b_win     bigint[],
    c_cost    double precision[],
    c_nlim    integer[],
    c_now     bigint[],
    l_cur     integer[],
    l_prev    integer[],
    l_bucket  integer[],
    l_size    bigint[],
    l_elapsed bigint[],
    l_fixed   boolean[],
    l_limit   double precision[],
    l_cap     double precision[],
    l_cw      double precision[],
    OUT applied      boolean,
    OUT allowed      boolean[],
    OUT cur          double precision[],
    OUT prev         double precision[],
    OUT bucket_at    bigint[],
    OUT bucket_level double precision[]
) LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    n     integer := coalesce(array_length(r_ns, 1), 0);
    nb    integer := coalesce(array_length(b_ns, 1), 0);
    m     integer := coalesce(array_length(c_cost, 1), 0);
    nl    integer := coalesce(array_length(l_cur, 1), 0);
    cnt   double precision[] := array_fill(0::double precision, ARRAY[n]); -- counts (absent: 0)
    tids  tid[] := array_fill(NULL::tid, ARRAY[n]);      -- ctids of the rows held
    made  boolean[] := array_fill(false, ARRAY[n]); -- inserted here as a placeholder
    used  boolean[] := array_fill(false, ARRAY[n]); -- counted by a check that passed
    bat   bigint[];             -- buckets: at_ms (absent: 0)
    blv   double precision[];   -- buckets: level (absent: 0)
    brate double precision[] := array_fill(0::double precision, ARRAY[nb]); -- rate to record
    btids tid[];                -- buckets: ctids of the rows held
    bmade boolean[] := array_fill(false, ARRAY[nb]);
    bused boolean[] := array_fill(false, ARRAY[nb]);
    lv    double precision[] := array_fill(0::double precision, ARRAY[nl]); -- BucketLevel per limit
    rd    boolean[];     -- still to read once every row is locked
    vals  double precision[];
    ins   integer[];     -- positions (in a run's rest) of the placeholders inserted
    walk  refcursor;     -- the current windows of a run, locked as fetched
    v     double precision;
    t     tid;
    ok    boolean;
    lo    integer := 1; -- first limit of check k
    hi    integer;      -- last limit of check k
    bi    integer;
    i     integer;
    j     integer;
    k     integer;
    p     integer;
BEGIN
    -- The lane row first: it serializes calls (and pushes) of one lane, so a
    -- retry racing its first attempt waits for it and then applies nothing.
    INSERT INTO {{lanes}} AS l (node, seq, updated_at) VALUES (p_node, p_seq, now())
    ON CONFLICT (node) DO UPDATE SET seq = EXCLUDED.seq, updated_at = EXCLUDED.updated_at
    WHERE l.seq < EXCLUDED.seq;
    applied := FOUND;
    rd := array_fill(NOT applied, ARRAY[n]); -- not applied: nothing is locked, all is read

    -- Buckets: lock them in the caller's order (absent ones inserted as
    -- placeholders, which locks them; present ones locked, not updated, not
    -- returned), then read them all (a fresh snapshot: the latest states).
    IF applied AND nb > 0 THEN
        WITH put AS (
            INSERT INTO {{buckets}} AS bk (namespace, key, kind, window_ms, at_ms, level, rate)
            SELECT r.ns, r.key, r.kind, r.win, 0, 0, 0
            FROM unnest(b_ns, b_key, b_kind, b_win) WITH ORDINALITY AS r(ns, key, kind, win, o)
            ORDER BY r.o
            ON CONFLICT (namespace, key, kind, window_ms)
            DO UPDATE SET level = bk.level WHERE false
            RETURNING bk.namespace, bk.key, bk.kind, bk.window_ms
        )
        SELECT array_agg(r.o::integer) INTO ins
        FROM unnest(b_ns, b_key, b_kind, b_win) WITH ORDINALITY AS r(ns, key, kind, win, o)
        JOIN put ON put.namespace = r.ns AND put.key = r.key
            AND put.kind = r.kind AND put.window_ms = r.win;
        IF ins IS NOT NULL THEN
            FOREACH k IN ARRAY ins LOOP
                bmade[k] := true;
            END LOOP;
        END IF;
    END IF;
    IF nb > 0 THEN
        SELECT array_agg(coalesce(x.at_ms, 0) ORDER BY r.o),
               array_agg(coalesce(x.level, 0) ORDER BY r.o),
               array_agg(x.ctid ORDER BY r.o)
        INTO bat, blv, btids
        FROM unnest(b_ns, b_key, b_kind, b_win) WITH ORDINALITY AS r(ns, key, kind, win, o)
        LEFT JOIN LATERAL (
            SELECT bk.at_ms, bk.level, bk.ctid FROM {{buckets}} bk
            WHERE bk.namespace = r.ns AND bk.key = r.key
              AND bk.kind = r.kind AND bk.window_ms = r.win
            OFFSET 0
        ) x ON true;
    END IF;

    -- Counter rows: locked and read exactly as in 003 (see 003_check_set.sql).
    i := 1;
    WHILE applied AND i <= n LOOP
        j := i;
        WHILE j < n AND r_create[j + 1] = r_create[i] LOOP
            j := j + 1;
        END LOOP;
        IF NOT r_create[i] AND i = j THEN
            SELECT c.count INTO v FROM {{counters}} c
            WHERE c.namespace = r_ns[i] AND c.window_size = r_size[i]
              AND c.window_start = r_start[i] AND c.key = r_key[i]
            FOR UPDATE;
            cnt[i] := coalesce(v, 0);
        ELSIF NOT r_create[i] THEN
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
            p := i;
            IF i = j THEN
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
    bucket_at := array_fill(0::bigint, ARRAY[nl]);
    bucket_level := array_fill(0::double precision, ARRAY[nl]);
    FOR k IN 1..m LOOP
        hi := lo + c_nlim[k] - 1;
        ok := applied;
        FOR j IN lo .. hi LOOP
            EXIT WHEN NOT ok;
            bi := l_bucket[j];
            IF bi > 0 THEN -- BucketLevel at Now, BucketFits
                IF c_now[k] <= bat[bi] THEN
                    lv[j] := greatest(blv[bi], 0);
                ELSIF l_limit[j] >= blv[bi] THEN
                    lv[j] := 0;
                ELSE
                    lv[j] := greatest(blv[bi] - (c_now[k] - bat[bi])::double precision * l_limit[j], 0);
                END IF;
                ok := lv[j] + l_cw[j] <= l_cap[j];
            ELSIF l_fixed[j] THEN
                ok := cnt[l_cur[j]] + c_cost[k] <= l_limit[j];
            ELSE
                ok := (cnt[l_cur[j]] + c_cost[k]) * l_size[j]::double precision
                      + cnt[l_prev[j]] * (l_size[j] - l_elapsed[j])::double precision <= l_cap[j];
            END IF;
        END LOOP;
        IF ok AND c_cost[k] > 0 THEN
            FOR j IN lo .. hi LOOP
                bi := l_bucket[j];
                IF bi > 0 THEN
                    -- once per distinct bucket (limits may name one twice)
                    IF j = lo OR NOT (bi = ANY (l_bucket[lo:j - 1])) THEN
                        blv[bi] := lv[j] + l_cw[j];
                        bat[bi] := greatest(bat[bi], c_now[k]);
                        brate[bi] := l_limit[j];
                        bused[bi] := true;
                    END IF;
                -- once per distinct current window (limits may share a size)
                ELSIF j = lo OR NOT (l_cur[j] = ANY (l_cur[lo:j - 1])) THEN
                    cnt[l_cur[j]] := cnt[l_cur[j]] + c_cost[k];
                    used[l_cur[j]] := true;
                END IF;
            END LOOP;
        END IF;
        allowed[k] := ok;
        FOR j IN lo .. hi LOOP
            bi := l_bucket[j];
            IF bi > 0 THEN
                bucket_at[j] := bat[bi];
                bucket_level[j] := blv[bi];
            ELSE
                cur[j] := cnt[l_cur[j]];
                prev[j] := cnt[l_prev[j]];
            END IF;
        END LOOP;
        lo := hi + 1;
    END LOOP;

    -- Write back what was counted; drop placeholders nothing counted in.
    -- All of it touches only rows locked above, found by ctid.
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
    IF applied AND nb > 0 THEN
        UPDATE {{buckets}} bk SET at_ms = u.at, level = u.lvl, rate = u.rate
        FROM unnest(btids, bat, blv, brate, bused) AS u(t, at, lvl, rate, counted)
        WHERE u.counted AND bk.ctid = u.t;
        IF true = ANY (bmade) THEN
            DELETE FROM {{buckets}} bk
            USING unnest(btids, bmade, bused) AS u(t, placeholder, counted)
            WHERE u.placeholder AND NOT u.counted AND bk.ctid = u.t;
        END IF;
    END IF;
END
$$;
