-- {{check}}: CheckAndCount in one round trip (see check.go).
--
-- The caller passes:
--   r_*: the counter rows the checks read, sorted by primary key (the order
--        every writer of the store locks rows in, so concurrent callers and
--        pushes never deadlock), each once; r_create marks current windows,
--        which are created (count 0) when absent so that they can be locked.
--   c_*: per check, in the caller's order: its cost and its number of limits.
--   l_*: per limit, flattened in check order: the indexes (1-based) of its
--        current and previous windows in r_*, the weight of the previous
--        window (0 for a fixed window) and the limit.
-- It returns whether (p_node, p_seq) was applied, and per check whether it
-- passed, and per limit the current and previous counts after its check.
--
-- When the lane's last seq is not below p_seq, the batch was applied before:
-- nothing is locked, created or counted, every check is denied, and the
-- counts are read as they are.
CREATE FUNCTION {{check}}(
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
    cnt  double precision[] := array_fill(0::double precision, ARRAY[n]);
    made boolean[] := array_fill(false, ARRAY[n]); -- inserted here as a placeholder
    used boolean[] := array_fill(false, ARRAY[n]); -- counted by a check that passed
    v    double precision;
    ok   boolean;
    lo   integer := 1; -- first limit of check k
    i    integer;
    j    integer;
    k    integer;
BEGIN
    -- The lane row first: it serializes calls (and pushes) of one lane, so a
    -- retry racing its first attempt waits for it and then applies nothing.
    INSERT INTO {{lanes}} AS l (node, seq, updated_at) VALUES (p_node, p_seq, now())
    ON CONFLICT (node) DO UPDATE SET seq = EXCLUDED.seq, updated_at = EXCLUDED.updated_at
    WHERE l.seq < EXCLUDED.seq;
    applied := FOUND;

    -- Lock (or read) every row in the caller's order. Each statement takes a
    -- fresh snapshot, so a row committed by a caller we waited for is seen.
    FOR i IN 1..n LOOP
        IF NOT applied THEN
            SELECT c.count INTO v FROM {{counters}} c
            WHERE c.namespace = r_ns[i] AND c.window_size = r_size[i]
              AND c.window_start = r_start[i] AND c.key = r_key[i];
            IF FOUND THEN
                cnt[i] := v;
            END IF;
            CONTINUE;
        END IF;
        LOOP
            SELECT c.count INTO v FROM {{counters}} c
            WHERE c.namespace = r_ns[i] AND c.window_size = r_size[i]
              AND c.window_start = r_start[i] AND c.key = r_key[i]
            FOR UPDATE;
            IF FOUND THEN
                cnt[i] := v;
                EXIT;
            END IF;
            EXIT WHEN NOT r_create[i]; -- an absent previous window counts 0
            -- Absent: insert a placeholder, which locks it. A concurrent
            -- insert of the same row makes this wait for that transaction;
            -- if it committed, nothing is inserted and the loop locks its row.
            INSERT INTO {{counters}} (namespace, window_size, window_start, key, count)
            VALUES (r_ns[i], r_size[i], r_start[i], r_key[i], 0)
            ON CONFLICT DO NOTHING;
            IF FOUND THEN
                made[i] := true;
                EXIT;
            END IF;
        END LOOP;
    END LOOP;

    -- Decide and count, check by check in the caller's order.
    allowed := array_fill(false, ARRAY[m]);
    cur := array_fill(0::double precision, ARRAY[nl]);
    prev := array_fill(0::double precision, ARRAY[nl]);
    FOR k IN 1..m LOOP
        ok := applied;
        FOR j IN lo .. lo + c_nlim[k] - 1 LOOP
            IF cnt[l_cur[j]] + cnt[l_prev[j]] * l_weight[j] + c_cost[k] > l_limit[j] THEN
                ok := false;
            END IF;
        END LOOP;
        IF ok THEN
            FOR j IN lo .. lo + c_nlim[k] - 1 LOOP
                -- once per distinct current window (limits may share a size)
                IF NOT (l_cur[j] = ANY (l_cur[lo:j - 1])) THEN
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
    IF applied THEN
        FOR i IN 1..n LOOP
            IF used[i] THEN
                UPDATE {{counters}} c SET count = cnt[i]
                WHERE c.namespace = r_ns[i] AND c.window_size = r_size[i]
                  AND c.window_start = r_start[i] AND c.key = r_key[i];
            ELSIF made[i] THEN
                DELETE FROM {{counters}} c
                WHERE c.namespace = r_ns[i] AND c.window_size = r_size[i]
                  AND c.window_start = r_start[i] AND c.key = r_key[i];
            END IF;
        END LOOP;
    END IF;
END
$$;
