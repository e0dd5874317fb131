-- leasing.lua: claim and ack, shared by claim.lua, ack.lua and ack_claim.lua.

-- Due delayed and retrying jobs join the ready set (at most n per queue and claim).
local function promote(q, n)
  local due = redis.call('ZRANGEBYSCORE', qk(q, 'delayed'), '-inf', fmt(NOW), 'LIMIT', 0, n)
  for _, id in ipairs(due) do
    redis.call('ZREM', qk(q, 'delayed'), id)
    local h = redis.call('HMGET', jk(id), 'state', 'priority', 'avail')
    if h[1] == 'pending' then make_pending(id, q, num(h[2], 0), num(h[3], NOW)) end
  end
end

local CLAIMED = {'id', 'queue', 'name', 'payload', 'ctype', 'cenc', 'token', 'attempts',
                 'max_attempts', 'expires', 'priority', 'timeout', 'trace_id', 'classification',
                 'flow_id', 'parent_id', 'avail', 'created', 'flow_phase', 'flow_mode',
                 'flow_depth'}

-- Lease up to `limit` jobs over `queues`: priority desc, then available_at, then id, across
-- the queues. tokens[i] is the lease token of the i-th job leased.
local function claim(queues, limit, lease_us, tokens)
  local candidates = {}
  for _, q in ipairs(queues) do
    promote(q, 1000)
    -- A ready job is due unless it was made ready by a caller whose `now` ran ahead.
    local items = redis.call('ZRANGE', qk(q, 'ready'), 0, 2 * limit + 8, 'WITHSCORES')
    local got = 0
    for j = 1, #items, 2 do
      if got >= limit then break end
      if tonumber(string.sub(items[j], 1, 16)) <= NOW then
        candidates[#candidates + 1] = {tonumber(items[j + 1]), items[j], q}
        got = got + 1
      end
    end
  end
  table.sort(candidates, function(x, y)
    if x[1] ~= y[1] then return x[1] < y[1] end
    return x[2] < y[2]
  end)
  local out = {}
  local expires = fmt(NOW + lease_us)
  for j = 1, math.min(limit, #candidates) do
    local c = candidates[j]
    local id = string.sub(c[2], 17)
    local k = jk(id)
    redis.call('ZREM', qk(c[3], 'ready'), c[2])
    redis.call('HINCRBY', k, 'attempts', 1)
    redis.call('HSET', k, 'state', 'inflight', 'token', tokens[j], 'expires', expires,
               'started', fmt(NOW), 'updated', fmt(NOW))
    redis.call('HDEL', k, 'rm')
    redis.call('ZADD', P .. ':inflight', expires, id)
    redis.call('SADD', qk(c[3], 'inflight'), id)
    out[#out + 1] = redis.call('HMGET', k, unpack(CLAIMED))
  end
  return out
end

-- One ack: 11 arguments at a[i] (codec.ack_args), then per child of a fan-out 3 + JOB_ARGS
-- (key, backend, the spec as JSON, the child's job). Returns the reply row and the next index:
-- {id, ok, state, queue, attempts, name, fanned}.
local ACK_ARGS = 11
local CHILD_ARGS = 3 + JOB_ARGS

local function fan_out(id, k, h, a, i, n)
  local q = h[4]
  if h[3] == '1' then  -- a cancel request wins: nothing is stored
    redis.call('HSET', k, 'reason', 'cancelled')
    terminal(id, q, 'cancelled')
    return {id, 1, 'cancelled', q, h[5], h[6], 1}
  end
  redis.call('HSET', k, 'state', 'waiting_children', 'flow_phase', 'collect')
  redis.call('SADD', qk(q, 'waiting'), id)
  redis.call('ZADD', P .. ':waiting', 0, id)
  local m = mk(id)
  local added = 0
  local j = i + ACK_ARGS
  for _ = 1, n do
    local key, backend, spec, child = a[j], a[j + 1], a[j + 2], a[j + 3]
    if redis.call('HSETNX', m, 's:' .. child, 'pending') == 1 then
      redis.call('HSET', m, 'k:' .. child, key, 'b:' .. child, backend, 'j:' .. child, spec)
      added = added + 1
    end
    if backend == ALIAS then
      insert_job(a, j + 3)
    else
      outbox_add('enqueue', backend, child, {'body', spec})
    end
    j = j + CHILD_ARGS
  end
  redis.call('HINCRBY', k, 'kp', added)
  emit('system.queue.flow.fan_out', id, q, tonumber(h[5]), {children = n})
  if n == 0 then settle(id) end
  return {id, 1, 'waiting_children', q, h[5], h[6], 1}
end

local function apply_ack(a, i)
  local id, token, wanted = a[i], a[i + 1], a[i + 2]
  local n = tonumber(a[i + 10])
  local nexti = i + ACK_ARGS + n * CHILD_ARGS
  local k = jk(id)
  local h = redis.call('HMGET', k, 'state', 'token', 'cancel_req', 'queue', 'attempts', 'name',
                       'priority', 'flow_id')
  if h[1] ~= 'inflight' or h[2] ~= token then return {id, 0}, nexti end
  local q = h[4]
  unindex(id, q, 'inflight')
  redis.call('HDEL', k, 'token', 'expires')
  redis.call('HSET', k, 'updated', fmt(NOW))
  if wanted == 'waiting_children' then return fan_out(id, k, h, a, i, n), nexti end
  local result, err, tb, reason = opt(a[i + 3]), opt(a[i + 4]), opt(a[i + 5]), opt(a[i + 6])
  local wins = a[i + 9] == '1' and h[3] == '1'  -- a pending cancel request wins
  local state = wins and 'cancelled' or wanted
  local attempts = tonumber(h[5])
  local f = {'HSET', k}
  if a[i + 8] == '1' then  -- graceful release: the attempt is given back
    attempts = attempts - 1
    f[#f + 1] = 'attempts'; f[#f + 1] = fmt(attempts)
  end
  if wanted == 'done' then
    if result then f[#f + 1] = 'result'; f[#f + 1] = result
    else redis.call('HDEL', k, 'result') end
    f[#f + 1] = 'progress'; f[#f + 1] = '100'
  end
  if err then
    f[#f + 1] = 'error'; f[#f + 1] = err
    if tb then f[#f + 1] = 'traceback'; f[#f + 1] = tb
    else redis.call('HDEL', k, 'traceback') end
  end
  if wins then reason = 'cancelled' end
  if reason then f[#f + 1] = 'reason'; f[#f + 1] = reason end
  if #f > 2 then redis.call(unpack(f)) end
  if state == 'pending' then
    redis.call('HDEL', k, 'finished')
    make_pending(id, q, num(h[7], 0), NOW + tonumber(a[i + 7]))
  else
    terminal(id, q, state)
    if state == 'done' and h[8] then release_dependants(id) end
    if state == 'cancelled' then cascade_cancel({id}) end
  end
  return {id, 1, state, q, fmt(attempts), h[6], 0}, nexti
end

local function apply_acks(a, i)
  local count = tonumber(a[i])
  i = i + 1
  local out = {}
  for _ = 1, count do
    local row
    row, i = apply_ack(a, i)
    out[#out + 1] = row
  end
  return out, i
end

local function claim_args(a, i)
  local nq = tonumber(a[i])
  local queues = {}
  for j = 1, nq do queues[j] = a[i + j] end
  local limit, lease_us = tonumber(a[i + nq + 1]), tonumber(a[i + nq + 2])
  local tokens = {}
  for j = 1, limit do tokens[j] = a[i + nq + 2 + j] end
  return queues, limit, lease_us, tokens
end
