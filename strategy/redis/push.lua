-- push.lua: applies the diffs of one batch that fall in some namespace
-- shards, at most once per (node, seq) in each, and optionally returns the
-- totals they made. Shipped after lane.lua (the prelude: seq, lane
-- records, the walk over the groups, incr, expire, buckets, anchored
-- windows and logs).
--
-- ARGV[1], ARGV[2]    seq and lane record TTL (see lane.lua)
-- ARGV[3 ..]          groups, one per namespace shard, each: n, then n
--                     arguments: mode ("0": push; count mode: "2" when
--                     the diffs name distinct fields, "1" for any diffs),
--                     m, k, d, then for each of its m window hashes its
--                     TTL (ms) and '1' when that TTL is checked whenever
--                     the group applies (the hash is read over a span
--                     longer than its size), else '0'; then d keyed diffs (type: 'b' bucket, 'a' anchored
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
-- its place), each of its m hashes in which a diff may have made a field
-- (so the hash too, maybe: made), or that is read over a longer span,
-- gets its TTL (unless it lasts longer already: expire, in lane.lua; any
-- other hash got its TTL from the script that made it), and seq becomes
-- the lane record, which gets its TTL, in this one atomic script. A group
-- that does not apply writes nothing.
--
-- Returns, for each diff of each group in count mode, in the order of the
-- runs: the field's value right after that diff and the previous window's
-- value of the field ('' for none), strings or integers (when the group
-- does not apply: the current values). Push mode adds nothing.
--
-- Cost. Push mode and distinct fields: one increment per diff (incr), and
-- in count mode one HGET of the previous window. Any other group follows
-- each (hash, field) in the script (Values, below): the first diff of a
-- field is written at once (its increment replies the total), later ones
-- are summed and written at the end with one increment, and the previous
-- window's field is read once (3 calls in all for one hot key). Either way the counts and totals are those of one
-- HINCRBYFLOAT per diff. Each bucket or anchored window is read once (GET)
-- and written once (SET with its TTL), whatever the number of its diffs;
-- a log's sum too, and its entries take a read (ZRANGEBYSCORE of one ms)
-- and a write (ZADD) per diff of another ms than the one before. A hash
-- takes a PTTL (and a PEXPIRE when that is short) only when a diff may
-- have made a field in it, or it is read over a longer span.
--
-- An increment that fails (a field holding something else than a number, a
-- sum out of range), or a keyed diff's key that holds something else, does
-- not stop the others, and seq is recorded anyway (see lane.lua); the
-- reply is then an error naming the first failure.

-- fresh[h]: a diff of the group being run may have made a field in its
-- hash number h (so the hash too, maybe): the hash then gets its TTL.
local fresh = {}

