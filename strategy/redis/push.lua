-- push.lua: applies the diffs of one batch that fall in some namespace
-- shards, at most once per (node, seq) in each, and optionally returns the
-- totals they made. Shipped after lane.lua (the prelude: seq, lane
-- records, the walk over the groups, incr, the values of repeated fields,
-- buckets, anchored windows and logs).
--
-- ARGV[1], ARGV[2]    seq and lane record TTL (see lane.lua)
-- ARGV[3 ..]          groups, one per namespace shard, each: n, then n
--                     arguments: mode ("0": push; count mode: "2" when
--                     the diffs name distinct fields, "1" for any diffs),
--                     m, k, d, the TTL of each of its m window hashes (ms),
--                     then d keyed diffs (type: 'b' bucket, 'a' anchored
--                     window, 'l' log; key number h, at, cost, window ms,
--                     rate), then runs: hash number h (1..m), in
--                     count mode the hash number of its previous window, n,
--                     then n pairs (field, value)
-- KEYS                for each group in turn, k keys: its lane record (the
--                     last seq applied for the node in that shard), its m
--                     window hashes, numbered 1..m, then in count mode the
--                     previous windows of those that are not among them,
--                     then the keys of its keyed diffs (a log's two: see
--                     lane.lua)
--
-- A group applies when seq is above its lane record (or there is none):
-- then each value is added to its field as HINCRBYFLOAT adds it (see incr
-- in lane.lua), each keyed diff to its bucket, anchored window or log
-- (bucketAdd, anchoredAdd, logAdd at the diff's at, whatever the limit: a
-- log is not trimmed, and an entry older than its newest is inserted in
-- its place), each of its m hashes gets its TTL
-- (unless it lasts longer already: expire, in lane.lua) and seq becomes
-- the lane record, which gets its TTL, in this one atomic
-- script. A group that does not apply writes nothing.
--
-- Returns, for each diff of each group in count mode, in the order of the
-- runs: the field's value right after that diff and the previous window's
-- value of the field ('' for none), strings or integers (when the group
-- does not apply: the current values). Push mode adds nothing.
--
-- Cost. Push mode and distinct fields: one increment per diff (incr), and
-- in count mode one HGET of the previous window. Any other group follows
-- each (hash, field) in the script as check.lua does (Values, in
-- lane.lua): the first diff of a field is written at once (its increment
-- replies the total), later ones are summed and written at the end with
-- one increment, and the previous window's field is read once (3 calls in
-- all for one hot key). Either way the counts and totals are those of one
-- HINCRBYFLOAT per diff. Each bucket or anchored window is read once (GET)
-- and written once (SET with its TTL), whatever the number of its diffs;
-- a log's sum too, and its entries take a read (ZRANGEBYSCORE of one ms)
-- and a write (ZADD) per diff of another ms than the one before.
--
-- An increment that fails (a field holding something else than a number, a
-- sum out of range), or a keyed diff's key that holds something else, does
-- not stop
-- the others, and seq is recorded anyway (see lane.lua); the reply is then
-- an error naming the first failure.

-- addKeyed adds the nb keyed diffs from ARGV[i] on, in order.
local function addKeyed(i, nb)
  for j = i, i + 6 * nb - 1, 6 do
    keyedAdd(ARGV[j], tonumber(ARGV[j + 1]), ARGV[j + 5], N[ARGV[j + 3]], N[ARGV[j + 4]], N[ARGV[j + 2]])
  end
end

-- group runs the group whose arguments are ARGV[a + 1 .. a + n] and
-- returns its number of keys.
local function group(a, n)
  apply = above(redis.call('GET', KEYS[kb + 1]))
  local mode, m, nk, nb = ARGV[a + 1], tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  local i, last = a + 5 + m, a + n
  if apply then
    addKeyed(i, nb)
  end
  i = i + 6 * nb
  if mode ~= '1' then
    -- M: N for a group of several diffs, whose values repeat; nil for one
    -- (a conversion remembered costs more than one made once).
    local M = last - i > 5 and N or nil
    while i <= last do
      local key = KEYS[kb + 1 + tonumber(ARGV[i])]
      local prev = nil
      if mode == '2' then
        prev = KEYS[kb + 1 + tonumber(ARGV[i + 1])]
        i = i + 1
      end
      local n = tonumber(ARGV[i + 1])
      i = i + 2
      for _ = 1, n do
        local field, arg = ARGV[i], ARGV[i + 1]
        local cur = nil
        if apply then
          cur = incr(key, field, arg, M and M[arg] or tonumber(arg))
        end
        if prev then
          out[o + 1] = cur or redis.call('HGET', key, field) or ''
          out[o + 2] = redis.call('HGET', prev, field) or ''
          o = o + 2
        end
        i = i + 2
      end
    end
  else
    track(nk)
    while i <= last do
      local h, p, n = tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
      i = i + 3
      for _ = 1, n do
        local field, arg = ARGV[i], ARGV[i + 1]
        if apply then
          add(h, field, N[arg], arg)
        end
        out[o + 1] = S[h][field] or reply(h, field)
        out[o + 2] = S[p][field] or reply(p, field)
        o = o + 2
        i = i + 2
      end
    end
    flush()
  end
  if apply then
    for h = 1, m do
      expire(KEYS[kb + 1 + h], ARGV[a + 4 + h])
    end
    redis.call('SET', KEYS[kb + 1], seq, 'PX', laneTTL)
  end
  return nk
end

return run(group)
