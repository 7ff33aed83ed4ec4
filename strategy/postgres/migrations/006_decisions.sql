-- Decisions kept with the seq: a check call retried with the same
-- (node, seq), because its reply was lost, gets the decisions the store
-- made the first time instead of a denial of every check, so that each
-- check is decided and counted exactly once (strategy.Checker).
--
-- The lane row keeps, beside its seq, the seq of the call whose checks'
-- decisions it holds (decided) and those decisions, in the caller's
-- order. A push, of this release or an earlier one, sets seq alone, so a
-- retry of p_seq gets the decisions only while seq = decided = p_seq: a
-- push that took seq p_seq, or a newer seq of any call, leaves none for
-- it. Both columns are NULL in the rows written before this migration and
-- in lanes that only pushed; adding them rewrites no row.
ALTER TABLE {{lanes}}
    ADD COLUMN decided   numeric(20,0),
    ADD COLUMN decisions boolean[];

-- {{check}} with p_keep: the function of 005 (same arguments, results,
-- locking and decisions; see 005_keyed.sql), which it calls, with the
-- decisions kept. Its one more argument gives it a signature of its own
-- beside 005's, which nodes of the previous release still running call
-- (and which a later migration may drop only once this one no longer calls
-- it); p_keep false makes it 005's, keeping nothing.
--
-- With p_keep, once 005's function has run (it holds the lane's row from
-- its first statement to the end of the transaction):
--   - applied: one UPDATE records p_seq and the checks' decisions in the
--     lane's row;
--   - not applied, and the row's seq and decided are both p_seq (a retry
--     of the call that set them): each check is returned as kept, allowed
--     or not (a check beyond those kept: not allowed), with the state
--     005's function read (the current counts, buckets, anchored windows
--     and logs; nothing counted). A log's RetryAt is 0 for a check returned
--     allowed, as strategy.RetryAt is only for a denied request; a check
--     returned denied keeps 005's;
--   - otherwise (a seq below the lane's, or one a push set): 005's result,
--     every check denied.
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
    p_keep    boolean,
    OUT applied  boolean,
    OUT allowed  boolean[],
    OUT counts   double precision[],
    OUT st_at    bigint[],
    OUT st_level double precision[],
    OUT st_retry bigint[]
) LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    kept boolean[];
    lo   integer := 1;
    j    integer;
    k    integer;
BEGIN
    SELECT f.applied, f.allowed, f.counts, f.st_at, f.st_level, f.st_retry
    INTO applied, allowed, counts, st_at, st_level, st_retry
    FROM {{check}}(p_node, p_seq, r_ns, r_size, r_start, r_key, r_create,
                   b_ns, b_key, b_kind, b_win, a_ns, a_key, a_win, g_ns, g_key, g_win,
                   c_cost, c_nlim, c_now, l_kind, l_ref, l_first, l_size, l_limit,
                   l_nrow, l_elapsed, l_fixed, l_cap, l_cw, w_row) AS f;
    IF NOT p_keep THEN
        RETURN;
    END IF;
    IF applied THEN
        UPDATE {{lanes}} l SET decided = p_seq, decisions = allowed WHERE l.node = p_node;
        RETURN;
    END IF;
    SELECT l.decisions INTO kept FROM {{lanes}} l
    WHERE l.node = p_node AND l.seq = p_seq AND l.decided = p_seq;
    IF kept IS NULL THEN
        RETURN;
    END IF;
    FOR k IN 1 .. coalesce(array_length(c_cost, 1), 0) LOOP
        IF coalesce(kept[k], false) THEN
            allowed[k] := true;
            FOR j IN lo .. lo + c_nlim[k] - 1 LOOP
                st_retry[j] := 0;
            END LOOP;
        END IF;
        lo := lo + c_nlim[k];
    END LOOP;
END
$$;
