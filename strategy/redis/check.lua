-- check.lua: decides and counts the checks of one batch that fall in some
-- namespace shards, at most once per (node, seq) in each. Shipped after
-- lane.lua (the prelude: seq, lane records, the walk over the groups,
-- incr, the values of repeated fields, buckets, anchored windows and
-- logs).
--
-- ARGV[1], ARGV[2]    seq and lane record TTL (see lane.lua)
-- ARGV[3 ..]          groups, one per namespace shard, each: n, then n
--                     arguments: m, k, "1" when its checks name distinct
--                     fields and have one plain window limit each (two
--                     windows) and no keyed limit (else "0"), the TTL of
--                     each of its m window hashes (ms), then its checks,
--                     each: field, cost, L, B, then L window limits (d,
--                     then the hash numbers h of its d windows, the
--                     current one first, then the ones before it: the
--                     previous window, or the sub-windows of a precision
--                     limit; their size ms, ms elapsed in the current
--                     window or 'F' for a fixed window, limit), then B
--                     keyed limits (type: 'b' bucket, 'a' anchored window,
--                     'l' log; key number h, now, window ms, limit (a
--                     bucket's rate), a bucket's burst or '')
-- KEYS                for each group in turn, k keys: its lane record (the
--                     last seq applied for the node in that shard, and the
--                     decisions of the call that applied it), its m
--                     window hashes, numbered 1..m, then the keys of its
--                     buckets, anchored windows and logs (a log has two:
--                     see lane.lua), numbered on
--
-- A group applies when seq is above its lane record (or there is none).
-- Then a check passes when every limit lets it (windowFits, or spanFits
-- over more than two windows: with the elapsed time from the node's clock;
-- in lane.lua, at the check's now: bucketFits, anchoredCount + cost <=
-- limit, a log's sum once trimmed + cost <= limit), and a passing check
-- adds its cost once to the current hash of each of its window limits (the
-- current window of each distinct size) and, when the cost is above 0, to
-- each of its distinct buckets, anchored windows and logs (bucketAdd,
-- anchoredAdd, logAdd at now). Checks run in order, each seeing the counts
-- of the ones before. The counted hashes get their TTL (unless they last
-- longer already: expire, in lane.lua), the keyed states are written and
-- seq becomes the lane record, followed by the group's decisions ('1' for
-- a check that passed, '0' for one that did not, one per check in order),
-- in this one atomic script. A group that does not apply counts nothing
-- and writes nothing but the trimming of the logs it reads (which changes
-- no decision: strategy.Log.Trim at the check's now, as every store
-- trims); its checks reply the decisions its lane record holds when the
-- record is this very seq with decisions (a retry of the call that set
-- it: the same checks in the same order), else (an older seq, or a
-- record of seq alone: a push's, or one written before decisions were
-- recorded) '0'.
--
-- Returns, for each check of each group in order: '1' or '0' (passed, or
-- the decision recorded),
-- then for each of its window limits the value of the field in each of
-- its d windows after the decision, in their order ('' for none): strings,
-- or integers; then for each of its keyed limits its state after the
-- decision, at (an integer) and level (a string, '%.17g'): a bucket's; an
-- anchored window's, 0 and '0' when it is closed; a log's newest entry and
-- sum, then retry, the instant the same request fits when the check is
-- replied '0' and the log refuses it (logRetry), else 0. A key that holds
-- something else: '' for each.
--
-- Cost. Distinct fields of one plain limit each: 2 HGETs and, when the
-- check passes, the increment (incr, in lane.lua) whose reply is its
-- total. Any other group follows each (hash, field) in the script (Values,
-- in lane.lua): it is read once, and the costs it takes are summed and
-- written at the end with one increment (3 calls per distinct key, 3 in
-- all for one hot key); each bucket or anchored window is read once and
-- written once; each log is read once (GET), trimmed (ZRANGEBYSCORE, and
-- ZREMRANGEBYSCORE when entries stopped weighing), and its hits of one ms
-- written once (ZADD; with a ZRANGEBYSCORE and ZREM when an entry of that
-- ms is stored). Then each counted hash gets one PTTL and, when that is
-- shorter than its TTL, one PEXPIRE, and the lane record its GET and SET
-- (one per group, decisions included).
-- Either way the decisions, totals and stored counts are those of one
-- HINCRBYFLOAT per passing check.
--
-- A field that holds no number (a key that holds no bucket, anchored
-- window or log) fails the checks that read it (they do not pass). Like a
-- write that fails, it does not stop the others, and seq is recorded
-- anyway (see lane.lua); the reply is then an error naming the first
-- failure.

-- windowFits reports whether cost fits a window limit
-- (strategy.WindowFits): the current window holds c and the previous one
-- pv; elapsed ms of the current window of size ms have passed (nil: a
-- fixed window). Multiplied through by size, as the node computes it.
local function windowFits(c, pv, cost, limit, size, elapsed)
  if not elapsed then
    return c + cost <= limit
  end
  return (c + cost) * size + pv * (size - elapsed) <= limit * size
end

-- touched[h] == g: the group numbered g counted into its hash h.
local touched, g = {}, 0

-- The decisions of the group being run: D[1 .. nd], '1' or '0' per check
-- so far, recorded after seq when it applies; kept, the lane record when
-- the group repeats the call that set it (its decisions from character
-- 21 on), else nil.
local D, nd, kept = {}, 0, nil

-- decide returns the decision to reply for the next check of the group,
-- which passed or not (allowed): when the group applies, allowed, noted in
-- D; else the decision kept for that check, or '0'.
local function decide(allowed)
  nd = nd + 1
  if apply then
    local d = allowed and '1' or '0'
    D[nd] = d
    return d
  end
  if kept and string.byte(kept, 20 + nd) == 49 then
    return '1'
  end
  return '0'
end

-- simple runs the checks of a group whose checks name distinct fields and
-- have one window limit each, from ARGV[i] to ARGV[last].
local function simple(i, last)
  -- M: N for a group of several checks, whose arguments repeat; nil for
  -- one (a conversion remembered costs more than one made once).
  local M = last - i > 10 and N or nil
  while i <= last do
    local field, arg, e = ARGV[i], ARGV[i + 1], ARGV[i + 8]
    local h = M and M[ARGV[i + 5]] or tonumber(ARGV[i + 5])
    local p = M and M[ARGV[i + 6]] or tonumber(ARGV[i + 6])
    local cost = M and M[arg] or tonumber(arg)
    local cur = redis.call('HGET', KEYS[kb + 1 + h], field)
    local prev = redis.call('HGET', KEYS[kb + 1 + p], field)
    local c, pv = 0, 0
    if cur then
      c = tonumber(cur)
    end
    if prev and e ~= 'F' then
      pv = tonumber(prev)
    end
    local allowed = apply
    if not c then
      fault(h)
      allowed = false
    elseif not pv then
      fault(p)
      allowed = false
    elseif allowed then
      local size = M and M[ARGV[i + 7]] or tonumber(ARGV[i + 7])
      local limit = M and M[ARGV[i + 9]] or tonumber(ARGV[i + 9])
      local elapsed = e ~= 'F' and (M and M[e] or tonumber(e)) or nil
      allowed = windowFits(c, pv, cost, limit, size, elapsed)
    end
    if allowed then
      cur = incr(KEYS[kb + 1 + h], field, arg, cost, c) or cur
      touched[h] = g
    end
    out[o + 1] = decide(allowed)
    out[o + 2], out[o + 3] = cur or '', prev or ''
    o = o + 3
    i = i + 10
  end
end

-- value returns the value of field in hash number h, in a group whose
-- values are followed (track): a number, or false.
local function value(h, field)
  local v = Z[h][field]
  if v == nil then
    v = num(h, field)
  end
  return v
end

-- fitsLimit reports whether cost fits the window limit at ARGV[j] for
-- field, in a group whose values are followed (track), and returns the
-- index of the next limit. Over d windows (a precision limit's: d > 2) it
-- judges as strategy.SpanFits: windowFits of the newest count plus the
-- ones between (summed from 0, newest first, in this order) and the
-- oldest count.
local function fitsLimit(j, field, cost)
  local d = N[ARGV[j]]
  local e, nxt = ARGV[j + d + 2], j + d + 4
  local c = value(N[ARGV[j + 1]], field)
  if not c then
    return false, nxt
  end
  local size, limit = N[ARGV[j + d + 1]], N[ARGV[j + d + 3]]
  if e == 'F' then
    return windowFits(c, 0, cost, limit, size, nil), nxt
  end
  if d > 2 then
    local mid = 0
    for k = j + 2, j + d - 1 do
      local v = value(N[ARGV[k]], field)
      if not v then
        return false, nxt
      end
      mid = mid + v
    end
    c = c + mid
  end
  local pv = value(N[ARGV[j + d]], field)
  return pv and windowFits(c, pv, cost, limit, size, N[e]), nxt
end

-- fitsKeyed reports whether cost fits the keyed limit at ARGV[j] (a
-- log's is trimmed at now first).
local function fitsKeyed(j, cost)
  local t, h, now, window, limit = ARGV[j], N[ARGV[j + 1]], N[ARGV[j + 2]], N[ARGV[j + 3]], N[ARGV[j + 4]]
  if t == 'b' then
    local b = bucket(h)
    return b and bucketFits(b, limit, N[ARGV[j + 5]], cost, window, now)
  elseif t == 'a' then
    local a = anchored(h)
    return a and anchoredCount(a, window, now) + cost <= limit
  end
  local l = log(h)
  if not l then
    return false
  end
  logTrim(l, h, now, window)
  return not l.bad and l.sum + cost <= limit
end

-- firstKeyed reports whether the keyed limit at ARGV[j] is the first of
-- those from ARGV[from] on (6 arguments each) to name its key.
local function firstKeyed(from, j)
  for k = from, j - 6, 6 do
    if ARGV[k + 1] == ARGV[j + 1] then
      return false
    end
  end
  return true
end

-- keyedState appends to out the state of the keyed limit at ARGV[j] after
-- a check of cost that passed or not (allowed).
local function keyedState(j, cost, allowed)
  local t, h, now, window = ARGV[j], N[ARGV[j + 1]], N[ARGV[j + 2]], N[ARGV[j + 3]]
  if t == 'b' then
    local b = bucket(h)
    out[o + 1], out[o + 2] = b and b.at or '', b and string.format('%.17g', b.level) or ''
    o = o + 2
  elseif t == 'a' then
    local a = anchored(h)
    if a and anchoredCount(a, window, now) > 0 then
      out[o + 1], out[o + 2] = a.at, string.format('%.17g', a.level)
    else
      out[o + 1], out[o + 2] = a and 0 or '', a and '0' or ''
    end
    o = o + 2
  else
    local l = log(h)
    if l and not l.bad then
      local retry = 0
      if not allowed then
        retry = logRetry(l, h, cost, N[ARGV[j + 4]], window)
      end
      out[o + 1], out[o + 2], out[o + 3] = l.newest or 0, string.format('%.17g', l.sum), retry
    else
      out[o + 1], out[o + 2], out[o + 3] = '', '', ''
    end
    o = o + 3
  end
end

-- firstWindow reports whether the window limit at ARGV[j] is the first of
-- those from ARGV[from] on to name its current hash (the limits of one
-- size count once).
local function firstWindow(from, j)
  local k = from
  while k < j do
    if ARGV[k + 1] == ARGV[j + 1] then
      return false
    end
    k = k + N[ARGV[k]] + 4
  end
  return true
end

-- check runs the check at ARGV[i] of a group whose values are followed
-- (track) and returns the index of the next.
local function check(i)
  local field, arg = ARGV[i], ARGV[i + 1]
  local cost = N[arg]
  local win, nw = i + 4, N[ARGV[i + 2]] -- window limits, then keyed ones from bkt to the end
  local allowed, bkt = apply, win
  for _ = 1, nw do
    local fits
    fits, bkt = fitsLimit(bkt, field, cost)
    allowed = allowed and fits
  end
  local stop = bkt + 6 * N[ARGV[i + 3]]
  for j = bkt, stop - 1, 6 do
    allowed = fitsKeyed(j, cost) and allowed
  end
  if allowed then
    local j = win
    while j < bkt do
      if firstWindow(win, j) then
        local h = N[ARGV[j + 1]]
        add(h, field, cost, arg)
        touched[h] = g
      end
      j = j + N[ARGV[j]] + 4
    end
    for j = bkt, stop - 1, 6 do
      if cost > 0 and firstKeyed(bkt, j) then
        keyedAdd(ARGV[j], N[ARGV[j + 1]], ARGV[j + 4], cost, N[ARGV[j + 3]], N[ARGV[j + 2]])
      end
    end
  end
  local said = decide(allowed)
  o = o + 1
  out[o] = said
  local j = win
  while j < bkt do
    local d = N[ARGV[j]]
    for k = j + 1, j + d do
      local h = N[ARGV[k]]
      o = o + 1
      out[o] = S[h][field] or reply(h, field)
    end
    j = j + d + 4
  end
  for j = bkt, stop - 1, 6 do
    keyedState(j, cost, said == '1')
  end
  return stop
end

-- group runs the group whose arguments are ARGV[a + 1 .. a + n] and
-- returns its number of keys.
local function group(a, n)
  g = g + 1
  local rec = redis.call('GET', KEYS[kb + 1])
  apply, kept, nd = above(rec), nil, 0
  if not apply and #rec > 20 and string.sub(rec, 1, 20) == seq then
    kept = rec
  end
  local m, nk = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local i, last = a + 4 + m, a + n
  if ARGV[a + 3] == '1' then
    simple(i, last)
  else
    track(1 + m)
    while i <= last do
      i = check(i)
    end
    flush()
  end
  if apply then
    for h = 1, m do
      if touched[h] == g then
        expire(KEYS[kb + 1 + h], ARGV[a + 3 + h])
      end
    end
    redis.call('SET', KEYS[kb + 1], seq .. table.concat(D, '', 1, nd), 'PX', laneTTL)
  end
  return nk
end

return run(group)
