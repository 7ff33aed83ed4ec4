-- lane.lua: the prelude of push.lua and check.lua. Each script is this
-- file followed by its own body (see scripts.go), so each runs alone, as
-- one EVALSHA. The prelude holds what the two share: the at-most-once
-- bookkeeping of (node, seq) by lane record, the walk over the groups of a
-- call, increments as HINCRBYFLOAT makes them, the TTL of window hashes,
-- and the buckets, anchored windows and sliding logs of both. A body
-- defines group(a) and ends with `return run(group)` (or run(group, a)
-- when its own arguments come before the groups').
--
-- ARGV[1]             seq: 20 zero-padded decimal digits
-- ARGV[2]             lane record TTL, ms
-- ARGV[3 ..]          groups, one per namespace shard (their layout is the
--                     body's), after the body's own arguments if it has
--                     any
-- KEYS                the lane records (push.lua: one per group, first of
--                     its keys; check.lua: one for the call, KEYS[1]),
--                     then for each group in turn its window hashes,
--                     numbered 1..m (and the body's others), then its
--                     buckets, anchored windows and logs (a log's entries,
--                     then its sum), numbered on from there
--
-- A lane record is seq's 20 digits, followed in check.lua's records by
-- the decisions of the call's checks (see check.lua); above reads the
-- digits alone.
--
-- A group applies when seq is above its lane record (or there is none);
-- the body then makes its writes and records seq (SET with the lane TTL),
-- and the prelude writes the buckets, anchored windows and logs it
-- changed, in this one atomic script. A group that does not apply writes
-- nothing but the trimming of the logs it reads (see logTrim).
--
-- A write that fails, or a key that holds no number (no bucket, anchored
-- window or log), does not stop the others, and seq is recorded anyway:
-- Redis does not undo the writes of a failed script, so a retry must find
-- the batch applied. The reply is then an error naming the first failure;
-- else it is the body's values, in the order the groups append them to
-- out.

local seq, laneTTL, nargs = ARGV[1], ARGV[2], #ARGV
-- Globals the scripts use most, as locals: a global costs a table lookup
-- at each use. (redis.call stays written out: tools find the commands the
-- scripts run by it.)
local ARGV, KEYS, tonumber, unpack = ARGV, KEYS, tonumber, unpack
local seqHi, seqLo = string.sub(seq, 1, 10), tonumber(string.sub(seq, 11, 20))

-- above reports whether seq is above the lane record rec (nil: none),
-- whose first 20 characters are its seq (what follows is check.lua's). The
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
local bad = nil -- the first field that holds no number (or key no bucket, anchored window or log)
local out, o = {}, 0 -- the reply, its length

-- N[s]: tonumber(s), converted once. Lua is slow next to Redis here:
-- converting a number from or to a string, or growing a table, costs a
-- good part of an HGET, and the arguments repeat a few numbers.
local N = setmetatable({}, { __index = function(t, s)
  local v = tonumber(s)
  t[s] = v
  return v
end })

-- exact reports whether v is a multiple of 1/16 below 1e11 in magnitude
-- (every integer count and cost up to there, halves, quarters...). Such a
-- number has at most 15 significant digits, so it is exactly a double, the
-- client sends it as its exact decimal, sums of two are exact in Lua's
-- doubles, and HINCRBYFLOAT adds it exactly (long double) and rounds
-- nothing at its 17 decimals: summing exact values in Lua and writing the
-- sum once stores what one HINCRBYFLOAT per value would, and the same
-- totals come out on the way. Other values would not (0.1, 1/3, counts
-- past 1e11): HINCRBYFLOAT adds in long double and rounds each result to
-- 17 decimals, Lua rounds each sum to a double, and the two may differ in
-- the last digits (0.1 + 0.1 + 0.1 is 0.3 for HINCRBYFLOAT,
-- 0.30000000000000004 in Lua).
local function exact(v)
  return v * 16 % 1 == 0 and v < 1e11 and v > -1e11
end

-- incr adds v, sent as the string arg, to a field and returns the reply,
-- or nil when it fails. An integer below 1e6 (sent without exponent) goes
-- with HINCRBY when the field holds an integer, or may (cur nil: unknown):
-- its result is the very number and stored string of HINCRBYFLOAT (an
-- exact integer below 2^63), at a lower cost (no long double parsing and
-- formatting). Its reply is exact as a Lua number below 2^53; past that,
-- the stored string is read instead. When HINCRBY refuses (a field or sum
-- that is no integer, an overflow), HINCRBYFLOAT decides.
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

-- The group being run: KEYS[kb + 1 + h] is its key number h (its hash
-- number h, 1..m; push.lua's lane record is KEYS[kb + 1]); apply: whether
-- seq is above its lane record.
local kb, apply = 0, false

-- fault notes the first field that holds no number: of hash number h, or
-- with what ('bucket', 'anchored window', 'log'), the first key number h
-- that holds no such thing.
local function fault(h, what)
  if not bad then
    if what then
      bad = what .. ' ' .. KEYS[kb + 1 + h] .. ' holds no ' .. what
    else
      bad = 'field of hash ' .. KEYS[kb + 1 + h] .. ' holds no number'
    end
    if apply then
      bad = bad .. ', batch recorded as applied'
    end
  end
end

-- The keyed states: buckets, anchored windows and sliding logs. keyed()
-- makes their functions on first use and returns them in K (making a
-- function costs Redis about as much as a small command: a call with no
-- keyed state makes none). They read and write the keys of the group
-- being run (kb), as the windows do.
local K

local function keyed()
  if K then
    return K
  end

  -- Buckets (strategy/bucket.go, internal/arith/bucket.go). A bucket is one string key of its group's
  -- shard: "at level rate", with at the Unix ms of its last change (the
  -- node's clock), level how full it was then (cost units times window ms,
  -- written '%.17g', which parses back to the very double) and rate the
  -- limit per window it drained at then, as the node sent it. A key holds a
  -- bucket until a minute after it drains empty (keyedMargin), counted from
  -- the clock of the request that changed it (a relative TTL: the server's
  -- clock does not matter); a bucket with no key is empty.
  --
  -- bucketLevel, bucketFits and bucketAdd are arith.Level, BucketFits and
  -- BucketAdd: the same operations on doubles in the same
  -- order, so that Redis decides every request as the node does.

  local keyedMargin = 60000 -- ms: how long a bucket, anchored window or log outlives its use
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
        fault(h, 'bucket')
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
    if b.level < 0 then
      b.level = 0 -- tokens given back fill it at most (a level below 0 reads as 0)
    end
    if now > b.at then
      b.at = now
    end
    b.rate, b.ref = rs, math.min(b.ref or now, now)
  end

  -- saveBuckets writes each bucket the group changed, with a TTL that ends
  -- keyedMargin after it drains empty (at + level / rate, rounded up),
  -- counted from its ref, and forgets the group's buckets.
  local function saveBuckets()
    for h, b in pairs(Bk) do
      if b and b.ref then
        local ttl = math.ceil(b.at + b.level / N[b.rate]) - b.ref + keyedMargin
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

  -- Anchored windows and sliding logs (internal/arith), in the group's
  -- shard like buckets, and like them read at most once per group and
  -- written at its end (saveAnchored, saveLogs), with relative TTLs counted
  -- from the earliest clock of the requests that changed them (ref).
  --
  -- An anchored window is one string key "at level": at the Unix ms it
  -- opened, level its count ('%.17g'). It expires keyedMargin after it
  -- closes (at + window); a closed or expired window is none.
  --
  -- A sliding log is two keys: a sorted set of its entries, one member
  -- "at:cost" per ms (score at; a hit of the same ms replaces it with one of
  -- the summed cost), and a string "newest sum": the newest entry's ms and
  -- the sum of the entries' costs (arith.Log's Sum, '%.17g'), the sum's
  -- key numbered right after the entries'. Both expire keyedMargin after the
  -- newest entry stops weighing (newest + window). A log is trimmed when
  -- used (logTrim) and never walked whole: a hit costs O(log n) in its n
  -- entries, each entry is trimmed once, and a denied request reads the
  -- oldest entries only as far as it must wait (logRetry).
  --
  -- anchoredCount, anchoredAdd, logTrim, logAdd and logRetry are
  -- arith.AnchoredCount, AnchoredAdd, Log.Trim, Log.Add and RetryAt: the
  -- same operations on doubles in the same order.

  -- Ak[h]: the state of anchored window number h of the group being run,
  -- read at most once per group: {at, level} ({0, 0} when its key holds
  -- none), or false when its key holds something else; ref and window once
  -- changed.
  local Ak = {}

  -- anchored returns the state of anchored window number h, or nil (noted
  -- by fault) when its key holds no anchored window.
  local function anchored(h)
    local a = Ak[h]
    if a == nil then
      a = { at = 0, level = 0 }
      local v = redis.pcall('GET', KEYS[kb + 1 + h])
      if type(v) == 'string' then
        local at, level = string.match(v, '^(%S+) (%S+)$')
        a.at, a.level = tonumber(at), tonumber(level)
        if not (a.at and a.level) then
          a = false
        end
      elseif v then
        a = false
      end
      Ak[h] = a
      if not a then
        fault(h, 'anchored window')
      end
    end
    return a or nil
  end

  -- anchoredCount returns the count of anchored window a at now: 0 when it
  -- is closed (or none).
  local function anchoredCount(a, window, now)
    if a.level > 0 and now < a.at + window then
      return a.level
    end
    return 0
  end

  -- anchoredAdd counts cost at now: in the open window, or in one it opens
  -- at now; a hit a whole window before the open one's opening (a late
  -- diff) counts nowhere.
  local function anchoredAdd(a, cost, window, now)
    if a.level > 0 and now < a.at + window then
      if now + window <= a.at then
        return
      end
      a.level = a.level + cost
    else
      a.at, a.level = now, cost
    end
    a.window, a.ref = window, math.min(a.ref or now, now)
  end

  -- saveAnchored writes each anchored window the group changed, with a TTL
  -- that ends keyedMargin after it closes, and forgets the group's.
  local function saveAnchored()
    for h, a in pairs(Ak) do
      if a and a.ref then
        local ttl = math.min(a.at + a.window - a.ref + keyedMargin, maxTTL)
        local key = KEYS[kb + 1 + h]
        local r = redis.pcall('SET', key, string.format('%.0f %.17g', a.at, a.level), 'PX', string.format('%.0f', ttl))
        if r.err then
          failed = failed or ('anchored window ' .. key .. ': ' .. tostring(r.err))
        end
      end
    end
    Ak = {}
  end

  -- Lg[h]: the state of the log whose entries are key number h, read at
  -- most once per group: {newest, sum} (newest nil: no entry), or false
  -- when its keys hold something else. Beside those: cut, the instant it is
  -- trimmed up to in this group (no entry at or before it); pend, the entry
  -- last added, {at, cost, old (the member it replaces)}, which the hits of
  -- its ms join; adds, the new entries added before it and not written yet
  -- (score, member, ...: see logPark, logFlush); bad, when its entries' key
  -- turned out to hold no sorted set of entries (a bad log is read, never
  -- written); changed, ref and window, once changed.
  local Lg = {}

  -- log returns the state of the log whose entries are key number h, or nil
  -- (noted by fault) when its keys hold no log. The sum's key is the log's
  -- record: entries without it (its key evicted, or deleted) are stale, and
  -- go.
  local function log(h)
    local l = Lg[h]
    if l == nil then
      l = { sum = 0 }
      local v, bad = redis.pcall('GET', KEYS[kb + 2 + h]), h + 1
      if type(v) == 'string' then
        local newest, sum = string.match(v, '^(%S+) (%S+)$')
        l.newest, l.sum = tonumber(newest), tonumber(sum)
        if not (l.newest and l.sum) then
          l = false
        end
      elseif v then
        l = false
      else
        local t = redis.call('TYPE', KEYS[kb + 1 + h]).ok
        if t == 'zset' then
          redis.call('UNLINK', KEYS[kb + 1 + h])
        elseif t ~= 'none' then
          l, bad = false, h
        end
      end
      Lg[h] = l
      if not l then
        fault(bad, 'log')
      end
    end
    return l or nil
  end

  -- zcall runs command cmd on the entries' key of log l (key number h), and
  -- returns its reply, or nil when the key holds no sorted set (noted by
  -- fault; the log is then bad).
  local function zcall(l, h, cmd, ...)
    local r = redis.pcall(cmd, KEYS[kb + 1 + h], ...)
    if type(r) == 'table' and r.err then
      if not l.bad then
        l.bad = true
        fault(h, 'log')
      end
      return nil
    end
    return r
  end

  -- entryCost returns the cost of the log entry member m ("at:cost"), or
  -- nil (noted by fault) for a member that is none.
  local function entryCost(l, h, m)
    local i = string.find(m, ':', 1, true)
    local cost = i and tonumber(string.sub(m, i + 1))
    if not cost and not l.bad then
      l.bad = true
      fault(h, 'log')
    end
    return cost
  end

  -- logPark sets the pending entry of log l (key number h) aside for the
  -- next: a new entry joins adds, one that replaces a stored entry is
  -- written at once.
  local function logPark(l, h)
    local p = l.pend
    if not p then
      return
    end
    l.pend = nil
    local score, member = string.format('%.0f', p.at), string.format('%.0f:%.17g', p.at, p.cost)
    if p.old then
      zcall(l, h, 'ZREM', p.old)
      zcall(l, h, 'ZADD', score, member)
      return
    end
    local a = l.adds
    if not a then
      a = {}
      l.adds = a
    end
    local n = #a
    a[n + 1] = score
    a[n + 2] = member
  end

  -- logFlush writes the entries of log l (key number h) added since its
  -- last flush: ZADDs of up to 256 entries (a bounded unpack).
  local function logFlush(l, h)
    logPark(l, h)
    local a = l.adds
    if a then
      l.adds = nil
      for i = 1, #a, 512 do
        zcall(l, h, 'ZADD', unpack(a, i, math.min(i + 511, #a)))
      end
    end
  end

  -- logTrim drops the entries of log l (key number h) that no longer weigh
  -- at now, those at or before now - window, oldest first, subtracting each
  -- cost from the sum, which is 0 once the log is empty: read and removed by
  -- score (O(log n) and the entries dropped). A log whose newest entry goes
  -- is emptied without a read (its sum is 0 whatever they held).
  local function logTrim(l, h, now, window)
    local cut = now - window
    if l.cut and cut <= l.cut then
      return
    end
    l.cut = cut
    if not l.newest then
      return
    end
    if l.newest <= cut then
      l.newest, l.sum, l.pend, l.adds = nil, 0, nil, nil
      zcall(l, h, 'UNLINK')
    else
      logFlush(l, h)
      local score = string.format('%.0f', cut)
      local gone = zcall(l, h, 'ZRANGEBYSCORE', '-inf', score)
      if not gone or #gone == 0 then
        return
      end
      for _, m in ipairs(gone) do
        l.sum = l.sum - (entryCost(l, h, m) or 0)
      end
      if l.bad then
        return
      end
      zcall(l, h, 'ZREMRANGEBYSCORE', '-inf', score)
    end
    l.window, l.ref, l.changed = window, math.min(l.ref or now, now), true
  end

  -- logAdd adds cost to the entry at at of log l (key number h), made when
  -- there is none, and to its sum, by the clock ref. Hits of one ms add up
  -- in the pending entry. The first of a ms after the newest entry makes a
  -- new one; one at or before it reads the stored entry of that ms, if any
  -- (O(log n)), once the entries added before are written.
  local function logAdd(l, h, at, cost, window, ref)
    l.sum = l.sum + cost
    local p = l.pend
    if p and p.at == at then
      p.cost = p.cost + cost
    else
      logPark(l, h)
      p = { at = at, cost = cost }
      if l.newest and at <= l.newest then
        logFlush(l, h)
        local s = string.format('%.0f', at)
        local old = zcall(l, h, 'ZRANGEBYSCORE', s, s)
        if old and old[1] then
          p.old, p.cost = old[1], (entryCost(l, h, old[1]) or 0) + cost
        end
      end
      l.pend = p
    end
    if not l.newest or at > l.newest then
      l.newest = at
    end
    if l.cut and at <= l.cut then
      l.cut = nil
    end
    l.window, l.ref, l.changed = window, math.min(l.ref or ref, ref), true
  end

  -- logRetry returns the instant at which a request of cost fits the
  -- trimmed log l (key number h) of limit, if no more hits come: its oldest
  -- entries, read in chunks by rank, stop weighing one after the other,
  -- their costs subtracted from the sum in that order (0 after the last).
  -- 0 when it fits now.
  local function logRetry(l, h, cost, limit, window)
    local sum = l.sum
    if sum + cost <= limit then
      return 0
    end
    logFlush(l, h)
    local n = zcall(l, h, 'ZCARD') or 0
    local i, chunk = 0, 16
    while i < n do
      local es = zcall(l, h, 'ZRANGE', i, i + chunk - 1)
      if not es or #es == 0 then
        return 0
      end
      for _, m in ipairs(es) do
        sum = sum - (entryCost(l, h, m) or 0)
        if i == n - 1 then
          sum = 0
        end
        if sum + cost <= limit then
          return (tonumber(string.match(m, '^[^:]+')) or 0) + window
        end
        i = i + 1
      end
      chunk = math.min(2 * chunk, 1024)
    end
    return 0
  end

  -- saveLogs writes each log the group changed: its pending entry, its sum
  -- and the TTL of both keys, which ends keyedMargin after its newest entry
  -- stops weighing; an empty log loses both keys. It forgets the group's
  -- logs.
  local function saveLogs()
    for h, l in pairs(Lg) do
      if l and l.changed and not l.bad then
        logFlush(l, h)
        local key = KEYS[kb + 2 + h]
        local r
        if l.newest then
          -- The entries' TTL first: the sum, set after, never expires
          -- before them.
          local ttl = string.format('%.0f', math.min(l.newest + l.window - l.ref + keyedMargin, maxTTL))
          zcall(l, h, 'PEXPIRE', ttl)
          r = redis.pcall('SET', key, string.format('%.0f %.17g', l.newest, l.sum), 'PX', ttl)
        else
          r = redis.pcall('UNLINK', key)
        end
        if type(r) == 'table' and r.err then
          failed = failed or ('log ' .. key .. ': ' .. tostring(r.err))
        end
      end
    end
    Lg = {}
  end

  -- keyedAdd adds cost at at to the bucket ('b', draining at the rate sent
  -- as rs), anchored window ('a') or log ('l') of type t and key number h.
  local function keyedAdd(t, h, rs, cost, window, at)
    if t == 'b' then
      local b = bucket(h)
      if b then
        bucketAdd(b, rs, cost, window, at)
      end
    elseif t == 'a' then
      local a = anchored(h)
      if a then
        anchoredAdd(a, cost, window, at)
      end
    else
      local l = log(h)
      if l and not l.bad then
        logAdd(l, h, at, cost, window, at)
      end
    end
  end

  K = { bucket = bucket, bucketFits = bucketFits, anchored = anchored, anchoredCount = anchoredCount,
    log = log, logTrim = logTrim, logRetry = logRetry, keyedAdd = keyedAdd }
  -- save writes what the group changed and forgets its states.
  K.save = function()
    saveBuckets()
    saveAnchored()
    saveLogs()
  end
  return K
end

-- answer returns the script's reply: an error naming the first write that
-- failed, else the first value that is no number, else the body's values.
local function answer()
  if failed then
    return redis.error_reply('RATESYNC write failed, batch recorded as applied: ' .. failed)
  end
  if bad then
    return redis.error_reply('RATESYNC ' .. bad)
  end
  return out
end

-- run runs the groups in order from the one whose arguments start at
-- ARGV[a] (3 when a is nil: right after seq and the lane TTL), each with
-- group(a) (the body's: it runs that group and returns its number of keys
-- and where the next group's arguments start, nil after the last), then
-- writes the keyed states each changed, and returns the script's reply.
local function run(group, a)
  a = a or 3
  while a do
    local nk, nxt = group(a)
    if K then
      K.save()
    end
    kb, a = kb + nk, nxt
  end
  return answer()
end
