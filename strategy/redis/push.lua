-- push.lua: applies the diffs of one batch that fall in some namespace
-- shards, at most once per (node, seq) in each, and optionally returns the
-- totals they made.
--
-- ARGV[1]             seq: 20 zero-padded decimal digits
-- ARGV[2]             lane record TTL, ms
-- ARGV[3 ..]          groups, one per namespace shard, each: n, then n
--                     arguments: mode ("0": push; count mode: "2" when
--                     the diffs name distinct fields, "1" for any diffs),
--                     m, k, the TTL of each of its m window hashes (ms),
--                     then runs: hash number h (1..m), in count mode the
--                     hash number of its previous window, n, then n pairs
--                     (field, value)
-- KEYS                for each group in turn, k keys: its lane record (the
--                     last seq applied for the node in that shard), its m
--                     window hashes, numbered 1..m, then in count mode the
--                     previous windows of those that are not among them
--
-- A group applies when seq is above its lane record (or there is none):
-- then each value is added to its field as HINCRBYFLOAT adds it (see
-- incr), each of its m hashes gets its TTL and seq becomes the lane
-- record, which gets its TTL, in this one atomic script. A group that does
-- not apply writes nothing.
--
-- Returns, for each diff of each group in count mode, in the order of the
-- runs: the field's value right after that diff and the previous window's
-- value of the field ('' for none), strings or integers (when the group
-- does not apply: the current values). Push mode adds nothing.
--
-- Cost. Push mode and distinct fields: one increment per diff (see incr),
-- and in count mode one HGET of the previous window. Any other group
-- follows each (hash, field) in the script as check.lua does (see Values):
-- the first diff of a field is written at once (its increment replies the
-- total), later ones are summed and written at the end with one increment,
-- and the previous window's field is read once (3 calls in all for one hot
-- key). Either way the counts and totals are those of one HINCRBYFLOAT per
-- diff.
--
-- An increment that fails (a field holding something else than a number, a
-- sum out of range) does not stop the others, and seq is recorded anyway:
-- Redis does not undo the writes of a failed script, so a retry must find
-- the batch applied. The reply is then an error naming the first failure.

local seq, laneTTL = ARGV[1], ARGV[2]
local seqHi, seqLo = string.sub(seq, 1, 10), tonumber(string.sub(seq, 11, 20))

-- above reports whether seq is above the lane record rec (nil: none). The
-- 20 digits compare as two halves: 10 digits are below 2^53, exact as
-- doubles (and two halves of 10 digits are equal as numbers when they are
-- as strings).
local function above(rec)
  if not rec then
    return true
  end
  local hi = string.sub(rec, 1, 10)
  if hi ~= seqHi then
    return tonumber(seqHi) > tonumber(hi)
  end
  return seqLo > tonumber(string.sub(rec, 11, 20))
end

local failed = nil -- the first increment that failed
local bad = nil -- the first field that holds no number
local out, o = {}, 0 -- the reply, its length

-- N[s]: tonumber(s), converted once. Lua is slow next to Redis here:
-- converting a number from or to a string, or growing a table, costs a
-- good part of an HGET, and the arguments repeat a few numbers.
local N = setmetatable({}, { __index = function(t, s)
  local v = tonumber(s)
  t[s] = v
  return v
end })

-- incr adds v, sent as the string arg, to a field and returns the reply,
-- or nil when it fails. An integer below 1e6 (sent without exponent) goes
-- with HINCRBY when the field holds an integer, or may (cur nil: unknown):
-- its result is the very number and stored string of HINCRBYFLOAT (an
-- exact integer below 2^63), at a lower cost (no long double parsing and
-- formatting). Its reply is exact as a Lua number below 2^53; past that,
-- the stored string is read instead. When HINCRBY refuses (a field or sum
-- that is no integer, an overflow), HINCRBYFLOAT decides as it always did.
local function incr(key, field, arg, v, cur)
  if v % 1 == 0 and v < 1e6 and v > -1e6 and (cur == nil or cur and cur % 1 == 0 and cur < 2^53 and cur > -2^53) then
    local r = redis.pcall('HINCRBY', key, field, arg)
    if type(r) == 'number' then
      if r < 2^53 and r > -2^53 then
        return r
      end
      return redis.call('HGET', key, field)
    end
  end
  local r = redis.pcall('HINCRBYFLOAT', key, field, arg)
  if type(r) == 'table' then
    failed = failed or ('field of hash ' .. key .. ': ' .. tostring(r.err))
    return nil
  end
  return r
end

-- The group being run: KEYS[kb + 1] is its lane record and KEYS[kb + 1 + h]
-- its hash number h; apply: whether its seq is above the record.
local kb, apply = 0, false

-- fault notes the first field that holds no number.
local function fault(h)
  if not bad then
    bad = 'field of hash ' .. KEYS[kb + 1 + h] .. ' holds no number'
    if apply then
      bad = bad .. ', batch recorded as applied'
    end
  end
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
-- exact (below); else it is written at once on its own (incr), after the
-- field's pending sum, and its reply becomes the value. Pending increments
-- are written at the end of the group: one per (hash, field).
--
-- Exact: a multiple of 1/16 below 1e11 in magnitude (every integer count
-- and cost up to there, halves, quarters...). Such a number has at most 15
-- significant digits, so it is exactly a double, the client sends it as its
-- exact decimal, sums of two are exact in Lua's doubles, and HINCRBYFLOAT
-- adds it exactly (long double) and rounds nothing at its 17 decimals.
-- Summing those in Lua and writing the sum once therefore gives the very
-- values, decisions and stored strings of one HINCRBYFLOAT per increment.
-- Other values would not (0.1, 1/3, counts past 1e11): HINCRBYFLOAT adds in
-- long double and rounds each result to 17 decimals, Lua rounds each sum to
-- a double, and the two may differ in the last digits (0.1 + 0.1 + 0.1 is
-- 0.3 for HINCRBYFLOAT, 0.30000000000000004 in Lua). Those increments keep
-- one HINCRBYFLOAT each.
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
    if cur and cur * 16 % 1 == 0 and cur < 1e11 and cur > -1e11 and v * 16 % 1 == 0 and v < 1e11 and v > -1e11
        and cur + v < 1e11 and cur + v > -1e11 then
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
-- group runs the group whose arguments are ARGV[a + 1 .. a + n] and
-- returns its number of keys.
local function group(a, n)
  apply = above(redis.call('GET', KEYS[kb + 1]))
  local mode, m, nk = ARGV[a + 1], tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local i, last = a + 4 + m, a + n
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
      redis.call('PEXPIRE', KEYS[kb + 1 + h], ARGV[a + 3 + h])
    end
    redis.call('SET', KEYS[kb + 1], seq, 'PX', laneTTL)
  end
  return nk
end

local a = 3
while a <= #ARGV do
  local n = tonumber(ARGV[a])
  kb = kb + group(a, n)
  a = a + 1 + n
end

if failed then
  return redis.error_reply('RATESYNC increment failed, batch recorded as applied: ' .. failed)
end
if bad then
  return redis.error_reply('RATESYNC ' .. bad)
end
return out
