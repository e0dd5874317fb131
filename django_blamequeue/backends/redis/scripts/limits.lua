-- limits.lua: a claim's view of a queue's control state (pause, limits), included by the claim
-- scripts before leasing.lua. Keys of a queue Q (P:q:Q:...):
--   ctl        hash: paused 1/0, reason, at, by; ov 1 when live limits are set, then c, kc,
--              rm, rp, krm, krp (counts; rp, krp in seconds), kw (key weights, JSON
--              [[glob, weight, Lua pattern], ...]); v (version)
--   kin        hash: concurrency key -> jobs of that key in flight (moved at claim / unindex)
--   rate       zset: lease token -> start time, the queue's rate window
--   krate:KEY  zset: the same per key
--   kr:KEY, keyring: ready jobs by key, keys by last service (lib.lua)
-- P:leased (queue -> jobs in flight) is the queue's own count. P:nrate:NAME (zset: lease token
-- -> start time) is a job name's rate window, shared by every queue (@job(rate_limit=...)).

local PAUSED = {}
-- Job names' windows as this claim sees them, over all its queues (a name's window is
-- shared): starts counted at first look, and the jobs this claim picked per name.
local NSTARTS, NTAKEN = {}, {}

local function us(seconds) return math.floor(tonumber(seconds) * 1000000 + 0.5) end