-- made reports whether an increment of v whose reply was r may have made
-- its field: HINCRBY replies v itself for a field that held 0 or none;
-- any other reply (HINCRBYFLOAT's, a failure) may have.
local function made(r, v)
  return type(r) ~= 'number' or r == v
end

-- Values, when a group's fields may repeat. For each hash number h and
-- field: S[h][field], the value as a reply string (as Redis gave it, ''
-- for none), and Z[h][field], the value as a number (false: not a number).
-- A field in neither is not read yet; one only in S is not parsed yet; one
-- only in Z was changed here (replied as an integer, or formatted with
-- '%.17g', which parses back to the same double).
--
-- An increment of a known value is pending (A[h][field]: the increment as
-- sent, then the sum) when the value, the increment and their sum are all
-- exact (see exact, in lane.lua); else it is written at once on its own
-- (incr), after the field's pending sum, and its reply becomes the value.
-- Pending increments are written at the end of the group: one per (hash,
-- field). Either way the values, decisions and stored strings are those of
-- one HINCRBYFLOAT per increment.
local S, Z, A
local num, reply, write, add, flush -- made on first use (see define)

-- define makes the functions of groups whose fields may repeat: once, and
-- only for scripts that have such groups (making a function costs Redis
-- about as much as a small command).
local function define()
  -- num returns the value of a field not in Z[h]: a number, or false.
  num = function(h, field)
    local s = S[h][field]
    if s == nil then
      s = redis.call('HGET', KEYS[kb + 1 + h], field) or ''
      S[h][field] = s
    end
    local v = 0
    if s ~= '' then
      v = tonumber(s) or false
      if not v then
        fault(h)
      end
    end
    Z[h][field] = v
    return v
  end

  -- reply returns the value of a field not in S[h], as a reply.
  reply = function(h, field)
    local v = Z[h][field]
    if v == nil then
      v = redis.call('HGET', KEYS[kb + 1 + h], field) or ''
      S[h][field] = v
      return v
    end
    if v % 1 == 0 and v < 2^53 and v > -2^53 then
      return v
    end
    v = string.format('%.17g', v)
    S[h][field] = v
    return v
  end

  -- write writes the pending increment of a field, the difference between
  -- its value and the one stored.
  write = function(h, field)
    local a = A[h][field]
    local v = a
    if type(a) == 'number' then
      a = string.format('%.17g', a)
    else
      v = N[a]
    end
    incr(KEYS[kb + 1 + h], field, a, v, Z[h][field] - v)
    A[h][field] = nil
  end

  -- add adds v, sent as the string arg, to the field.
  add = function(h, field, v, arg)
    local cur = Z[h][field]
    if cur == nil and S[h][field] then
      cur = num(h, field)
    end
    local a = A[h]
    if cur == 0 then
      fresh[h] = true -- no such field, maybe
    end
    if cur and exact(cur) and exact(v) and exact(cur + v) then
      if not a then
        a = {}
        A[h] = a
      end
      local x = a[field]
      if x then
        a[field] = x + v
      else
        a[field] = arg
      end
      Z[h][field], S[h][field] = cur + v, nil
      return
    end
    if a and a[field] then
      write(h, field)
    end
    local r = incr(KEYS[kb + 1 + h], field, arg, v, cur)
    if cur == nil and made(r, v) then
      fresh[h] = true
    end
    if r then
      if Z[h][field] ~= nil then
        Z[h][field] = nil
      end
      S[h][field] = r
    end
  end

  -- flush writes the pending increments of the group.
  flush = function()
    for h, a in pairs(A) do
      for field in pairs(a) do
        write(h, field)
      end
    end
  end
end

-- track starts following the values of a group of nk keys.
local function track(nk)
  if not add then
    define()
  end
  S, Z, A = {}, {}, {}
  for h = 1, nk - 1 do
    S[h], Z[h] = {}, {}
  end
end


-- addKeyed adds the nb keyed diffs from ARGV[i] on, in order.
local function addKeyed(i, nb)
  for j = i, i + 6 * nb - 1, 6 do
    keyed().keyedAdd(ARGV[j], tonumber(ARGV[j + 1]), ARGV[j + 5], N[ARGV[j + 3]], N[ARGV[j + 4]], N[ARGV[j + 2]])
  end
end

-- group runs the group whose arguments are ARGV[a .. a + n] (n, then
-- its n arguments) and returns its number of keys and where the next
-- group's arguments start (nil after the last).
local function group(a)
  local n = tonumber(ARGV[a])
  apply = above(redis.call('GET', KEYS[kb + 1]))
  local mode, m, nk, nb = ARGV[a + 1], tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  local i, last = a + 5 + 2 * m, a + n
  fresh = {}
  if apply then
    addKeyed(i, nb)
  end
  i = i + 6 * nb
  if mode ~= '1' then
    -- M: N for a group of several diffs, whose values repeat; nil for one
    -- (a conversion remembered costs more than one made once).
    local M = last - i > 5 and N or nil
    while i <= last do
      local h = tonumber(ARGV[i])
      local key = KEYS[kb + 1 + h]
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
          local v = M and M[arg] or tonumber(arg)
          cur = incr(key, field, arg, v)
          if made(cur, v) then
            fresh[h] = true
          end
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
      if fresh[h] or ARGV[a + 4 + 2 * h] == '1' then
        expire(KEYS[kb + 1 + h], ARGV[a + 3 + 2 * h])
      end
    end
    redis.call('SET', KEYS[kb + 1], seq, 'PX', laneTTL)
  end
  if a + n < nargs then
    return nk, a + n + 1
  end
  return nk
end

return run(group)
