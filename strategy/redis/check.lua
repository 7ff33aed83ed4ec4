-- check.lua: decides and counts the checks of one call that fall in some
-- namespace shards, at most once per (node, seq). Shipped after lane.lua
-- (the prelude: seq, lane records, the walk over the groups, incr, expire,
-- buckets, anchored windows and logs).
--
-- ARGV[1], ARGV[2]    seq and lane record TTL (see lane.lua)
-- ARGV[3]             w: the windows of the call, then for each its TTL
--                     (ms) and '1' when that TTL is checked whenever a
--                     check counts in it (it is read over a span longer
--                     than its size: a precision limit), else '0'
-- then                p: the plans of the call (what checks of the same
--                     cost, clock and limits share), then their numbers
--                     as a string of big-endian doubles (struct.unpack
--                     reads them with no conversion from decimal), each
--                     plan's: cost, now (ms), L, B, then L window limits
--                     (d, the numbers of its d windows, the current one
--                     first, then the ones before it: the previous window,
--                     or the sub-windows of a precision limit; their size
--                     ms, ms elapsed in the current window or -1 for a
--                     fixed window, limit), then B keyed limits (type: 1
--                     bucket, 2 anchored window, 3 log; window ms, limit
--                     (a bucket's rate), a bucket's burst or 0); then
--                     each plan's strings: its cost, then its keyed
--                     limits' limits, as increments and buckets use them
-- then                the groups' heads, a string of 5 bytes per group
--                     (one per namespace shard): how it is run ('s' by
--                     simple, 'r' by simple, its fields may repeat, 'g' by
--                     general), its number of checks, its number of keys
--                     (2 bytes each, big-endian)
-- then                the checks' plan numbers, a string of one byte per
--                     check (two, big-endian, past 255 plans), group after
--                     group
-- then                the checks, group after group, each: field, then for
--                     each keyed limit of its plan the number of its key
-- KEYS                KEYS[1] is the call's lane record: the last seq
--                     applied for the node in the shard of the call's
--                     first group, and the decisions of the call that
--                     applied it; then for each group in turn, k keys:
--                     the hash of each of the w windows in its shard,
--                     numbered 1..w, then the keys of its buckets,
--                     anchored windows and logs (a log has two: see
--                     lane.lua), numbered on
--
-- One lane record stands for every group of the call: Redis runs them in
-- this one atomic script, and a call sent again (a lost reply) is the same
-- groups in the same script, led by the same first group (see the package
-- documentation). The call applies when seq is above that record (or there
-- is none). Then a check passes when every limit lets it (windowFits, or
-- spanFits over more than two windows: with the elapsed time from the
-- node's clock; at the check's now, in lane.lua: bucketFits,
-- anchoredCount + cost <= limit, a log's sum once trimmed + cost <=
-- limit), and a passing check adds its cost once to the current window of
-- each of its window limits (the current window of each distinct size)
-- and, when the cost is above 0, to each of its distinct buckets, anchored
-- windows and logs (bucketAdd, anchoredAdd, logAdd at now). Checks run in
-- order, each seeing the counts of the ones before. A counted hash gets
-- its TTL (unless it lasts longer already: expire, in lane.lua) when a
-- check made a field in it (so the hash too, maybe) or its window is read
-- over a longer span; any other hash got its TTL from the script that
-- made it. The keyed states are written and seq becomes the lane record,
-- followed by the decisions ('1' for a check that passed, '0' for one
-- that did not, in order, the groups' apart by '/'), in this one atomic
-- script. A call that does not apply counts nothing and writes nothing
-- but the trimming of the logs it reads (which changes no decision:
-- arith.Log.Trim at the check's now, as every store trims); its checks
-- reply the decisions its lane record holds when the record is this very
-- seq with decisions (a retry of the call that set it: the same checks in
-- the same order), else 0 (an older seq, or a push's record of seq alone).
--
-- Returns, for each check of each group in order: 1 or 0 (passed, or the
-- decision recorded), then for each of its window limits the value of the
-- field in each of its d windows after the decision, in their order (''
-- for none): strings, or integers; then for each of its keyed limits its
-- state after the decision, at (an integer) and level (a string,
-- '%.17g'): a bucket's; an anchored window's, 0 and '0' when it is
-- closed; a log's newest entry and sum, then retry, the instant the same
-- request fits when the check is replied 0 and the log refuses it
-- (logRetry), else 0. A key that holds something else: '' for each.
--
-- Cost. Per call: the lane record's GET and SET. Per group: each window
-- hash is read once (HGET of its one field, or HMGET of its fields), and
-- a hash counted in is written once (HSET of the fields counted in it),
-- whatever the number of checks: counts and costs are summed in Lua when
-- they are exact (see exact, in lane.lua), and written as HINCRBYFLOAT
-- would store them; an increment that is not exact goes at once with
-- incr, after its field's pending sum. A group of up to fastMax checks,
-- each of one plain window limit and an integer cost, counts each check
-- first instead (HINCRBY, taken back when the check does not pass) and
-- reads the previous window alone: two calls per check (the fast loop,
-- which runs before the functions of the other paths are made). A
-- counted hash takes a PTTL (and a PEXPIRE when that is short) only when
-- a check made a field in it, or it is read over a longer span. Each
-- bucket or anchored window is read once
-- and written once; each log is read once (GET), trimmed (ZRANGEBYSCORE,
-- and ZREMRANGEBYSCORE when entries stopped weighing), and its hits of
-- one ms written once (ZADD; with a ZRANGEBYSCORE and ZREM when an entry
-- of that ms is stored). Either way the decisions, totals and stored
-- counts are those of one HINCRBYFLOAT per passing check.
--
-- A field that holds no number (a key that holds no bucket, anchored
-- window or log) fails the checks that read it (they do not pass). Like a
-- write that fails, it does not stop the others, and seq is recorded
-- anyway (see lane.lua); the reply is then an error naming the first
-- failure.

-- Wt[w], Wa[w]: the TTL of window w as sent, and whether it is checked
-- whenever a check counts in the window. P[p]: plan number p: {cost, arg
-- (the cost as sent), now, int (its cost is an integer below 1e6), nb
-- (its number of keyed limits), at (where its limits start in Nums), ra
-- (where its keyed limits' strings start in ARGV)}; and, made on first
-- use by general (limits), lims (its window limits) and keyed (its keyed
-- limits): a window limit is {d, w (its windows' numbers), size, elapsed
-- (nil: fixed), limit, first (the first of the plan's limits to count in
-- its current window)}; a keyed limit {t ('b', 'a' or 'l'), window, rs
-- (the limit as sent), limit, burst}. A plan of one plain window limit
-- also has, for simple: wc and wp (its windows), size, e (elapsed, false:
-- fixed) and limit. Nums: the plans' numbers. G: the bytes of the groups'
-- heads; C[k]: the plan number of the call's check k; ng: the number of
-- groups.
local Wt, Wa, P, Nums, G, C, nw, ng = {}, {}, {}, nil, nil, nil, 0, 0

-- The decisions so far, D[1 .. nd] ('1', '0', '/' between groups),
-- recorded after seq when the call applies; kept, the lane record when
-- the call repeats the one that set it (its decisions from character 21
-- on), else nil; g, the group being run, and kc its checks so far; ck,
-- the call's checks before the group's.
local D, nd, kept, g, kc, ck = {}, 0, nil, 0, 0, 0

-- F, H, W: the fields of a group, the fields and values of an HSET, and
-- the fields of a group whose sum is pending (W[j]), reused from group to
-- group.
local F, H, W = {}, {}, {}

-- The head: the call's lane record, its windows and plans, the groups'
-- heads and the checks' plans.
local first
do
  local rec = redis.call('GET', KEYS[1])
  apply = above(rec)
  if not apply and #rec > 20 and string.sub(rec, 1, 20) == seq then
    kept = rec
  end
  local i = 4
  nw = tonumber(ARGV[3])
  for w = 1, nw do
    Wt[w], Wa[w] = ARGV[i], ARGV[i + 1] == '1'
    i = i + 2
  end
  local np, blob = tonumber(ARGV[i]), ARGV[i + 1]
  Nums = { struct.unpack('>' .. string.rep('d', #blob / 8), blob) }
  i = i + 2
  local x = 1
  for p = 1, np do
    local cost, nl, nb = Nums[x], Nums[x + 2], Nums[x + 3]
    local pl = { cost = cost, arg = ARGV[i], now = Nums[x + 1], int = cost % 1 == 0 and cost < 1e6, nb = nb,
      at = x + 2, ra = i + 1 }
    x = x + 4
    if nl == 1 and nb == 0 and Nums[x] == 2 then
      local e = Nums[x + 4]
      pl.wc, pl.wp, pl.size, pl.e, pl.limit = Nums[x + 1], Nums[x + 2], Nums[x + 3], e >= 0 and e, Nums[x + 5]
    end
    for _ = 1, nl do
      x = x + Nums[x] + 4
    end
    x, i = x + 4 * nb, i + 1 + nb
    P[p] = pl
  end
  G, C = { string.byte(ARGV[i], 1, -1) }, { string.byte(ARGV[i + 1], 1, -1) }
  ng = #G / 5
  if np > 255 then
    local c = {}
    for k = 1, #C / 2 do
      c[k] = C[2 * k - 1] * 256 + C[2 * k]
    end
    C = c
  end
  first = i + 2
  -- The reply and the decisions of a call of up to 256 checks get their
  -- arrays at once, sized for the fast loop's (3 values per check; a
  -- decision per check and a '/' between groups), from an unpack of nils
  -- (a few hundred values on Lua's stack, far below its limit): a table
  -- grown a value at a time costs Redis an allocation and a rehash at
  -- each doubling.
  if #C <= 256 then
    out, D = { unpack(out, 1, 3 * #C) }, { unpack(D, 1, #C + ng) }
  end
end

-- The fast loop: groups of up to fastMax checks ('s' or 'r'), each with
-- one plain window limit and an integer cost below 1e6, when the call
-- applies. Over many keys most groups of a call are such (one per
-- namespace shard, of a check or two), and the encoder sends them first;
-- the loop runs them here, before the functions the other groups need are
-- made (making a function costs Redis about as much as a small command),
-- and returns the reply after the last group, else goes on with simple
-- and general from the first other group.
--
-- Each check is counted first: its HINCRBY's reply less the cost is the
-- value before it, which it is decided on with the previous window (HGET),
-- and it is taken back when it does not pass (HINCRBY of minus the cost,
-- or HDEL when the field held 0 or none: a field of 0 and none are the
-- same count). The checks of a
-- group run in order, each seeing the counts of the ones before, and the
-- decisions, totals and stored counts are those of one HINCRBYFLOAT per
-- passing check. A HINCRBY the field refuses (a field that is no integer),
-- or whose sum goes beyond 2^53 (taken back), leaves that check to read
-- the field first and add with incr, as simple does. A counted hash takes
-- its TTL (expire) once per group, when a check made a field in it or its
-- window is read over a longer span.
local fastMax = 4
local a, type = first, type
-- The plan of the check before (number pn), and its numbers: checks of
-- a call mostly share their plan.
local pn, cost, e, size, limit, arg = 0, 0, false, 0, 0, nil
while apply and g < ng do
  local h = 5 * g + 1
  local how, n = G[h], G[h + 1] * 256 + G[h + 2]
  if how == 103 or n > fastMax then -- 'g', or a group for HMGET
    break
  end
  local pl = P[C[ck + 1]]
  local fast = pl.int
  for k = 2, n do
    fast = fast and P[C[ck + k]].int
  end
  if not fast then
    break
  end
  g = g + 1
  local wc, wp = pl.wc, pl.wp
  local hc, hp = KEYS[kb + 1 + wc], KEYS[kb + 1 + wp]
  local counted, made = false, false
  for k = 1, n do
    local q = C[ck + k]
    if q ~= pn then
      pl = P[q]
      pn, cost, e, size, limit, arg = q, pl.cost, pl.e, pl.size, pl.limit, pl.arg
    end
    local field = ARGV[a]
    local r = redis.pcall('HINCRBY', hc, field, arg)
    if type(r) ~= 'number' then
      r = nil
    elseif r >= 2^53 or r <= -2^53 then
      redis.call('HINCRBY', hc, field, -cost)
      r = nil
    end
    local cur, c, pv = nil, 0, 0
    if r then
      cur, c = r, r - cost
    else
      cur = redis.call('HGET', hc, field)
      if cur then
        c = tonumber(cur)
        if not c then
          fault(wc)
        end
      end
    end
    local prev = redis.call('HGET', hp, field)
    if prev and e then
      pv = tonumber(prev)
      if not pv then
        fault(wp)
      end
    end
    local d = 0
    -- windowFits (arith.WindowFits), written out.
    if c and pv and (e and (c + cost) * size + pv * (size - e) <= limit * size or not e and c + cost <= limit) then
      d, counted = 1, true
      if r then
        made = made or r == cost
      else
        made = made or not cur
        cur = incr(hc, field, arg, cost, c) or cur
      end
    elseif r then
      if r == cost then
        redis.call('HDEL', hc, field)
        cur = false
      else
        if cost > 0 then
          redis.call('HINCRBY', hc, field, -cost)
        end
        cur = c
      end
    elseif type(cur) == 'string' and c and c ~= 0 and c % 1 == 0 and c < 2^53 and c > -2^53 then
      cur = c
    end
    nd = nd + 1
    if d == 1 then
      D[nd] = '1'
    else
      D[nd] = '0'
    end
    if prev and pv and e and pv ~= 0 and pv % 1 == 0 and pv < 2^53 and pv > -2^53 then
      prev = pv
    end
    out[o + 1], out[o + 2], out[o + 3] = d, cur or '', prev or ''
    o, a = o + 3, a + 1
  end
  if counted and (made or Wa[wc]) then
    expire(hc, Wt[wc])
  end
  ck, kb = ck + n, kb + G[h + 3] * 256 + G[h + 4]
  if g < ng then
    nd = nd + 1
    D[nd] = '/'
  end
end
if g == ng then
  redis.call('SET', KEYS[1], seq .. table.concat(D, '', 1, nd), 'PX', laneTTL)
  return answer()
end

-- hset writes the fields and values in H[1 .. n] to hash key (HSET): an
-- integer value goes as a Lua number, which Redis writes with '%.17g',
-- every digit of one below 2^53.
local function hset(key, n)
  local r = redis.pcall('HSET', key, unpack(H, 1, n))
  if type(r) == 'table' and r.err then
    failed = failed or ('field of hash ' .. key .. ': ' .. tostring(r.err))
  end
end

-- kepts returns the decisions the lane record kept holds for group g, ''
-- when it holds none.
local function kepts()
  if not kept then
    return ''
  end
  local s, k = 21, 1
  while k < g do
    s = string.find(kept, '/', s, true)
    if not s then
      return ''
    end
    s, k = s + 1, k + 1
  end
  local e = string.find(kept, '/', s, true)
  return string.sub(kept, s, (e or 0) - 1)
end

-- record writes the call's lane record, when it applies: seq, then the
-- decisions.
local function record()
  if apply then
    redis.call('SET', KEYS[1], seq .. table.concat(D, '', 1, nd), 'PX', laneTTL)
  end
end

-- simple runs the groups from number g + 1 on, whose checks' fields start
-- at ARGV[a], until a group that general runs, or the last: groups whose
-- checks have one plain window limit each, all on the same two windows
-- (the current and the previous), and no keyed limit, and name distinct
-- fields ('s') or may name one twice ('r'). It returns 0 (it moves kb on
-- itself) and where the next group's fields start (nil after the last).
--
-- Each field of a group is read once in each window (HGET for a group of
-- one field, else HMGET of the group's fields), and written once: incr for
-- a group of one check; else HSET of the group's integer sums, and incr
-- for other increments, after their field's sum. It replies, for each
-- check, its decision (1 or 0), the current window's value of its field
-- after it and the previous window's. (The fast loop has run the groups
-- of an integer cost and up to fastMax checks when the call applies:
-- simple runs larger groups, groups of other costs, and every group of a
-- call that does not apply.)
local function simple(a)
  local argv, keys, ou, oi, dn = ARGV, KEYS, out, o, nd
  while g < ng do
    local h = 5 * g + 1
    local how = G[h]
    if how == 103 then -- 'g'
      break
    end
    g = g + 1
    local n, nk, rep = G[h + 1] * 256 + G[h + 2], G[h + 3] * 256 + G[h + 4], how == 114
    local last = a + n - 1
    local pf = P[C[ck + 1]]
    local wc, wp = pf.wc, pf.wp
    local hc, hp = keys[kb + 1 + wc], keys[kb + 1 + wp]
    local pos, cv, pvs, m = nil, nil, nil, 0
    if n == 1 then
      m, F[1] = 1, argv[a]
    elseif rep then
      pos, cv, pvs = {}, {}, {}
      for i = a, last do
        local f = argv[i]
        if not pos[f] then
          m = m + 1
          pos[f], F[m] = m, f
        end
      end
    else
      for i = a, last do
        m = m + 1
        F[m] = argv[i]
      end
    end
    -- cs[j], ps[j] (c1, p1 for one field): the replies for field j, until
    -- a check changes it (cs: the reply of its value then); cv[j], pvs[j]:
    -- the values as numbers (false: not a number), when fields repeat.
    local cs, ps, c1, p1
    if m == 1 then
      c1, p1 = redis.call('HGET', hc, F[1]), redis.call('HGET', hp, F[1])
    else
      cs, ps = redis.call('HMGET', hc, unpack(F, 1, m)), redis.call('HMGET', hp, unpack(F, 1, m))
    end
    local counted, made, cp, ks = false, false, ck, nil
    if not apply then
      ks = kepts()
    end
    if not rep then
      for k = 1, n do
        local pl = P[C[cp + k]]
        local cur, prev
        if m == 1 then
          cur, prev = c1, p1
        else
          cur, prev = cs[k], ps[k]
        end
        local e, c, pv = pl.e, 0, 0
        if cur then
          c = tonumber(cur)
          if not c then
            fault(wc)
          end
        end
        if prev and e then
          pv = tonumber(prev)
          if not pv then
            fault(wp)
          end
        end
        local d = 0
        if apply then
          if c and pv then
            -- windowFits (arith.WindowFits), written out.
            local cost, size = pl.cost, pl.size
            if e and (c + cost) * size + pv * (size - e) <= pl.limit * size or not e and c + cost <= pl.limit then
              d, counted = 1, true
              if not cur then
                made = true
              end
              if m > 1 and pl.int and c % 1 == 0 and c < 1e15 and c > -1e15 then
                cur = c + cost
                cs[k], W[k] = cur, true
              else
                cur = incr(hc, F[k], pl.arg, cost, c) or cur
              end
            end
          end
          dn = dn + 1
          if d == 1 then
            D[dn] = '1'
          else
            D[dn] = '0'
          end
        elseif string.byte(ks, k) == 49 then
          d = 1
        end
        -- The values as integers when they are (a cheaper reply, and read
        -- by the node with no decimal to parse).
        if d == 0 and type(cur) == 'string' and c and c ~= 0 and c % 1 == 0 and c < 2^53 and c > -2^53 then
          cur = c
        end
        if prev and pv and e and pv ~= 0 and pv % 1 == 0 and pv < 2^53 and pv > -2^53 then
          prev = pv
        end
        ou[oi + 1], ou[oi + 2], ou[oi + 3] = d, cur or '', prev or ''
        oi = oi + 3
      end
    else
      local j = 1
      for i = a, last do
        local field, pl = argv[i], P[C[cp + i - a + 1]]
        local cur, prev
        if m == 1 then
          cur, prev = c1, p1
        else
          j = pos[field]
          cur, prev = cs[j], ps[j]
        end
        local e, c, pv = pl.e, cv[j], pvs[j]
        if c == nil then
          c = 0
          if cur then
            c = tonumber(cur)
            if not c then
              fault(wc)
            end
          end
          cv[j] = c or false
        end
        if pv == nil then
          pv = 0
          if prev and e then
            pv = tonumber(prev)
            if not pv then
              fault(wp)
            end
          end
          pvs[j] = pv or false
        end
        local d = 0
        if apply then
          if c and pv then
            local cost, size = pl.cost, pl.size
            if e and (c + cost) * size + pv * (size - e) <= pl.limit * size or not e and c + cost <= pl.limit then
              d, counted = 1, true
              if not cur then
                made = true
              end
              local s = c + cost
              if pl.int and c % 1 == 0 and c < 1e15 and c > -1e15 then
                cur, W[j], cv[j] = s, true, s
              else
                if W[j] then
                  W[j], H[1], H[2] = nil, field, c
                  hset(hc, 2)
                end
                local x = incr(hc, field, pl.arg, cost, c)
                if x then
                  cur, cv[j] = x, tonumber(x)
                end
              end
              if m == 1 then
                c1 = cur
              else
                cs[j] = cur
              end
            end
          end
          dn = dn + 1
          if d == 1 then
            D[dn] = '1'
          else
            D[dn] = '0'
          end
        elseif string.byte(ks, i - a + 1) == 49 then
          d = 1
        end
        ou[oi + 1], ou[oi + 2], ou[oi + 3] = d, cur or '', prev or ''
        oi = oi + 3
      end
    end
    if counted then
      local k = 0
      for j = 1, m do
        if W[j] then
          W[j], H[k + 1], H[k + 2] = nil, F[j], cs and cs[j] or c1
          k = k + 2
          if k == 512 then
            hset(hc, k)
            k = 0
          end
        end
      end
      if k > 0 then
        hset(hc, k)
      end
      if made or Wa[wc] then
        expire(hc, Wt[wc])
      end
    end
    ck, a, kb = ck + n, a + n, kb + nk
    if g < ng and apply then
      dn = dn + 1
      D[dn] = '/'
    end
  end
  o, nd = oi, dn
  if g == ng then
    record()
    return 0
  end
  return 0, a
end

-- general runs the n checks of any other group, from ARGV[a] on, and
-- returns where the next group's arguments start: made on first use (see
-- define).
local general

-- define makes general and the functions it calls: once, and only for
-- calls that have such groups (making a function costs Redis about as
-- much as a small command).
local function define()
  -- decide returns the decision to reply for the next check of the group,
  -- which passed or not (allowed): when the call applies, allowed, noted in
  -- D; else the decision kept for that check (the kc-th of group g's in the
  -- record), or 0.
  local function decide(allowed)
    kc = kc + 1
    if apply then
      nd = nd + 1
      if allowed then
        D[nd] = '1'
        return 1
      end
      D[nd] = '0'
      return 0
    end
    if string.byte(kepts(), kc) == 49 then
      return 1
    end
    return 0
  end

  -- windowFits reports whether cost fits a window limit
  -- (arith.WindowFits): the current window holds c and the previous
  -- one pv; elapsed ms of the current window of size ms have passed (nil:
  -- a fixed window). Multiplied through by size, as the node computes it.
  local function windowFits(c, pv, cost, limit, size, elapsed)
    if not elapsed then
      return c + cost <= limit
    end
    return (c + cost) * size + pv * (size - elapsed) <= limit * size
  end

  -- The values of the group being run, by window number w and field:
  -- R[w], the replies read (false: no field), until a check changes the
  -- field; V[w], the values as numbers (false: not a number); Pd[w], the
  -- fields whose sum is pending; T[w], set when a check counts in w;
  -- Fr[w], when a check made a field there.
  local R, V, Pd, T, Fr

  -- limits returns plan pl with its lims and keyed, made from Nums.
  local function limits(pl)
    if pl.lims then
      return pl
    end
    local lims, kls, x = {}, {}, pl.at
    local nl = Nums[x]
    x = x + 2
    for l = 1, nl do
      local d = Nums[x]
      local w = {}
      for k = 1, d do
        w[k] = Nums[x + k]
      end
      local one = true
      for k = 1, l - 1 do
        if lims[k].w[1] == w[1] then
          one = false -- limits of one size count once
        end
      end
      local e = Nums[x + d + 2]
      lims[l] = { d = d, w = w, size = Nums[x + d + 1], elapsed = e >= 0 and e or nil, limit = Nums[x + d + 3], first = one }
      x = x + d + 4
    end
    for b = 1, pl.nb do
      local rs = ARGV[pl.ra + b - 1]
      kls[b] = { t = ({ 'b', 'a', 'l' })[Nums[x]], window = Nums[x + 1], rs = rs, limit = Nums[x + 2], burst = Nums[x + 3] }
      x = x + 4
    end
    pl.lims, pl.keyed = lims, kls
    return pl
  end

  -- value returns the value of field in window w: a number, or false.
  local function value(w, field)
    local v = V[w][field]
    if v == nil then
      local r = R[w][field]
      v = 0
      if r then
        v = tonumber(r) or false
        if not v then
          fault(w)
        end
      end
      V[w][field] = v
    end
    return v
  end

  -- reply returns the value of field in window w as the script replies it.
  local function reply(w, field)
    local r = R[w][field]
    if r ~= nil then
      return r or ''
    end
    local v = V[w][field]
    if v % 1 == 0 and v < 2^53 and v > -2^53 then
      return v
    end
    return string.format('%.17g', v)
  end

  -- fits reports whether cost fits the window limit lim for field. Over d
  -- windows (a precision limit's: d > 2) it judges as arith.SpanFits:
  -- windowFits of the newest count plus the ones between (summed from 0,
  -- newest first, in this order) and the oldest count.
  local function fits(lim, field, cost)
    local ws = lim.w
    local c = value(ws[1], field)
    if not c then
      return false
    end
    if not lim.elapsed then
      return windowFits(c, 0, cost, lim.limit, lim.size, nil)
    end
    local d = lim.d
    if d > 2 then
      local mid = 0
      for k = 2, d - 1 do
        local v = value(ws[k], field)
        if not v then
          return false
        end
        mid = mid + v
      end
      c = c + mid
    end
    local pv = value(ws[d], field)
    return pv and windowFits(c, pv, cost, lim.limit, lim.size, lim.elapsed)
  end

  -- add adds v, sent as the string arg, to field in window w: to its
  -- pending sum when that stays exact, else at once (incr), after the
  -- pending sum.
  local function add(w, field, v, arg)
    local cur = value(w, field)
    local r = R[w]
    if r[field] == false then
      Fr[w] = true
    end
    T[w] = true
    local s = cur + v
    local p = Pd[w]
    if exact(cur) and exact(v) and exact(s) then
      V[w][field], r[field] = s, nil
      if not p then
        p = {}
        Pd[w] = p
      end
      p[field] = true
      return
    end
    if p and p[field] then
      p[field], H[1], H[2] = nil, field, cur
      hset(KEYS[kb + 1 + w], 2)
    end
    local x = incr(KEYS[kb + 1 + w], field, arg, v, cur)
    if x then
      r[field], V[w][field] = x, tonumber(x)
    end
  end

  -- read reads the fields the n checks of the group (from ARGV[a] on)
  -- name in each of their windows, each once.
  local function read(a, n)
    local Fw = {}
    local i = a
    for k = 1, n do
      local field, pl = ARGV[i], limits(P[C[ck + k]])
      local lims = pl.lims
      for l = 1, #lims do
        local lim = lims[l]
        for k = 1, lim.d do
          local w = lim.w[k]
          local r = R[w]
          if not r then
            r = {}
            R[w], V[w], Fw[w] = r, {}, {}
          end
          if r[field] == nil then
            r[field] = false
            local f = Fw[w]
            f[#f + 1] = field
          end
        end
      end
      i = i + 1 + pl.nb
    end
    for w, f in pairs(Fw) do
      local r, key = R[w], KEYS[kb + 1 + w]
      if #f == 1 then
        r[f[1]] = redis.call('HGET', key, f[1])
      else
        for s = 1, #f, 512 do
          local e = math.min(s + 511, #f)
          local vs = redis.call('HMGET', key, unpack(f, s, e))
          for k = s, e do
            r[f[k]] = vs[k - s + 1]
          end
        end
      end
    end
  end

  -- write writes the pending sums of the group, one HSET per window (of
  -- up to 256 fields).
  local function write()
    for w, p in pairs(Pd) do
      local key, vs, n = KEYS[kb + 1 + w], V[w], 0
      for field in pairs(p) do
        H[n + 1], H[n + 2] = field, vs[field]
        n = n + 2
        if n == 512 then
          hset(key, n)
          n = 0
        end
      end
      if n > 0 then
        hset(key, n)
      end
    end
  end

  -- fitsKeyed reports whether cost fits the keyed limit kl, whose key is
  -- number h, at now (a log is trimmed at now first).
  local function fitsKeyed(kl, h, cost, now)
    local k = keyed()
    if kl.t == 'b' then
      local b = k.bucket(h)
      return b and k.bucketFits(b, kl.limit, kl.burst, cost, kl.window, now)
    elseif kl.t == 'a' then
      local a = k.anchored(h)
      return a and k.anchoredCount(a, kl.window, now) + cost <= kl.limit
    end
    local l = k.log(h)
    if not l then
      return false
    end
    k.logTrim(l, h, now, kl.window)
    return not l.bad and l.sum + cost <= kl.limit
  end

  -- keyedState appends to out the state of the keyed limit kl, whose key
  -- is number h, after a check of cost at now that passed or not
  -- (allowed).
  local function keyedState(kl, h, cost, allowed, now)
    local k = keyed()
    if kl.t == 'b' then
      local b = k.bucket(h)
      out[o + 1], out[o + 2] = b and b.at or '', b and string.format('%.17g', b.level) or ''
      o = o + 2
    elseif kl.t == 'a' then
      local a = k.anchored(h)
      if a and k.anchoredCount(a, kl.window, now) > 0 then
        out[o + 1], out[o + 2] = a.at, string.format('%.17g', a.level)
      else
        out[o + 1], out[o + 2] = a and 0 or '', a and '0' or ''
      end
      o = o + 2
    else
      local l = k.log(h)
      if l and not l.bad then
        local retry = 0
        if not allowed then
          retry = k.logRetry(l, h, cost, kl.limit, kl.window)
        end
        out[o + 1], out[o + 2], out[o + 3] = l.newest or 0, string.format('%.17g', l.sum), retry
      else
        out[o + 1], out[o + 2], out[o + 3] = '', '', ''
      end
      o = o + 3
    end
  end

  -- keyedChecks runs the keyed limits of the check whose field is
  -- ARGV[i], of plan pl (their keys' numbers follow the field): whether
  -- cost fits them all (count nil), else, when the check passed (count),
  -- their counting.
  local function keyedChecks(i, pl, count)
    local now, cost = pl.now, pl.cost
    local ok = true
    for b = 1, pl.nb do
      local kl, h = pl.keyed[b], N[ARGV[i + b]]
      if count == nil then
        ok = fitsKeyed(kl, h, cost, now) and ok
      elseif cost > 0 then
        local first = true
        for c = 1, b - 1 do
          if ARGV[i + c] == ARGV[i + b] then
            first = false
          end
        end
        if first then
          keyed().keyedAdd(kl.t, h, kl.rs, cost, kl.window, now)
        end
      end
    end
    return ok
  end

  general = function(a, n)
    R, V, Pd, T, Fr = {}, {}, {}, {}, {}
    read(a, n)
    local i = a
    for k = 1, n do
      local field, pl = ARGV[i], limits(P[C[ck + k]])
      local cost, lims = pl.cost, pl.lims
      local allowed = apply
      for l = 1, #lims do
        if not fits(lims[l], field, cost) then
          allowed = false
        end
      end
      if pl.nb > 0 and not keyedChecks(i, pl, nil) then
        allowed = false
      end
      if allowed then
        for l = 1, #lims do
          local lim = lims[l]
          if lim.first then
            add(lim.w[1], field, cost, pl.arg)
          end
        end
        if pl.nb > 0 then
          keyedChecks(i, pl, true)
        end
      end
      local said = decide(allowed)
      o = o + 1
      out[o] = said
      for l = 1, #lims do
        local lim = lims[l]
        for d = 1, lim.d do
          o = o + 1
          out[o] = reply(lim.w[d], field)
        end
      end
      for b = 1, pl.nb do
        keyedState(pl.keyed[b], N[ARGV[i + b]], cost, said == 1, pl.now)
      end
      i = i + 1 + pl.nb
    end
    if apply then
      write()
      for w in pairs(T) do
        if Fr[w] or Wa[w] then
          expire(KEYS[kb + 1 + w], Wt[w])
        end
      end
    end
    return i
  end
end

-- group runs the groups from number g + 1 on, whose checks' arguments
-- start at ARGV[a] (their heads: G[5g + 1 ..]): one that general runs
-- ('g'), or those simple runs, and returns their number of keys, where
-- kb is not moved on yet, and where the next group's arguments start
-- (nil after the last).
local function group(a)
  local h = 5 * g + 1
  if G[h] ~= 103 then -- not 'g'
    return simple(a)
  end
  g, kc = g + 1, 0
  local n, nk = G[h + 1] * 256 + G[h + 2], G[h + 3] * 256 + G[h + 4]
  if not general then
    define()
  end
  local nxt = general(a, n)
  ck = ck + n
  if g == ng then
    record()
    return nk
  end
  if apply then
    nd = nd + 1
    D[nd] = '/'
  end
  return nk, nxt
end

return run(group, a)
