-- check.lua: decides and counts the checks of one batch that fall in some
-- namespace shards, at most once per (node, seq) in each. Shipped after
-- lane.lua (the prelude: seq, lane records, the walk over the groups,
-- incr, and the values of repeated fields).
--
-- ARGV[1], ARGV[2]    seq and lane record TTL (see lane.lua)
-- ARGV[3 ..]          groups, one per namespace shard, each: n, then n
--                     arguments: m, "1" when its checks name distinct
--                     fields and have one limit each (else "0"), the TTL
--                     of each of its m window hashes (ms), then its checks,
--                     each: field, cost, L, then L limits (current hash h,
--                     previous hash h, weight or 'F' for a fixed window,
--                     limit)
-- KEYS                for each group in turn: its lane record (the last
--                     seq applied for the node in that shard), then its m
--                     window hashes, numbered 1..m
--
-- A group applies when seq is above its lane record (or there is none).
-- Then a check passes when, for every limit, current + previous * weight +
-- cost <= limit, with the weight computed by the caller from the node's
-- clock, and a passing check adds its cost once to the current hash of
-- each of its limits (the current window of each distinct size). Checks
-- run in order, each seeing the counts of the ones before. The counted
-- hashes get their TTL and seq becomes the lane record, in this one atomic
-- script. A group that does not apply writes nothing and passes nothing.
--
-- Returns, for each check of each group in order: '1' or '0' (passed),
-- then for each of its limits the current and previous window's value of
-- the field after the decision ('' for none): strings, or integers.
--
-- Cost. Distinct fields of one limit each: 2 HGETs and, when the check
-- passes, the increment (incr, in lane.lua) whose reply is its total. Any
-- other group follows each (hash, field) in the script (Values, in
-- lane.lua): it is read once, and the costs it takes are summed and
-- written at the end with one increment (3 calls per distinct key, 3 in
-- all for one hot key). Then each counted hash gets one PEXPIRE, and the
-- lane record its GET and SET. Either way the decisions, totals and stored
-- counts are those of one HINCRBYFLOAT per passing check.
--
-- A field that holds no number fails the checks that read it (they do not
-- pass). Like an increment that fails, it does not stop the others, and
-- seq is recorded anyway (see lane.lua); the reply is then an error naming
-- the first failure.

-- touched[h] == g: the group numbered g counted into its hash h.
local touched, g = {}, 0

-- group runs the group whose arguments are ARGV[a + 1 .. a + n] and
-- returns its number of keys.
local function group(a, n)
  g = g + 1
  apply = above(redis.call('GET', KEYS[kb + 1]))
  local m = tonumber(ARGV[a + 1])
  local i, last = a + 3 + m, a + n
  if ARGV[a + 2] == '1' then
    -- M: N for a group of several checks, whose arguments repeat; nil for
    -- one (a conversion remembered costs more than one made once).
    local M = last - i > 7 and N or nil
    while i <= last do
      local field, arg, w = ARGV[i], ARGV[i + 1], ARGV[i + 5]
      local h = M and M[ARGV[i + 3]] or tonumber(ARGV[i + 3])
      local p = M and M[ARGV[i + 4]] or tonumber(ARGV[i + 4])
      local cost = M and M[arg] or tonumber(arg)
      local limit = M and M[ARGV[i + 6]] or tonumber(ARGV[i + 6])
      local cur = redis.call('HGET', KEYS[kb + 1 + h], field)
      local prev = redis.call('HGET', KEYS[kb + 1 + p], field)
      local c, pv = 0, 0
      if cur then
        c = tonumber(cur)
      end
      if prev and w ~= 'F' then
        pv = tonumber(prev)
      end
      local allowed = apply
      if not c then
        fault(h)
        allowed = false
      elseif not pv then
        fault(p)
        allowed = false
      elseif w ~= 'F' then
        allowed = allowed and c + pv * (M and M[w] or tonumber(w)) + cost <= limit
      else
        allowed = allowed and c + cost <= limit
      end
      if allowed then
        cur = incr(KEYS[kb + 1 + h], field, arg, cost, c) or cur
        touched[h] = g
        out[o + 1] = '1'
      else
        out[o + 1] = '0'
      end
      out[o + 2], out[o + 3] = cur or '', prev or ''
      o = o + 3
      i = i + 7
    end
  else
    track(1 + m)
    while i <= last do
      local field, arg = ARGV[i], ARGV[i + 1]
      local cost, nl = N[arg], N[ARGV[i + 2]]
      i = i + 3
      local first = i
      local allowed = apply
      for _ = 1, nl do
        local h = N[ARGV[i]]
        local rate = Z[h][field]
        if rate == nil then
          rate = num(h, field)
        end
        local w = ARGV[i + 2]
        if rate and w ~= 'F' then
          h = N[ARGV[i + 1]]
          local prev = Z[h][field]
          if prev == nil then
            prev = num(h, field)
          end
          rate = prev and rate + prev * N[w]
        end
        if not rate or rate + cost > N[ARGV[i + 3]] then
          allowed = false
        end
        i = i + 4
      end
      if allowed then
        for j = first, i - 4, 4 do
          local again = false
          for k = first, j - 4, 4 do
            again = again or ARGV[k] == ARGV[j]
          end
          if not again then
            local h = N[ARGV[j]]
            add(h, field, cost, arg)
            touched[h] = g
          end
        end
      end
      o = o + 1
      out[o] = allowed and '1' or '0'
      for j = first, i - 4, 4 do
        local h = N[ARGV[j]]
        out[o + 1] = S[h][field] or reply(h, field)
        h = N[ARGV[j + 1]]
        out[o + 2] = S[h][field] or reply(h, field)
        o = o + 2
      end
    end
    flush()
  end
  if apply then
    for h = 1, m do
      if touched[h] == g then
        redis.call('PEXPIRE', KEYS[kb + 1 + h], ARGV[a + 2 + h])
      end
    end
    redis.call('SET', KEYS[kb + 1], seq, 'PX', laneTTL)
  end
  return 1 + m
end

return run(group)
