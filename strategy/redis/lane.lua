-- lane.lua: the prelude of push.lua and check.lua. Each script is this
-- file followed by its own body (see scripts.go), so each runs alone, as
-- one EVALSHA, in one Cluster slot per group. The prelude holds what the
-- two share: the at-most-once bookkeeping of (node, seq) per lane record,
-- the walk over the groups of a call, increments as HINCRBYFLOAT makes
-- them, and the values of fields that a group names more than once. A body
-- defines group(a, n) and ends with `return run(group)`.
--
-- ARGV[1]             seq: 20 zero-padded decimal digits
-- ARGV[2]             lane record TTL, ms
-- ARGV[3 ..]          groups, one per namespace shard, each: n, then its
--                     n arguments (their layout is the body's)
-- KEYS                for each group in turn: its lane record (the last
--                     seq applied for the node in that shard), then its
--                     window hashes, numbered 1..m (and the body's others),
--                     then its buckets, numbered on from there
--
-- A group applies when seq is above its lane record (or there is none);
-- the body then makes its writes and records seq (SET with the lane TTL),
-- and the prelude writes the buckets it changed, in this one atomic
-- script. A group that does not apply writes nothing.
--
-- A write that fails, or a key that holds no number (no bucket), does not
-- stop the others, and seq is recorded anyway: Redis does not undo the
-- writes of a failed script, so a retry must find the batch applied. The
-- reply is then an error naming the first failure; else it is the body's
-- values, in the order the groups append them to out.

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

local failed = nil -- the first write that failed
local bad = nil -- the first field that holds no number (or key no bucket)
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

-- expire gives the window hash key the TTL ttl (ms, as sent) unless it
-- already lasts longer: the keys of one hash may be read over different
-- spans (a plain window, the sub-windows of a precision limit, a diff's
-- Span), and the TTL one needs must not cut another's short. A hash with
-- no TTL yet (PTTL -1) gets it.
local function expire(key, ttl)
  if redis.call('PTTL', key) < N[ttl] then
    redis.call('PEXPIRE', key, ttl)
  end
end

-- The group being run: KEYS[kb + 1] is its lane record and KEYS[kb + 1 + h]
-- its hash number h; apply: whether its seq is above the record.
local kb, apply = 0, false

-- fault notes the first field that holds no number: of hash number h, or
-- with isBucket, the first bucket number h that holds no bucket.
local function fault(h, isBucket)
  if not bad then
    if isBucket then
      bad = 'bucket ' .. KEYS[kb + 1 + h] .. ' holds no bucket'
    else
      bad = 'field of hash ' .. KEYS[kb + 1 + h] .. ' holds no number'
    end
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

-- Buckets (strategy/bucket.go). A bucket is one string key of its group's
-- shard: "at level rate", with at the Unix ms of its last change (the
-- node's clock), level how full it was then (cost units times window ms,
-- written '%.17g', which parses back to the very double) and rate the
-- limit per window it drained at then, as the node sent it. A key holds a
-- bucket until a minute after it drains empty (bucketMargin), counted from
-- the clock of the request that changed it (a relative TTL: the server's
-- clock does not matter); a bucket with no key is empty.
--
-- bucketLevel, bucketFits and bucketAdd are strategy.BucketLevel,
-- BucketFits and BucketAdd: the same operations on doubles in the same
-- order, so that Redis decides every request as the node does.

local bucketMargin = 60000 -- ms
local maxTTL = 1e15 -- ms (some 30,000 years): Redis refuses far longer TTLs

-- Bk[h]: the state of bucket number h of the group being run, read at most
-- once per group: {at, level} ({0, 0} when its key holds none), or false
-- when its key holds something else. A bucket the group changed also has
-- rate (the string sent, and written) and ref (the earliest clock of the
-- requests that changed it): saveBuckets writes it.
local Bk = {}

-- bucket returns the state of bucket number h, or nil (noted by fault)
-- when its key holds no bucket.
local function bucket(h)
  local b = Bk[h]
  if b == nil then
    b = { at = 0, level = 0 }
    local v = redis.pcall('GET', KEYS[kb + 1 + h])
    if type(v) == 'string' then
      local at, level = string.match(v, '^(%S+) (%S+) %S+$')
      b.at, b.level = tonumber(at), tonumber(level)
      if not (b.at and b.level) then
        b = false
      end
    elseif v then
      b = false -- an error reply: a key of another type
    end
    Bk[h] = b
    if not b then
      fault(h, true)
    end
  end
  return b or nil
end

-- bucketLevel returns the level of bucket b at now, draining rate per ms.
local function bucketLevel(b, rate, now)
  local elapsed = now - b.at
  if elapsed < 0 then
    elapsed = 0
  end
  local l = b.level - elapsed * rate
  if l < 0 then
    return 0
  end
  return l
end

-- bucketFits reports whether cost fits bucket b of capacity burst at now.
local function bucketFits(b, rate, burst, cost, window, now)
  return bucketLevel(b, rate, now) + cost * window <= burst * window
end

-- bucketAdd adds cost to bucket b at now, draining at the rate sent as the
-- string rs; saveBuckets writes it.
local function bucketAdd(b, rs, cost, window, now)
  b.level = bucketLevel(b, N[rs], now) + cost * window
  if now > b.at then
    b.at = now
  end
  b.rate, b.ref = rs, math.min(b.ref or now, now)
end

-- saveBuckets writes each bucket the group changed, with a TTL that ends
-- bucketMargin after it drains empty (at + level / rate, rounded up),
-- counted from its ref, and forgets the group's buckets.
local function saveBuckets()
  for h, b in pairs(Bk) do
    if b and b.ref then
      local ttl = math.ceil(b.at + b.level / N[b.rate]) - b.ref + bucketMargin
      if not (ttl <= maxTTL) then
        ttl = maxTTL
      end
      local key = KEYS[kb + 1 + h]
      local r = redis.pcall('SET', key, string.format('%.0f %.17g ', b.at, b.level) .. b.rate, 'PX', string.format('%.0f', ttl))
      if r.err then
        failed = failed or ('bucket ' .. key .. ': ' .. tostring(r.err))
      end
    end
  end
  Bk = {}
end

-- run runs the groups of ARGV in order, each with group(a, n) (the body's:
-- it runs the group whose arguments are ARGV[a + 1 .. a + n] and returns
-- its number of keys) and then saveBuckets, and returns the script's reply.
local function run(group)
  local a = 3
  while a <= #ARGV do
    local n = tonumber(ARGV[a])
    local nk = group(a, n)
    saveBuckets()
    kb = kb + nk
    a = a + 1 + n
  end

  if failed then
    return redis.error_reply('RATESYNC write failed, batch recorded as applied: ' .. failed)
  end
  if bad then
    return redis.error_reply('RATESYNC ' .. bad)
  end
  return out
end