-- The limits a claim obeys for queue q: its live limits, else the settings' defaults the
-- worker passed ([c, kc, rm, rp, krm, krp, names], false for none; names: [[name, max,
-- per], ...], the job names' rate limits, which hold either way); PAUSED; nil when unlimited.
-- rule: paused (core.rules.claims_from)
local function gate_of(q, defaults)
  local h = redis.call('HMGET', qk(q, 'ctl'), 'paused', 'ov', 'c', 'kc', 'rm', 'rp', 'krm', 'krp',
                      'kw')
  if h[1] == '1' then return PAUSED end
  local v
  if h[2] == '1' then
    v = {h[3], h[4], h[5], h[6], h[7], h[8], false, h[9] and cjson.decode(h[9]) or false}
  elseif defaults then
    v = defaults
  else
    return nil
  end
  local g = {c = num(v[1], nil), kc = num(v[2], nil), rm = num(v[3], nil), krm = num(v[5], nil)}
  if g.rm then g.rp = us(v[4]) end
  if g.krm then g.krp = us(v[6]) end
  if defaults and defaults[7] and #defaults[7] > 0 then
    g.nr = {}
    for _, n in ipairs(defaults[7]) do g.nr[n[1]] = {tonumber(n[2]), us(n[3])} end
  end
  if v[8] and #v[8] > 0 then g.kw = v[8] end
  if not (g.c or g.kc or g.rm or g.krm or g.nr or g.kw) then return nil end
  g.inflight = num(redis.call('HGET', P .. ':leased', q), 0) + (LEASED[q] or 0)
  if g.rm then
    redis.call('ZREMRANGEBYSCORE', qk(q, 'rate'), '-inf', fmt(NOW - g.rp))
    g.starts = redis.call('ZCARD', qk(q, 'rate'))
  else
    g.starts = 0
  end
  g.kin, g.kstarts = {}, {}
  return g
end

-- How many more jobs of key `key` may start now (math.huge: no per-key limit).
local function key_room(q, g, key, mine)
  local left = math.huge
  if g.kc then
    if g.kin[key] == nil then g.kin[key] = num(redis.call('HGET', qk(q, 'kin'), key), 0) end
    left = math.min(left, g.kc - g.kin[key] - mine)
  end
  if g.krm then
    if g.kstarts[key] == nil then
      local w = qk(q, 'krate:' .. key)
      redis.call('ZREMRANGEBYSCORE', w, '-inf', fmt(NOW - g.krp))
      g.kstarts[key] = redis.call('ZCARD', w)
    end
    left = math.min(left, g.krm - g.kstarts[key] - mine)
  end
  return left
end

-- How many more jobs of job name `name` may start now (math.huge: its name is not limited),
-- this claim's picks of it counted.
local function name_room(g, name)
  local rate = g.nr and name and g.nr[name]
  if not rate then return math.huge end
  if NSTARTS[name] == nil then
    local w = P .. ':nrate:' .. name
    redis.call('ZREMRANGEBYSCORE', w, '-inf', fmt(NOW - rate[2]))
    NSTARTS[name] = redis.call('ZCARD', w)
  end
  return rate[1] - NSTARTS[name] - (NTAKEN[name] or 0)
end

-- A key's share weight: the first pattern of g.kw it matches, else 1 (and 1 for no key).
local function weight_of(g, key)
  if key ~= '' then
    for _, kw in ipairs(g.kw) do
      if string.find(key, kw[3]) then return tonumber(kw[2]) end
    end
  end
  return 1
end

-- rule: shares (core.limits.by_share) — the window's jobs and the first `room` jobs of up to
-- SHARE_KEYS waiting keys (served least recently first) compete; each next one tried is of
-- the key with the fewest jobs in flight per unit of weight, the ones taken counted; ties go
-- to the heavier key, then the key seen first. Jobs without a key are one weight-1 key ('').
local function by_share(q, g, room, items, try, taken, full)
  local heads, order, seen = {}, {}, {}
  local function add(key, m, score)
    if seen[m] then return end
    seen[m] = true
    if not heads[key] then
      heads[key] = {i = 1}
      order[#order + 1] = key
    end
    local list = heads[key]
    list[#list + 1] = {m, score}
  end
  for j = 1, #items, 2 do
    local key = redis.call('HGET', jk(string.sub(items[j], 17)), 'ckey') or ''
    add(key, items[j], items[j + 1])
  end
  for _, key in ipairs(redis.call('ZRANGE', qk(q, 'keyring'), 0, SHARE_KEYS - 1)) do
    local got = redis.call('ZRANGE', qk(q, 'kr:' .. key), 0, math.min(room, g.kc or room) - 1,
                           'WITHSCORES')
    for j = 1, #got, 2 do add(key, got[j], got[j + 1]) end
  end
  local load, weight = {}, {}
  for _, key in ipairs(order) do
    weight[key] = weight_of(g, key)
    if key ~= '' then load[key] = num(redis.call('HGET', qk(q, 'kin'), key), 0) end
  end
  if heads[''] then
    local all = 0
    for _, n in ipairs(redis.call('HVALS', qk(q, 'kin'))) do all = all + tonumber(n) end
    load[''] = math.max(g.inflight - all, 0)
  end
  while taken() < room do
    local best, bkey
    for _, key in ipairs(order) do  -- in order seen: a tie keeps the first
      local list = heads[key]
      if list.i <= #list and not full[key] then
        local pass = load[key] / weight[key]
        if not best or pass < best[1] or (pass == best[1] and weight[key] > best[2]) then
          best, bkey = {pass, weight[key]}, key
        end
      end
    end
    if not bkey then return end
    local list = heads[bkey]
    local before = taken()
    try(list[list.i][1], list[list.i][2])
    list.i = list.i + 1
    if taken() > before then load[bkey] = load[bkey] + 1 end
  end
end

-- rule: limits (core.limits.claimable) — at most `room` jobs; a job whose key or job name is
-- full is skipped, never a reason to stop. Candidates go to `out` as the claim's other
-- candidates do.
local function limited_candidates(q, limit, g, out)
  local room = limit
  if g.c then room = math.min(room, g.c - g.inflight) end
  if g.rm then room = math.min(room, g.rm - g.starts) end
  if room <= 0 then return end
  local keyed = g.kc or g.krm or g.kw
  local taken, per_key, full, picked = 0, {}, {}, {}
  local function try(m, score)
    if taken >= room or picked[m] or tonumber(string.sub(m, 1, 16)) > NOW then return end
    local h = redis.call('HMGET', jk(string.sub(m, 17)), 'ckey', 'name')
    local key, name = h[1], h[2]
    if g.nr and name_room(g, name) <= 0 then return end
    if key and keyed then
      local mine = per_key[key] or 0
      if key_room(q, g, key, mine) <= 0 then
        full[key] = true
        return
      end
      per_key[key] = mine + 1
    end
    if g.nr and name and g.nr[name] then NTAKEN[name] = (NTAKEN[name] or 0) + 1 end
    out[#out + 1] = {tonumber(score), m, q}
    picked[m] = true
    taken = taken + 1
  end
  local scan = (keyed or g.nr) and 4 * room + 64 or room + 8
  local items = redis.call('ZRANGE', qk(q, 'ready'), 0, scan - 1, 'WITHSCORES')
  if g.kw then return by_share(q, g, room, items, try, function() return taken end, full) end
  for j = 1, #items, 2 do
    if taken >= room then return end
    try(items[j], items[j + 1])
  end
  if not keyed or taken >= room or #items < 2 * scan then return end
  -- The window was full keys: the keys served least recently, each one's first jobs.
  local ring = qk(q, 'keyring')
  for _, key in ipairs(redis.call('ZRANGE', ring, 0, 4 * room + 64)) do
    if taken >= room then return end
    if not full[key] then
      local n = math.min(room - taken, key_room(q, g, key, per_key[key] or 0))
      if n > 0 then
        local heads = redis.call('ZRANGE', qk(q, 'kr:' .. key), 0, n - 1, 'WITHSCORES')
        for j = 1, #heads, 2 do try(heads[j], heads[j + 1]) end
      end
    end
  end
end

-- A claimed job of a limited queue: its start in the windows, its key served last.
local function count_start(q, g, key, token, name)
  local rate = g.nr and name and g.nr[name]
  if rate then
    local w = P .. ':nrate:' .. name
    redis.call('ZADD', w, NOW, token)
    redis.call('PEXPIRE', w, math.ceil(rate[2] / 1000) + 1000)
  end
  if g.rm then
    redis.call('ZADD', qk(q, 'rate'), NOW, token)
    redis.call('PEXPIRE', qk(q, 'rate'), math.ceil(g.rp / 1000) + 1000)
  end
  if key then
    if g.krm then
      local w = qk(q, 'krate:' .. key)
      redis.call('ZADD', w, NOW, token)
      redis.call('PEXPIRE', w, math.ceil(g.krp / 1000) + 1000)
    end
    if redis.call('ZSCORE', qk(q, 'keyring'), key) then
      redis.call('ZADD', qk(q, 'keyring'), redis.call('INCR', qk(q, 'kseq')), key)
    end
  end
end
