-- ringlimit store/redis: one call's batch, checked and, when every entry
-- passes, recorded, atomically, on the server's clock. The arithmetic is
-- limiter/algorithm.go's; see doc.go ("Exactness") for why it is written
-- in (milliseconds, microseconds) pairs.
--
-- ARGV[1]  op: "c" consume, "p" peek, "r" release, "d" debit (record
--          whatever the budget says), "q" peek a debit, "L"/"l" the short
--          form below; tests pin the clock with "<op> <ms> <µs within the
--          ms>" instead of the server's TIME
-- then per key (KEYS[i]) five ARGV (consume, peek) or ten (release):
--   alg (0 sliding log, 1 sliding window, 2 token bucket, 3 fixed
--   window), uses, window (ms), cost, x1[, x2]
--   consume/peek: x1 = the call's member id (sliding log); for a
--            calendar fixed window "e0 e1 e2", the boundaries (ms) its
--            window is picked from, "" for one aligned to the epoch; for a
--            token bucket its burst (capacity), "" for uses
--   release: x1 = member id (log) | window start in ms (window) |
--            arrival time left, ms (bucket) | window end, ms (fixed);
--            x2 = its µs within the ms; for a token bucket x3 = the
--            receipt's moves stamp's incarnation ("0": none), x4, x5 = its
--            moved µs as ms and µs within the ms, x6 = the incarnation a
--            moves record begun here takes (all "" otherwise)
-- (Few arguments on purpose: Redis builds ARGV anew for every call.)
-- Reply (c, p): {allowed, now ms, now µs, then per key: ok, a, b, c, d}
--   log {ok, in-window uses, at of the use whose leaving frees the
--   call, at of the newest use} (µs; for a debit, the use whose leaving
--   lets one more use in after it, 0 when that is the debit itself);
--   window {ok, start ms, curr, prev};
--   bucket {ok, TAT ms, TAT µs, rem, uses} (the state before recording);
--   fixed {ok, end ms, count, 0} (the window holding now).
--   Then, for a consume, per token bucket with a live moves record: {i
--   (its KEYS index), incarnation, moved ms, moved µs within the ms}, the
--   stamp its receipt carries.
local op = ARGV[1]
local nh, nl -- now: ms, and µs within the ms
-- keys expire on the server's real clock; under a pinned clock (tests)
-- they are kept 10 minutes longer, so a slow test run loses no state
local linger = 0
if #op > 1 then
  local o, h, l = string.match(op, '^(%a) (%-?%d+) (%d+)$')
  op, nh, nl = o, tonumber(h), tonumber(l)
  linger = 600000
else
  local t = redis.call('TIME')
  local us = tonumber(t[2])
  nl = us % 1000
  nh = tonumber(t[1]) * 1000 + (us - nl) / 1000
end

