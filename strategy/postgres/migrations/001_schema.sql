-- The schema of strategy/postgres: tables and the two functions behind
-- its statements. migrate.go applies it, with
-- any file numbered after it, in one transaction.
--
-- {{counters}}, {{lanes}}, {{buckets}}, {{anchored}}, {{logs}},
-- {{log_entries}}, {{check}} and {{bucket_add}} are replaced by the quoted,
-- schema-qualified names of Config before this file runs; values never are
-- (every value in the store's statements is a bind parameter).
--
-- The arithmetic is internal/arith's, in double precision, operation by
-- operation in the order its functions write it, so that the node and the store decide
-- every request the same way:
--
--   BucketLevel(at, level, rate, now) = max(0, level - max(0, now - at) * rate)
--   BucketFits:   level + cost * window <= burst * window
--   BucketAdd:    level := BucketLevel(...) + cost * window, at := max(at, now)
--   WindowFits:   fixed:   cur + cost <= limit
--                 sliding: (cur + cost) * size + prev * (size - elapsed) <= limit * size
--   SpanFits:     cur := counts[1] + (counts[2] + ... + counts[k-1]), the
--                 parenthesis summed from 0 in that order; then WindowFits
--                 (sliding) of cur and counts[k]
--   AnchoredCount(at, level, now) = level when level > 0 and now < at + window, else 0
--   AnchoredFits: count + cost <= limit
--   AnchoredAdd:  open: level := level + cost (unless now + window <= at: a hit
--                 of a window that closed before this one opened); closed: at := now,
--                 level := cost
--   Log.Trim:     sum := sum - cost of each entry with at <= now - window,
--                 oldest first; sum := 0 when that empties the log
--   LogFits:      sum + cost <= limit
--   Log.Add:      the entry at at gets cost added (made when absent), sum := sum + cost
--   RetryAt:      sum := sum - cost of each entry, oldest first (0 after
--                 the last), until sum + cost <= limit: that entry's at + window
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

-- One row per counter. Window start and size are bigint milliseconds (no
-- 2038 overflow); counts are double precision (fractional hits, refunds).
-- key is bytea because PostgreSQL text cannot hold NUL or invalid UTF-8 and
-- the library stores every key byte-exact. The primary key serves every
-- read: GetCounters and Purge scan by its prefix (namespace, window_size,
-- window_start). fillfactor leaves room on each page for HOT updates of
-- count, which no index covers.
CREATE TABLE {{counters}} (
    namespace    text             NOT NULL,
    window_size  bigint           NOT NULL CHECK (window_size > 0),
    window_start bigint           NOT NULL,
    key          bytea            NOT NULL,
    count        double precision NOT NULL,
    PRIMARY KEY (namespace, window_size, window_start, key)
) WITH (fillfactor = 80);

-- The last batch applied per push lane (Batch.Node). seq is a uint64 kept
-- exact in numeric(20,0); updated_at (server clock) is when the lane last
-- applied a batch, for Purge. No index on updated_at: it would stop the HOT
-- updates every push makes, and Purge scans this small table hourly.
--
-- A check call also keeps its decisions: decided is the seq of the call
-- whose checks' decisions the row holds, in the caller's order, in
-- decisions. A push sets seq alone, so a retry of a seq gets the decisions
-- only while seq = decided = that seq: a push that took the seq, or a
-- newer seq of any call, leaves none for it. Both are NULL in lanes that
-- only pushed.
CREATE TABLE {{lanes}} (
    node       text          PRIMARY KEY,
    seq        numeric(20,0) NOT NULL CHECK (seq >= 0),
    updated_at timestamptz   NOT NULL DEFAULT now(),
    decided    numeric(20,0),
    decisions  boolean[]
) WITH (fillfactor = 50);

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

-- One row per anchored window that a key has (or had: Purge deletes the
-- closed ones), keyed as a bucket without a kind: its opening instant and
-- its count. A key without a row has no window (at_ms 0, level 0, which is
-- also what a placeholder row holds: a closed window).
CREATE TABLE {{anchored}} (
    namespace text             NOT NULL,
    key       bytea            NOT NULL,
    window_ms bigint           NOT NULL CHECK (window_ms > 0),
    at_ms     bigint           NOT NULL,
    level     double precision NOT NULL,
    PRIMARY KEY (namespace, key, window_ms)
) WITH (fillfactor = 80);

-- One row per sliding log: the header. id names the log's entries; sum is
-- arith.Log's Sum, kept by every writer as Log.Trim and Log.Add change
-- it; entries is how many entries the log has (so that a trim knows when
-- it empties the log) and newest_ms the instant of the newest one (0 and
-- meaningless when entries is 0). Every writer of a log's entries holds
-- its header's row lock, so that the header and the entries agree.
CREATE TABLE {{logs}} (
    namespace text             NOT NULL,
    key       bytea            NOT NULL,
    window_ms bigint           NOT NULL CHECK (window_ms > 0),
    id        bigint           GENERATED ALWAYS AS IDENTITY,
    newest_ms bigint           NOT NULL,
    sum       double precision NOT NULL,
    entries   integer          NOT NULL CHECK (entries >= 0),
    PRIMARY KEY (namespace, key, window_ms)
) WITH (fillfactor = 80);

-- One row per entry of a log: the cost admitted at one millisecond (hits
-- of the same millisecond merged). A hit adds or changes one row and a
-- trim deletes the rows that stopped weighing, through the primary key's
-- order by instant: no statement rewrites a log.
CREATE TABLE {{log_entries}} (
    log_id bigint           NOT NULL,
    at_ms  bigint           NOT NULL,
    cost   double precision NOT NULL,
    PRIMARY KEY (log_id, at_ms)
) WITH (fillfactor = 90);

-- {{bucket_add}}: the bucket, anchored and log diffs of a push (push.go).
-- The push statement calls it once its lane row says the batch is new,
-- before it writes the batch's counters: every writer locks buckets,
-- anchored windows and logs before counters, each in the order the callers
-- sort them in, so that none deadlocks another.
--
-- The diffs come in segments, each ending at p_ends[s]: the buckets'
-- (kinds other than 2 and 3) first, then the anchored windows' (kind 2),
-- then the logs' (kind 3), the order every writer locks those tables in;
-- within each, in rounds: round r holds the r-th diff of each bucket,
-- window or log that has one, sorted by it (bucketKey.compare). One
-- statement per round names each once, so that the diffs of one apply one
-- after the other in the batch's order; the first round of each table
-- locks every row of the batch there, in order.
--
--   buckets:  BucketAdd at p_at with p_cw = cost * window, with no clamp
--             at any capacity (a bucket may go into debt); rate becomes
--             the diff's. An absent bucket is inserted as BucketAdd of the
--             empty one;
--   anchored: AnchoredAdd of p_cost at p_at (an absent window: opened);
--   logs:     Log.Add of p_cost at p_at: the header locked (made when
--             absent), the entry added to or made, then the header's sum,
--             entries and newest_ms.
-- It returns the number of diffs applied.
CREATE FUNCTION {{bucket_add}}(
    p_ns   text[],
    p_key  bytea[],
    p_kind smallint[],
    p_win  bigint[],
    p_at   bigint[],
    p_cw   double precision[],
    p_rate double precision[],
    p_ends integer[],
    p_cost double precision[]
) RETURNS integer LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    lo  integer := 1;
    hi  integer;
    ids bigint[];
BEGIN
    FOREACH hi IN ARRAY coalesce(p_ends, '{}') LOOP
        IF p_kind[lo] = 2 THEN
            -- Both SET expressions read the row as it was.
            INSERT INTO {{anchored}} AS a (namespace, key, window_ms, at_ms, level)
            SELECT d.ns, d.key, d.win, d.at, d.cost
            FROM unnest(p_ns[lo:hi], p_key[lo:hi], p_win[lo:hi], p_at[lo:hi], p_cost[lo:hi])
                 WITH ORDINALITY AS d(ns, key, win, at, cost, o)
            ORDER BY d.o
            ON CONFLICT (namespace, key, window_ms) DO UPDATE SET
                at_ms = CASE WHEN a.level > 0 AND EXCLUDED.at_ms < a.at_ms + a.window_ms
                             THEN a.at_ms ELSE EXCLUDED.at_ms END,
                level = CASE WHEN a.level > 0 AND EXCLUDED.at_ms < a.at_ms + a.window_ms
                             THEN CASE WHEN EXCLUDED.at_ms + a.window_ms <= a.at_ms
                                       THEN a.level -- a hit of a window that closed before this one opened
                                       ELSE a.level + EXCLUDED.level END
                             ELSE EXCLUDED.level END;
        ELSIF p_kind[lo] = 3 THEN
            -- Headers: made (empty) when absent, locked when present, in order.
            INSERT INTO {{logs}} AS g (namespace, key, window_ms, newest_ms, sum, entries)
            SELECT d.ns, d.key, d.win, 0, 0, 0
            FROM unnest(p_ns[lo:hi], p_key[lo:hi], p_win[lo:hi]) WITH ORDINALITY AS d(ns, key, win, o)
            ORDER BY d.o
            ON CONFLICT (namespace, key, window_ms) DO UPDATE SET entries = g.entries WHERE false;
            SELECT array_agg(x.id ORDER BY d.o) INTO ids
            FROM unnest(p_ns[lo:hi], p_key[lo:hi], p_win[lo:hi]) WITH ORDINALITY AS d(ns, key, win, o)
            CROSS JOIN LATERAL (
                SELECT g.id FROM {{logs}} g
                WHERE g.namespace = d.ns AND g.key = d.key AND g.window_ms = d.win
                OFFSET 0
            ) x;
            -- The entries (one per log in a round), then the headers, each
            -- through its primary key (ON CONFLICT's probe). xmax = 0: the
            -- entry was made, not added to.
            WITH put AS (
                INSERT INTO {{log_entries}} AS e (log_id, at_ms, cost)
                SELECT u.id, u.at, u.cost
                FROM unnest(ids, p_at[lo:hi], p_cost[lo:hi]) WITH ORDINALITY AS u(id, at, cost, o)
                ORDER BY u.o
                ON CONFLICT (log_id, at_ms) DO UPDATE SET cost = e.cost + EXCLUDED.cost
                RETURNING e.log_id, (e.xmax = 0) AS made
            )
            INSERT INTO {{logs}} AS g (namespace, key, window_ms, newest_ms, sum, entries)
            SELECT d.ns, d.key, d.win, d.at, d.cost, put.made::integer
            FROM unnest(p_ns[lo:hi], p_key[lo:hi], p_win[lo:hi], p_at[lo:hi], p_cost[lo:hi], ids)
                 WITH ORDINALITY AS d(ns, key, win, at, cost, id, o)
            JOIN put ON put.log_id = d.id
            ORDER BY d.o
            ON CONFLICT (namespace, key, window_ms) DO UPDATE SET
                sum = g.sum + EXCLUDED.sum,
                entries = g.entries + EXCLUDED.entries,
                newest_ms = CASE WHEN g.entries = 0 THEN EXCLUDED.newest_ms
                                 ELSE greatest(g.newest_ms, EXCLUDED.newest_ms) END;
        ELSE
            -- Buckets: BucketAdd of each diff. EXCLUDED.at_ms is
            -- max(0, p_at): the same BucketLevel as p_at, since the row's
            -- at_ms is never negative.
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
        END IF;
        lo := hi + 1;
    END LOOP;
    RETURN lo - 1;
END
$$;

-- {{check}}: CheckAndCount in one round trip (see check.go).
--
-- The caller passes:
--   r_*: the counter rows the checks read, sorted by primary key (the order
--        every writer of the store locks rows in, so concurrent callers and
--        pushes never deadlock), each once; r_create marks current windows,
--        which are created (count 0, a placeholder) when absent so that
--        they can be locked (a precision limit reads Depth windows of its
--        size: its current one and the ones before it, which are not
--        created: an absent one counts 0);
--   b_*: the buckets the checks name, sorted (the order every writer locks
--        buckets in), each once;
--   a_*: the anchored windows, g_*: the logs, the same way;
--   c_*: per check, in the caller's order: its cost, its number of limits
--        and its Now (Unix ms);
--   l_*: per limit, flattened in check order: l_kind (0 a window limit, 2
--        an anchored window, 3 a log, any other a bucket), l_ref (the
--        index, 1-based, of its bucket in b_*, of its window in a_*, of its
--        log in g_*, or for a window limit of its first row in w_row),
--        l_first (the first limit of its check to name that current
--        window, bucket, anchored window or log: the one that counts the
--        cost there), l_size (window ms; for a window limit the size of the
--        windows it counts in), l_limit, and:
--          window limits: l_nrow (how many windows it reads: 2, or the
--            Depth of a precision limit), l_elapsed (ms since its current
--            window's start), l_fixed, l_cap = limit * size;
--          bucket limits: l_cap = burst * window, l_cw = cost * window;
--   w_row: per window limit, the indexes in r_* of the windows it reads,
--        newest (the current one) first.
-- It returns whether (p_node, p_seq) was applied, per check whether it
-- passed, per element of w_row its row's count right after the check of
-- its limit, and per limit the state right after its check: st_at and
-- st_level (a bucket's At and Level, an anchored window's opening instant
-- and count, a log's newest instant and sum; 0 for window limits) and
-- st_retry (a log that refuses a denied check: arith.RetryAt).
--
-- It runs a few statements whatever the batch's size:
--
--   1. the lane row first: it serializes calls and pushes of a lane, so a
--      retry racing its first attempt waits for it, then applies nothing;
--   2. the buckets, the anchored windows and the logs' headers, each table
--      in the order of its arrays: absent ones inserted as placeholders,
--      present ones locked, by one INSERT ... ON CONFLICT DO UPDATE ...
--      WHERE false each; then one read of each;
--   3. every counter row locked in the caller's order, run by run of
--      consecutive rows of one kind, each run by one statement whose scan
--      of the arrays drives the locking, one row after the other:
--      - previous windows: one SELECT ... FOR UPDATE, which also returns
--        their counts;
--      - current windows: one SELECT ... FOR UPDATE as well, returning
--        counts and ctids, but fetched through a cursor one row at a time
--        so that it stops at the first absent row; from that row on, one
--        INSERT ... ON CONFLICT DO UPDATE ... WHERE false, which inserts
--        each absent row as a placeholder and locks each present one
--        without writing it, in order, as a push does (waiting like a
--        push for a concurrent insert of the same row).
--      Never two passes over a run (the present rows, then the absent
--      ones): a lock taken after a later row's would break the order and
--      can deadlock against a push locking both in order;
--   4. one read, after every lock is granted (a fresh snapshot: the latest
--      counts), of the rows locked by ON CONFLICT (it returns nothing of
--      the rows it only locks): in the steady state, when the batch's
--      current windows exist, there is none and no read;
--   5. the logs trimmed, for all checks at once, through the earliest
--      instant a check of the batch trims each to: the same entries,
--      subtracted in the same order, that the first of those checks would;
--   6. check by check in the caller's order: the check's logs trimmed at
--      its Now (one DELETE of a log's expired entries, which returns their
--      costs; skipped when no entry can be left to trim); the decision
--      (WindowFits, SpanFits for precision limits, BucketLevel and
--      BucketFits, AnchoredFits, LogFits); when the check passes with a
--      cost above 0, the count, once in each distinct current window,
--      bucket (BucketAdd at Now, at the rate of the first limit naming
--      it), anchored window (AnchoredAdd at Now) and log (Log.Add at Now:
--      one upsert of an entry; the hits that follow in the batch at the
--      same instant add to its cost here, each in turn, and it is written
--      once, before the log is next trimmed or read and at the end). A
--      denied check that a log refuses walks that log's entries, oldest
--      first, for RetryAt;
--   7. the changed rows written back and the placeholders nothing was
--      counted in dropped, by ctid: each such row is locked by this
--      transaction since step 2 or 3 (its ctid, from the lock or the read,
--      is that of its newest version and cannot change);
--   8. the decisions kept in the lane's row with p_seq (decided).
--
-- Every statement that reads rows by key probes the primary key once per
-- row (a LATERAL subquery, ON CONFLICT's own index lookup, or a ctid),
-- whatever the table's statistics and whether the plan is custom or
-- generic: a plain join of the arrays with the table could become a hash
-- join over a scan of the table with stale statistics.
--
-- When the lane's last seq is not below p_seq, the batch was applied
-- before: nothing is created or counted and the state is read as it is;
-- only the logs' headers are locked, because each check still trims its
-- logs at its Now, as arith.Log.Trim would in the memory store, so
-- that a log's sum goes through the same steps in both. When the lane's
-- seq and decided are both p_seq (a retry of the call that set them, the
-- same checks in the same order, whose reply was lost), each check is
-- returned as decided then, allowed or not; otherwise (a seq below the
-- lane's, whose decisions are no longer kept, or one a push set) every
-- check is denied.
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
    a_ns      text[],
    a_key     bytea[],
    a_win     bigint[],
    g_ns      text[],
    g_key     bytea[],
    g_win     bigint[],
    c_cost    double precision[],
    c_nlim    integer[],
    c_now     bigint[],
    l_kind    smallint[],
    l_ref     integer[],
    l_first   boolean[],
    l_size    bigint[],
    l_limit   double precision[],
    l_nrow    integer[],
    l_elapsed bigint[],
    l_fixed   boolean[],
    l_cap     double precision[],
    l_cw      double precision[],
    w_row     integer[],
    OUT applied  boolean,
    OUT allowed  boolean[],
    OUT counts   double precision[],
    OUT st_at    bigint[],
    OUT st_level double precision[],
    OUT st_retry bigint[]
) LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    n     integer := coalesce(array_length(r_ns, 1), 0);
    nb    integer := coalesce(array_length(b_ns, 1), 0);
    na    integer := coalesce(array_length(a_ns, 1), 0);
    ng    integer := coalesce(array_length(g_ns, 1), 0);
    m     integer := coalesce(array_length(c_cost, 1), 0);
    nl    integer := coalesce(array_length(l_kind, 1), 0);
    cnt   double precision[] := array_fill(0::double precision, ARRAY[n]); -- counts (absent: 0)
    tids  tid[] := array_fill(NULL::tid, ARRAY[n]);      -- ctids of the rows held
    made  boolean[] := array_fill(false, ARRAY[n]); -- inserted here as a placeholder
    used  boolean[] := array_fill(false, ARRAY[n]); -- counted by a check that passed
    bat   bigint[];             -- buckets: at_ms (absent: 0)
    blv   double precision[];   -- buckets: level (absent: 0)
    brate double precision[] := array_fill(0::double precision, ARRAY[nb]); -- rate to record
    btids tid[];
    bmade boolean[] := array_fill(false, ARRAY[nb]);
    bused boolean[] := array_fill(false, ARRAY[nb]);
    lv    double precision[] := array_fill(0::double precision, ARRAY[nl]); -- BucketLevel per limit
    aat   bigint[];             -- anchored: at_ms (absent: 0)
    alv   double precision[];   -- anchored: level (absent: 0)
    atids tid[];
    amade boolean[] := array_fill(false, ARRAY[na]);
    aused boolean[] := array_fill(false, ARRAY[na]);
    gid   bigint[];             -- logs: id (absent: NULL)
    gsum  double precision[];   -- logs: sum (absent: 0)
    gn    integer[];            -- logs: entries (absent: 0)
    gnew  bigint[];             -- logs: newest_ms
    gtids tid[];
    gmade boolean[] := array_fill(false, ARRAY[ng]);
    gdirt boolean[] := array_fill(false, ARRAY[ng]); -- header to write back
    gcut  bigint[] := array_fill(NULL::bigint, ARRAY[ng]); -- no entry at or before this instant
    pat   bigint[] := array_fill(NULL::bigint, ARRAY[ng]); -- logs: the entry last counted in (NULL: none)
    pcost double precision[] := array_fill(0::double precision, ARRAY[ng]); -- its cost
    ptid  tid[] := array_fill(NULL::tid, ARRAY[ng]);    -- its row
    pdirt boolean[] := array_fill(false, ARRAY[ng]);    -- its cost not written yet
    costs double precision[];
    rd    boolean[];     -- still to read once every row is locked
    vals  double precision[];
    ins   integer[];     -- positions (in a run's rest) of the placeholders inserted
    walk  refcursor;     -- the current windows of a run, locked as fetched
    kept  boolean[];     -- the decisions kept for a retry of p_seq
    e     record;
    v     double precision;
    s     double precision;
    t     tid;
    ok    boolean;
    fresh boolean;
    cut   bigint;
    lo    integer := 1; -- first limit of check k
    hi    integer;      -- last limit of check k
    x     integer;
    w     integer;
    q     integer;
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

    -- Buckets: locked in the caller's order (absent ones inserted as
    -- placeholders, which locks them; present ones locked, not updated, not
    -- returned), then read all (a fresh snapshot: the latest states).
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
        SELECT array_agg(coalesce(y.at_ms, 0) ORDER BY r.o),
               array_agg(coalesce(y.level, 0) ORDER BY r.o),
               array_agg(y.ctid ORDER BY r.o)
        INTO bat, blv, btids
        FROM unnest(b_ns, b_key, b_kind, b_win) WITH ORDINALITY AS r(ns, key, kind, win, o)
        LEFT JOIN LATERAL (
            SELECT bk.at_ms, bk.level, bk.ctid FROM {{buckets}} bk
            WHERE bk.namespace = r.ns AND bk.key = r.key
              AND bk.kind = r.kind AND bk.window_ms = r.win
            OFFSET 0
        ) y ON true;
    END IF;

    -- Anchored windows: the same (a placeholder is a closed window).
    IF applied AND na > 0 THEN
        WITH put AS (
            INSERT INTO {{anchored}} AS a (namespace, key, window_ms, at_ms, level)
            SELECT r.ns, r.key, r.win, 0, 0
            FROM unnest(a_ns, a_key, a_win) WITH ORDINALITY AS r(ns, key, win, o)
            ORDER BY r.o
            ON CONFLICT (namespace, key, window_ms)
            DO UPDATE SET level = a.level WHERE false
            RETURNING a.namespace, a.key, a.window_ms
        )
        SELECT array_agg(r.o::integer) INTO ins
        FROM unnest(a_ns, a_key, a_win) WITH ORDINALITY AS r(ns, key, win, o)
        JOIN put ON put.namespace = r.ns AND put.key = r.key AND put.window_ms = r.win;
        IF ins IS NOT NULL THEN
            FOREACH k IN ARRAY ins LOOP
                amade[k] := true;
            END LOOP;
        END IF;
    END IF;
    IF na > 0 THEN
        SELECT array_agg(coalesce(y.at_ms, 0) ORDER BY r.o),
               array_agg(coalesce(y.level, 0) ORDER BY r.o),
               array_agg(y.ctid ORDER BY r.o)
        INTO aat, alv, atids
        FROM unnest(a_ns, a_key, a_win) WITH ORDINALITY AS r(ns, key, win, o)
        LEFT JOIN LATERAL (
            SELECT a.at_ms, a.level, a.ctid FROM {{anchored}} a
            WHERE a.namespace = r.ns AND a.key = r.key AND a.window_ms = r.win
            OFFSET 0
        ) y ON true;
    END IF;

    -- Logs' headers: the same when applied; on a replay the present ones
    -- are locked (FOR UPDATE, in order) and none is made.
    IF applied AND ng > 0 THEN
        WITH put AS (
            INSERT INTO {{logs}} AS g (namespace, key, window_ms, newest_ms, sum, entries)
            SELECT r.ns, r.key, r.win, 0, 0, 0
            FROM unnest(g_ns, g_key, g_win) WITH ORDINALITY AS r(ns, key, win, o)
            ORDER BY r.o
            ON CONFLICT (namespace, key, window_ms)
            DO UPDATE SET entries = g.entries WHERE false
            RETURNING g.namespace, g.key, g.window_ms
        )
        SELECT array_agg(r.o::integer) INTO ins
        FROM unnest(g_ns, g_key, g_win) WITH ORDINALITY AS r(ns, key, win, o)
        JOIN put ON put.namespace = r.ns AND put.key = r.key AND put.window_ms = r.win;
        IF ins IS NOT NULL THEN
            FOREACH k IN ARRAY ins LOOP
                gmade[k] := true;
            END LOOP;
        END IF;
    END IF;
    IF ng > 0 THEN
        SELECT array_agg(y.id ORDER BY r.o),
               array_agg(coalesce(y.sum, 0) ORDER BY r.o),
               array_agg(coalesce(y.entries, 0) ORDER BY r.o),
               array_agg(coalesce(y.newest_ms, 0) ORDER BY r.o),
               array_agg(y.ctid ORDER BY r.o)
        INTO gid, gsum, gn, gnew, gtids
        FROM unnest(g_ns, g_key, g_win) WITH ORDINALITY AS r(ns, key, win, o)
        LEFT JOIN LATERAL (
            SELECT g.id, g.sum, g.entries, g.newest_ms, g.ctid FROM {{logs}} g
            WHERE g.namespace = r.ns AND g.key = r.key AND g.window_ms = r.win
            FOR UPDATE
        ) y ON true;
    END IF;

    -- Counter rows: locked in the caller's order, run by run (rows i..j of
    -- one kind). Each statement takes a fresh snapshot, and FOR UPDATE and
    -- ON CONFLICT lock (and FOR UPDATE returns) the newest version of a row
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
            SELECT array_agg(coalesce(y.count, 0) ORDER BY r.o) INTO vals
            FROM unnest(r_ns[i:j], r_size[i:j], r_start[i:j], r_key[i:j])
                 WITH ORDINALITY AS r(ns, size, start, key, o)
            LEFT JOIN LATERAL (
                SELECT c.count FROM {{counters}} c
                WHERE c.namespace = r.ns AND c.window_size = r.size
                  AND c.window_start = r.start AND c.key = r.key
                FOR UPDATE
            ) y ON true;
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
                    SELECT y.count, y.ctid
                    FROM unnest(r_ns[i:j], r_size[i:j], r_start[i:j], r_key[i:j]) AS r(ns, size, start, key)
                    LEFT JOIN LATERAL (
                        SELECT c.count, c.ctid FROM {{counters}} c
                        WHERE c.namespace = r.ns AND c.window_size = r.size
                          AND c.window_start = r.start AND c.key = r.key
                        FOR UPDATE
                    ) y ON true;
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
        SELECT array_agg(CASE WHEN rd[r.i::integer] THEN coalesce(y.count, 0) ELSE cnt[r.i::integer] END ORDER BY r.i),
               array_agg(CASE WHEN rd[r.i::integer] THEN y.ctid ELSE tids[r.i::integer] END ORDER BY r.i)
        INTO cnt, tids
        FROM unnest(r_ns, r_size, r_start, r_key) WITH ORDINALITY AS r(ns, size, start, key, i)
        LEFT JOIN LATERAL (
            SELECT c.count, c.ctid FROM {{counters}} c
            WHERE rd[r.i::integer]
              AND c.namespace = r.ns AND c.window_size = r.size
              AND c.window_start = r.start AND c.key = r.key
            OFFSET 0
        ) y ON true;
    END IF;

    -- The logs, trimmed through the earliest instant a check trims each to
    -- (gcut), in one DELETE of their expired entries, one primary-key range
    -- each; their costs come back per log oldest first and are subtracted
    -- one by one, as Log.Trim does.
    IF ng > 0 THEN
        FOR k IN 1..m LOOP
            FOR j IN lo .. lo + c_nlim[k] - 1 LOOP
                IF l_kind[j] = 3 THEN
                    x := l_ref[j];
                    gcut[x] := least(gcut[x], c_now[k] - g_win[x]);
                END IF;
            END LOOP;
            lo := lo + c_nlim[k];
        END LOOP;
        lo := 1;
        FOR e IN
            WITH gone AS (
                DELETE FROM {{log_entries}} le WHERE le.ctid = ANY (ARRAY(
                    SELECT y.ctid
                    FROM unnest(gid, gcut, gn) AS u(id, cut, entries)
                    CROSS JOIN LATERAL (
                        SELECT le.ctid FROM {{log_entries}} le
                        WHERE u.entries > 0 AND le.log_id = u.id AND le.at_ms <= u.cut
                        OFFSET 0
                    ) y))
                RETURNING le.log_id, le.at_ms, le.cost
            )
            SELECT gone.log_id, array_agg(gone.cost ORDER BY gone.at_ms) AS costs
            FROM gone GROUP BY gone.log_id
        LOOP
            x := array_position(gid, e.log_id);
            FOREACH v IN ARRAY e.costs LOOP
                gsum[x] := gsum[x] - v;
            END LOOP;
            gn[x] := gn[x] - array_length(e.costs, 1);
            IF gn[x] = 0 THEN
                gsum[x] := 0;
            END IF;
            gdirt[x] := true;
        END LOOP;
    END IF;

    -- Decide and count, check by check in the caller's order.
    allowed := array_fill(false, ARRAY[m]);
    counts := array_fill(0::double precision, ARRAY[coalesce(array_length(w_row, 1), 0)]);
    st_at := array_fill(0::bigint, ARRAY[nl]);
    st_level := array_fill(0::double precision, ARRAY[nl]);
    st_retry := array_fill(0::bigint, ARRAY[nl]);
    FOR k IN 1..m LOOP
        hi := lo + c_nlim[k] - 1;
        -- Trim the check's logs at its Now, those with entries left that
        -- may be due (none at or before gcut).
        FOR j IN lo .. hi LOOP
            x := l_ref[j];
            cut := c_now[k] - l_size[j];
            CONTINUE WHEN l_kind[j] <> 3 OR NOT l_first[j] OR gn[x] = 0 OR cut <= gcut[x];
            IF pdirt[x] THEN
                UPDATE {{log_entries}} le SET cost = pcost[x] WHERE le.ctid = ptid[x]
                RETURNING le.ctid INTO t;
                ptid[x] := t;
                pdirt[x] := false;
            END IF;
            IF pat[x] <= cut THEN
                pat[x] := NULL; -- trimmed below
            END IF;
            WITH gone AS (
                DELETE FROM {{log_entries}} le
                WHERE le.log_id = gid[x] AND le.at_ms <= cut
                RETURNING le.at_ms, le.cost
            )
            SELECT array_agg(gone.cost ORDER BY gone.at_ms) INTO costs FROM gone;
            gcut[x] := cut;
            IF costs IS NOT NULL THEN
                FOREACH v IN ARRAY costs LOOP
                    gsum[x] := gsum[x] - v;
                END LOOP;
                gn[x] := gn[x] - array_length(costs, 1);
                IF gn[x] = 0 THEN
                    gsum[x] := 0;
                END IF;
                gdirt[x] := true;
            END IF;
        END LOOP;
        ok := applied;
        FOR j IN lo .. hi LOOP
            EXIT WHEN NOT ok;
            x := l_ref[j];
            IF l_kind[j] = 0 THEN
                w := w_row[x];
                IF l_nrow[j] = 2 AND l_fixed[j] THEN
                    ok := cnt[w] + c_cost[k] <= l_limit[j];
                ELSIF l_nrow[j] = 2 THEN
                    ok := (cnt[w] + c_cost[k]) * l_size[j]::double precision
                          + cnt[w_row[x + 1]] * (l_size[j] - l_elapsed[j])::double precision <= l_cap[j];
                ELSE -- SpanFits
                    v := 0;
                    FOR q IN x + 1 .. x + l_nrow[j] - 2 LOOP
                        v := v + cnt[w_row[q]];
                    END LOOP;
                    ok := (cnt[w] + v + c_cost[k]) * l_size[j]::double precision
                          + cnt[w_row[x + l_nrow[j] - 1]] * (l_size[j] - l_elapsed[j])::double precision <= l_cap[j];
                END IF;
            ELSIF l_kind[j] = 2 THEN -- AnchoredCount at Now, AnchoredFits
                IF alv[x] > 0 AND c_now[k] < aat[x] + a_win[x] THEN
                    ok := alv[x] + c_cost[k] <= l_limit[j];
                ELSE
                    ok := 0 + c_cost[k] <= l_limit[j];
                END IF;
            ELSIF l_kind[j] = 3 THEN -- LogFits of the trimmed log
                ok := gsum[x] + c_cost[k] <= l_limit[j];
            ELSE -- BucketLevel at Now, BucketFits
                IF c_now[k] <= bat[x] THEN
                    lv[j] := greatest(blv[x], 0);
                ELSIF l_limit[j] >= blv[x] THEN
                    lv[j] := 0;
                ELSE
                    lv[j] := greatest(blv[x] - (c_now[k] - bat[x])::double precision * l_limit[j], 0);
                END IF;
                ok := lv[j] + l_cw[j] <= l_cap[j];
            END IF;
        END LOOP;
        IF ok AND c_cost[k] > 0 THEN
            FOR j IN lo .. hi LOOP
                CONTINUE WHEN NOT l_first[j];
                x := l_ref[j];
                IF l_kind[j] = 0 THEN
                    w := w_row[x];
                    cnt[w] := cnt[w] + c_cost[k];
                    used[w] := true;
                ELSIF l_kind[j] = 2 THEN -- AnchoredAdd
                    IF alv[x] > 0 AND c_now[k] < aat[x] + a_win[x] THEN
                        IF c_now[k] + a_win[x] > aat[x] THEN
                            alv[x] := alv[x] + c_cost[k];
                        END IF;
                    ELSE
                        aat[x] := c_now[k];
                        alv[x] := c_cost[k];
                    END IF;
                    aused[x] := true;
                ELSIF l_kind[j] = 3 AND pat[x] = c_now[k] THEN
                    -- Log.Add to the entry last counted in: in memory, written once.
                    pcost[x] := pcost[x] + c_cost[k];
                    pdirt[x] := true;
                    gsum[x] := gsum[x] + c_cost[k];
                    gdirt[x] := true;
                ELSIF l_kind[j] = 3 THEN -- Log.Add
                    IF pdirt[x] THEN
                        UPDATE {{log_entries}} le SET cost = pcost[x] WHERE le.ctid = ptid[x];
                        pdirt[x] := false;
                    END IF;
                    INSERT INTO {{log_entries}} AS le (log_id, at_ms, cost) VALUES (gid[x], c_now[k], c_cost[k])
                    ON CONFLICT (log_id, at_ms) DO UPDATE SET cost = le.cost + EXCLUDED.cost
                    RETURNING (le.xmax = 0), le.cost, le.ctid INTO fresh, v, t;
                    pat[x] := c_now[k];
                    pcost[x] := v;
                    ptid[x] := t;
                    gsum[x] := gsum[x] + c_cost[k];
                    IF fresh THEN
                        IF gn[x] = 0 THEN
                            gnew[x] := c_now[k];
                        ELSE
                            gnew[x] := greatest(gnew[x], c_now[k]);
                        END IF;
                        gn[x] := gn[x] + 1;
                    END IF;
                    IF c_now[k] <= gcut[x] THEN
                        gcut[x] := c_now[k] - 1;
                    END IF;
                    gdirt[x] := true;
                ELSE -- BucketAdd, at the rate of the first limit naming it
                    blv[x] := lv[j] + l_cw[j];
                    bat[x] := greatest(bat[x], c_now[k]);
                    brate[x] := l_limit[j];
                    bused[x] := true;
                END IF;
            END LOOP;
        END IF;
        allowed[k] := ok;
        FOR j IN lo .. hi LOOP
            x := l_ref[j];
            IF l_kind[j] = 0 THEN
                FOR q IN x .. x + l_nrow[j] - 1 LOOP
                    counts[q] := cnt[w_row[q]];
                END LOOP;
            ELSIF l_kind[j] = 2 THEN
                IF alv[x] > 0 AND c_now[k] < aat[x] + a_win[x] THEN
                    st_at[j] := aat[x];
                    st_level[j] := alv[x];
                END IF;
            ELSIF l_kind[j] = 3 THEN
                IF gn[x] > 0 THEN
                    st_at[j] := gnew[x];
                END IF;
                st_level[j] := gsum[x];
                IF NOT ok AND NOT (gsum[x] + c_cost[k] <= l_limit[j]) THEN
                    -- RetryAt: the entries oldest first, until the request fits.
                    IF pdirt[x] THEN
                        UPDATE {{log_entries}} le SET cost = pcost[x] WHERE le.ctid = ptid[x]
                        RETURNING le.ctid INTO t;
                        ptid[x] := t;
                        pdirt[x] := false;
                    END IF;
                    s := gsum[x];
                    q := 0;
                    FOR e IN SELECT le.at_ms, le.cost FROM {{log_entries}} le
                             WHERE le.log_id = gid[x] ORDER BY le.at_ms LOOP
                        q := q + 1;
                        s := s - e.cost;
                        IF q = gn[x] THEN
                            s := 0;
                        END IF;
                        IF s + c_cost[k] <= l_limit[j] THEN
                            st_retry[j] := e.at_ms + g_win[x];
                            EXIT;
                        END IF;
                    END LOOP;
                END IF;
            ELSE
                st_at[j] := bat[x];
                st_level[j] := blv[x];
            END IF;
        END LOOP;
        lo := hi + 1;
    END LOOP;

    -- Write back what was counted; drop placeholders nothing was counted
    -- in. All of it touches only rows locked above, found by ctid.
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
    IF applied AND na > 0 THEN
        UPDATE {{anchored}} a SET at_ms = u.at, level = u.lvl
        FROM unnest(atids, aat, alv, aused) AS u(t, at, lvl, counted)
        WHERE u.counted AND a.ctid = u.t;
        IF true = ANY (amade) THEN
            DELETE FROM {{anchored}} a
            USING unnest(atids, amade, aused) AS u(t, placeholder, counted)
            WHERE u.placeholder AND NOT u.counted AND a.ctid = u.t;
        END IF;
    END IF;
    IF true = ANY (pdirt) THEN
        UPDATE {{log_entries}} le SET cost = u.cost
        FROM unnest(ptid, pcost, pdirt) AS u(t, cost, dirty)
        WHERE u.dirty AND le.ctid = u.t;
    END IF;
    IF ng > 0 THEN
        -- Headers made here that hold no entry go; the others changed are
        -- written back (an emptied log keeps its header until Purge).
        UPDATE {{logs}} g SET sum = u.sum, entries = u.entries, newest_ms = u.newest
        FROM unnest(gtids, gsum, gn, gnew, gdirt, gmade) AS u(t, sum, entries, newest, dirty, placeholder)
        WHERE u.dirty AND NOT (u.placeholder AND u.entries = 0) AND g.ctid = u.t;
        IF true = ANY (gmade) THEN
            DELETE FROM {{logs}} g
            USING unnest(gtids, gmade, gn) AS u(t, placeholder, entries)
            WHERE u.placeholder AND u.entries = 0 AND g.ctid = u.t;
        END IF;
    END IF;

    -- Keep the decisions with the seq: the lane's row is held since the
    -- first statement. A retry of the call that set seq and decided (both
    -- p_seq) gets each check as kept, allowed or not (a check beyond those
    -- kept: not allowed), with the state read above; a check returned
    -- allowed has no RetryAt.
    IF applied THEN
        UPDATE {{lanes}} l SET decided = p_seq, decisions = allowed WHERE l.node = p_node;
    ELSE
        SELECT l.decisions INTO kept FROM {{lanes}} l
        WHERE l.node = p_node AND l.seq = p_seq AND l.decided = p_seq;
        IF kept IS NOT NULL THEN
            lo := 1;
            FOR k IN 1 .. m LOOP
                IF coalesce(kept[k], false) THEN
                    allowed[k] := true;
                    FOR j IN lo .. lo + c_nlim[k] - 1 LOOP
                        st_retry[j] := 0;
                    END LOOP;
                END IF;
                lo := lo + c_nlim[k];
            END LOOP;
        END IF;
    END IF;
END
$$;