-- The short form: the common call, one sliding-log entry of cost 1, op
-- "L" (consume) or "l" (peek), ARGV[2] uses, ARGV[3] the window in ms
-- plus 1 (the key's PEXPIRE), ARGV[4] the call's member id (consume),
-- ARGV[5] the caller's clock in ms (a reference for the reply only).
-- It runs straight through, before anything else is defined: no
-- functions, no tables kept, scores handed to Redis as numbers (Redis
-- writes them with all their digits; string.format costs more than that
-- conversion). When it passes the reply is one integer,
-- (now µs - ARGV[5] * 1000) * 2^20 + in-window uses, whenever that fits
-- (uses < 2^20 and the two clocks within 2^32 µs, about 71 minutes, so
-- the integer stays below 2^53 and exact): a table reply costs Redis a
-- lookup per special field it checks, an element each, and a deferred
-- array length, and costs the client an array. Otherwise {now µs,
-- in-window uses}; when refused {now µs, in-window uses, at of the use
-- whose leaving frees the call, at of the newest use} (µs).
if op == 'L' or op == 'l' then
  local key, U, ttl = KEYS[1], tonumber(ARGV[2]), ARGV[3]
  local wms = tonumber(ttl) - 1
  local now = nh * 1000 + nl
  if nh - wms >= -9007199254740 then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', (nh - wms) * 1000 + nl)
  end
  local total = redis.call('ZCARD', key)
  if total < U then
    if op == 'L' then
      redis.call('ZADD', key, now, ARGV[4])
      if linger > 0 then ttl = string.format('%.0f', wms + 1 + linger) end
      redis.call('PEXPIRE', key, ttl)
    end
    local d = now - tonumber(ARGV[5]) * 1000
    if total < 1048576 and d > -4294967296 and d < 4294967296 then
      return d * 1048576 + total
    end
    return {now, total}
  end
  local a = redis.call('ZRANGE', key, total - U, total - U, 'WITHSCORES')
  local l = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  return {now, total, tonumber(a[2]), tonumber(l[2])}
end

local floor, fmod = math.floor, math.fmod

local function str(x) return string.format('%.0f', x) end

-- floor(a*b/c) for integers 0 <= a < c <= 2^53, 0 <= b <= 2^53, every
-- step exact in doubles (a*b itself may pass 2^53).
local function muldiv(a, b, c)
  local bits = {}
  while b > 0 do
    local h = floor(b / 2)
    bits[#bits + 1] = b - 2 * h
    b = h
  end
  local q, r = 0, 0
  for i = #bits, 1, -1 do
    q = 2 * q
    if r >= c - r then r = r - (c - r); q = q + 1 else r = r + r end
    if bits[i] == 1 then
      if r >= c - a then r = r - (c - a); q = q + 1 else r = r + a end
    end
  end
  return q
end


-- ---- sliding log: a sorted set, one member per use, scored by its µs ----

local function log_members(id, cost)
  if cost == 1 then return {id} end
  local m = {}
  for j = 1, cost do m[j] = id .. ':' .. j end
  return m
end

local function log_read(key, U, wms, cost, debit)
  -- a use made at t counts while now < t + w: drop those with t <= now - w
  -- (below -2^53 no score can lie)
  if nh - wms >= -9007199254740 then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', str((nh - wms) * 1000 + nl))
  end
  local total = redis.call('ZCARD', key)
  if debit then
    -- recorded whatever; for the wait of one more use after it,
    -- total + cost + 1 - U uses must leave
    local need = total + cost + 1 - U
    if need < 1 or need > total then return true, total, 0, 0, 0 end
    local a = redis.call('ZRANGE', key, need - 1, need - 1, 'WITHSCORES')
    return true, total, tonumber(a[2]), 0, 0
  end
  if total + cost <= U then return true, total, 0, 0, 0 end
  local need = total + cost - U
  local a = redis.call('ZRANGE', key, need - 1, need - 1, 'WITHSCORES')
  local l = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  return false, total, tonumber(a[2]), tonumber(l[2]), 0
end

local function log_record(key, wms, cost, id)
  local now = str(nh * 1000 + nl)
  if cost == 1 then
    redis.call('ZADD', key, now, id)
    redis.call('PEXPIRE', key, wms + 1 + linger)
    return
  end
  local m = log_members(id, cost)
  local i = 1
  while i <= #m do
    local args = {}
    for j = i, math.min(i + 499, #m) do
      args[#args + 1] = now
      args[#args + 1] = m[j]
    end
    redis.call('ZADD', key, unpack(args))
    i = i + 500
  end
  redis.call('PEXPIRE', key, wms + 1 + linger)
end

-- ---- sliding window: a hash {s = start ms, c = curr, p = prev} ----

local function win_advance(s, c, p, wms)
  if c == 0 and p == 0 then
    local r = fmod(nh, wms)
    if r < 0 then r = r + wms end
    return nh - r, 0, 0
  end
  if nh < s then return s, c, p end
  local d = nh - s
  if d >= 2 * wms then
    local r = fmod(nh, wms)
    if r < 0 then r = r + wms end
    return nh - r, 0, 0
  elseif d >= wms then
    return s + wms, 0, c
  end
  return s, c, p
end

local function win_state(key)
  local v = redis.call('HMGET', key, 's', 'c', 'p')
  return v[1], tonumber(v[1]) or 0, tonumber(v[2]) or 0, tonumber(v[3]) or 0
end

local function win_read(key, U, wms, cost)
  local _, s, c, p = win_state(key)
  s, c, p = win_advance(s, c, p, wms)
  -- e = now - start as eh ms + el µs
  local eh, el = 0, 0
  if nh >= s then eh, el = nh - s, nl end
  local K = U - c - cost
  local ok = K >= 0
  if ok and p > 0 then
    -- ceil(P*(w-e)/w) <= K  <=>  P*(w-e) <= K*w, with w-e = dh ms + dl µs
    local dh, dl = wms - eh, 0
    if el > 0 then dh, dl = dh - 1, 1000 - el end
    ok = p * dh + floor((p * dl + 999) / 1000) <= K * wms
  end
  return ok, s, c, p, eh
end

-- ---- token bucket (GCRA): a hash {t = TAT ms, m = TAT µs, r = rem, u = uses}
-- the arrival time is exactly TAT + rem/uses µs ----
--
-- and its moves record (limiter.BucketMoves), in the same hash once a
-- release lowered the arrival time: {i = incarnation (a signed 64-bit
-- decimal, as the client sent it), v = moved ms, w = moved µs within the
-- ms, x = Until, whole ms rounded up}. A hash without them (written before
-- the record existed, or never released) has no record. The record is
-- live while now < x; the key never expires before x (see record and
-- the release).

-- tb_moves returns the live moves record of the fields HMGET read (v[5]
-- to v[8]): incarnation (nil: none), moved ms, µs, Until ms.
local function tb_moves(v)
  local x = tonumber(v[8])
  if v[5] == false or v[5] == nil or v[5] == '0' or x == nil or x <= nh then return nil, 0, 0, 0 end
  return v[5], tonumber(v[6]) or 0, tonumber(v[7]) or 0, x
end

local function tb_state(key, U)
  local v = redis.call('HMGET', key, 't', 'm', 'r', 'u', 'i', 'v', 'w', 'x')
  if not v[1] then
    local ri, vh, vl, x = tb_moves(v)
    return false, 0, 0, 0, 0, 0, 0, ri, vh, vl, x
  end
  local th, tl, rem, su = tonumber(v[1]), tonumber(v[2]), tonumber(v[3]), tonumber(v[4])
  local r = rem
  if su ~= U and su > 0 then r = muldiv(rem, U, su) end
  -- debt = max(TAT*U + r - now*U, 0) in 1/U µs, as hh*1000 + hl
  local Dh, Dl = th - nh, tl - nl
  if Dl < 0 then Dl, Dh = Dl + 1000, Dh - 1 end
  local hh, hl = 0, 0
  if Dh >= 0 then
    local lo = Dl * U + r
    local carry = floor(lo / 1000)
    hh, hl = Dh * U + carry, lo - carry * 1000
  end
  local ri, vh, vl, x = tb_moves(v)
  return true, th, tl, rem, su, hh, hl, ri, vh, vl, x
end

-- tb_write sets TAT = now + debt/U (exactly, with the remainder).
local function tb_write(key, U, hh, hl)
  local q1 = floor(hh / U)
  local t = (hh - q1 * U) * 1000 + hl
  local q2 = floor(t / U)
  local th, tl = nh + q1, nl + q2
  if tl >= 1000 then th, tl = th + 1, tl - 1000 end
  redis.call('HSET', key, 't', str(th), 'm', str(tl), 'r', str(t - q2 * U), 'u', str(U))
  return q1
end

-- ---- fixed window: a hash {e = end ms, n = count} ----

-- fw_state returns the window holding now: its end (ms) and count. Windows
-- end on whole ms (multiples of a whole-ms window, or calendar boundaries),
-- so now >= end exactly when nh >= end.
local function fw_state(key, wms, bounds)
  local v = redis.call('HMGET', key, 'e', 'n')
  local e, c = tonumber(v[1]) or 0, tonumber(v[2]) or 0
  if c == 0 or nh >= e then
    c = 0
    if bounds == nil or bounds == '' then
      local r = fmod(nh, wms)
      if r < 0 then r = r + wms end
      e = nh - r + wms
    else
      local b0, b1, b2 = string.match(bounds, '^(%-?%d+) (%-?%d+) (%-?%d+)$')
      b0, b1, b2 = tonumber(b0), tonumber(b1), tonumber(b2)
      if nh < b0 then e = b0
      elseif nh < b1 then e = b1
      elseif nh < b2 then e = b2
      else return redis.error_reply('ringlimit: the server clock is more than a calendar window ahead of the caller') end
    end
  end
  return e, c
end

-- ---- the batch ----

local n = #KEYS
if op == 'r' then
  for i = 1, n do
    local key, j = KEYS[i], 1 + (i - 1) * 10
    local alg, U, wms, cost = tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2]), tonumber(ARGV[j + 3]), tonumber(ARGV[j + 4])
    if alg == 0 then
      local m = log_members(ARGV[j + 5], cost)
      for a = 1, #m, 500 do
        redis.call('ZREM', key, unpack(m, a, math.min(a + 499, #m)))
      end
    elseif alg == 3 then
      local v = redis.call('HMGET', key, 'e', 'n')
      local e, c = tonumber(v[1]), tonumber(v[2])
      -- a release finds its window only while it is the one counting
      if e and c and c > 0 and nh < e and e == tonumber(ARGV[j + 5]) then
        redis.call('HSET', key, 'n', str(math.max(c - cost, 0)))
      end
    elseif alg == 1 then
      local raw, s, c, p = win_state(key)
      if raw then
        s, c, p = win_advance(s, c, p, wms)
        local rs = tonumber(ARGV[j + 5])
        if rs == s then
          redis.call('HSET', key, 's', str(s), 'c', str(math.max(c - cost, 0)), 'p', str(p))
        elseif rs == s - wms then
          redis.call('HSET', key, 's', str(s), 'c', str(c), 'p', str(math.max(p - cost, 0)))
        end
      end
    else
      local found, th, tl, rem, _, hh, hl, ri, vh, vl, x = tb_state(key, U)
      -- after - now, as Ah ms + Al µs
      local Ah, Al = tonumber(ARGV[j + 5]) - nh, tonumber(ARGV[j + 6]) - nl
      if Al < 0 then Al, Ah = Al + 1000, Ah - 1 end
      -- less the moves since the receipt's stamp (limiter.BucketMoves):
      -- the same incarnation, those since it; another or none, all of
      -- them; a stamp ahead of the record gives nothing back
      if ri then
        local sh, sl = tonumber(ARGV[j + 8]) or 0, tonumber(ARGV[j + 9]) or 0
        local dh, dl = vh, vl
        if ri == ARGV[j + 7] then
          dh, dl = vh - sh, vl - sl
          if dl < 0 then dl, dh = dl + 1000, dh - 1 end
          if dh < 0 then found = false end
        end
        Ah, Al = Ah - dh, Al - dl
        if Al < 0 then Al, Ah = Al + 1000, Ah - 1 end
      end
      if found and Ah >= 0 and not (Ah == 0 and Al == 0) and not (hh == 0 and hl == 0) then
        -- back = min(cost*w, (after-now)*U), in 1/U µs
        local bh, bl = cost * wms, 0
        local lo = Al * U
        local carry = floor(lo / 1000)
        local lh, ll = Ah * U + carry, lo - carry * 1000
        if lh < bh or (lh == bh and ll < bl) then bh, bl = lh, ll end
        -- what comes back, d = min(back, debt), moves the later calls
        if hh < bh or (hh == bh and hl < bl) then bh, bl = hh, hl end
        hh, hl = hh - bh, hl - bl
        if hl < 0 then hh, hl = hh - 1, hl + 1000 end
        tb_write(key, U, hh, hl)
        if bh > 0 or bl > 0 then
          -- the record: d / U µs rounded up added to moved; Until at
          -- least the arrival time before (whole ms, rounded up)
          if not ri then ri, vh, vl, x = ARGV[j + 10], 0, 0, 0 end
          local q1 = floor(bh / U)
          local q2 = floor(((bh - q1 * U) * 1000 + bl + U - 1) / U)
          vh, vl = vh + q1, vl + q2
          if vl >= 1000 then vh, vl = vh + 1, vl - 1000 end
          local u = th
          if tl > 0 or rem > 0 then u = u + 1 end
          if u > x then x = u end
          -- The key already lives past x: past the arrival time before
          -- (a consume's PEXPIRE covers the arrival time it leaves, and
          -- releases only lower it) and past an earlier x (a consume's
          -- PEXPIRE covers a live record's Until too).
          redis.call('HSET', key, 'i', ri, 'v', str(vh), 'w', str(vl), 'x', str(x))
        end
      end
    end
  end
  return {1, nh, nl}
end

-- record counts one entry whose whole batch passed.
local function record(key, id, alg, U, wms, cost, a, b, c, e, f, g)
  if alg == 0 then
    log_record(key, wms, cost, id)
  elseif alg == 1 then
    redis.call('HSET', key, 's', str(a), 'c', str(b + cost), 'p', str(c))
    redis.call('PEXPIRE', key, 2 * wms - e + 1 + linger)
  elseif alg == 3 then
    redis.call('HSET', key, 'e', str(a), 'n', str(b + cost))
    redis.call('PEXPIRE', key, a - nh + linger)
  else
    local q1 = tb_write(key, U, e + cost * wms, f)
    -- a live moves record (Until g ms, else 0) keeps the key until then
    redis.call('PEXPIRE', key, math.max(q1 + 2, g - nh + 1) + linger)
  end
end

-- a debit records every entry whatever the verdict (package limiter
-- decides it from the state read, DecideDebit)
local debit = op == 'd' or op == 'q'
local rec = op == 'c' or op == 'd'
local out
if n == 1 then out = {1, nh, nl, 0, 0, 0, 0, 0} else out = {1, nh, nl} end
local keep = {}
local moves = {} -- the live moves records read: {i, incarnation, ms, µs}
local all = true
for i = 1, n do
  local key, j = KEYS[i], 1 + (i - 1) * 5
  local alg, U, wms, cost = tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2]), tonumber(ARGV[j + 3]), tonumber(ARGV[j + 4])
  local ok, a, b, c, d, e, f
  local g = 0 -- a token bucket's live moves record's Until (ms), 0: none
  if alg == 0 then
    ok, a, b, c, d = log_read(key, U, wms, cost, debit)
  elseif alg == 1 then
    ok, a, b, c, e = win_read(key, U, wms, cost)
    d = 0
  elseif alg == 3 then
    a, b = fw_state(key, wms, ARGV[j + 5])
    if type(a) == 'table' then return a end
    ok = cost <= U - b
    c, d = 0, 0
  else
    local found, hh, hl, ri, vh, vl, x
    found, a, b, c, d, hh, hl, ri, vh, vl, x = tb_state(key, U)
    local M = ((tonumber(ARGV[j + 5]) or U) - cost) * wms -- the burst, or U
    ok = hh < M or (hh == M and hl == 0)
    e, f = hh, hl
    if ri then
      moves[#moves + 1] = {i, ri, vh, vl}
      g = x
    end
  end
  if n == 1 then
    -- one entry (the common call): record at once, keeping nothing
    if rec and (ok or debit) then record(key, ARGV[j + 5], alg, U, wms, cost, a, b, c, e, f, g) end
  else
    keep[i] = {alg, U, wms, cost, a, b, c, e, f, g}
  end
  all = all and ok
  local o = 4 + (i - 1) * 5
  out[o] = ok and 1 or 0
  out[o + 1], out[o + 2], out[o + 3], out[o + 4] = a, b, c, d
end
if not all then out[1] = 0 end
if rec and (all or debit) and n > 1 then
  for i = 1, n do
    local k = keep[i]
    record(KEYS[i], ARGV[1 + (i - 1) * 5 + 5], k[1], k[2], k[3], k[4], k[5], k[6], k[7], k[8], k[9], k[10])
  end
end
if op == 'c' then
  for _, m in ipairs(moves) do
    local o = #out
    out[o + 1], out[o + 2], out[o + 3], out[o + 4] = m[1], m[2], m[3], m[4]
  end
end
return out
