-- ARGS: [op, ids, arg]: an operator's bulk edit (Backend.delete_jobs, move_jobs,
-- set_priority). op "delete": jobs not running (inflight, waiting_children) are deleted with
-- their indexes, flow keys and history; "move": pending, blocked and failed jobs go to queue
-- `arg` in their state (a waiting job whose dedupe key a live job holds there stays);
-- "priority": they get priority `arg`. Each job is audited. Reply: how many changed.
local op, ids, arg = ARGS[1], ARGS[2], ARGS[3]
local EDITABLE = {pending = true, blocked = true, failed = true}

-- The index entries of a job in state `s` of queue `q`, out (terminal ones too).
local function unindex_any(id, q, s, avail)
  if s == 'done' or s == 'cancelled' then
    redis.call('ZREM', qk(q, s), id)
  elseif s == 'failed' then
    redis.call('ZREM', qk(q, 'failed'), id)
    redis.call('ZREM', qk(q, 'dlq'), id)
  else
    unindex(id, q, s, avail)
    redis.call('SREM', qk(q, 'nohandler'), id)
  end
end

local function delete(id, h)
  local q, s = h[2], h[1]
  if s == 'inflight' or s == 'waiting_children' then return false end
  unindex_any(id, q, s, h[3])
  if h[4] and redis.call('HGET', qk(q, 'dedupe'), h[4]) == id then
    redis.call('HDEL', qk(q, 'dedupe'), h[4])
  end
  if h[5] then redis.call('SREM', P .. ':flow:' .. h[5], id) end
  if h[6] then redis.call('ZREM', P .. ':about:' .. h[6], id) end
  for _, dep in ipairs(redis.call('SMEMBERS', P .. ':deps:' .. id)) do
    redis.call('SREM', P .. ':dependants:' .. dep, id)
  end
  redis.call('DEL', jk(id), P .. ':deps:' .. id, P .. ':att:' .. id)
  emit(A.DELETE, id, q, nil, {state = s})
  return true
end

local function move(id, h, to)
  local q, s, key = h[2], h[1], h[4]
  if not EDITABLE[s] or q == to then return false end
  if key and s ~= 'failed' then
    local holder = redis.call('HGET', qk(to, 'dedupe'), key)
    if holder and holder ~= id and active(holder) then return false end
  end
  unindex_any(id, q, s, h[3])
  if key and redis.call('HGET', qk(q, 'dedupe'), key) == id then
    redis.call('HDEL', qk(q, 'dedupe'), key)
    redis.call('HSET', qk(to, 'dedupe'), key, id)
  end
  redis.call('HSET', jk(id), 'queue', to, 'updated', fmt(NOW))
  redis.call('SADD', P .. ':queues', to)
  if s == 'pending' then
    index_pending(id, to, num(h[7], 0), num(h[3], NOW))
  elseif s == 'blocked' then
    redis.call('SADD', qk(to, 'blocked'), id)
  else
    redis.call('ZADD', qk(to, 'failed'), num(h[8], NOW), id)
    redis.call('ZADD', qk(to, 'dlq'), 0, id)
  end
  emit(A.MOVE, id, to, nil, {from = q, to = to})
  return true
end

local function reprioritize(id, h, prio)
  local q, s = h[2], h[1]
  local old = num(h[7], 0)
  if not EDITABLE[s] or old == prio then return false end
  if s == 'pending' then unindex(id, q, s, h[3]) end
  redis.call('HSET', jk(id), 'priority', fmt(prio), 'updated', fmt(NOW))
  if s == 'pending' then index_pending(id, q, prio, num(h[3], NOW)) end
  emit(A.PRIORITY, id, q, nil, {from = old, to = prio})
  return true
end

local n = 0
for _, id in ipairs(ids) do
  local h = redis.call('HMGET', jk(id), 'state', 'queue', 'avail', 'dedupe_key', 'flow_id',
                       'about', 'priority', 'finished')
  if h[1] then
    local changed
    if op == 'delete' then
      changed = delete(id, h)
    elseif op == 'move' then
      changed = move(id, h, arg)
    else
      changed = reprioritize(id, h, tonumber(arg))
    end
    if changed then n = n + 1 end
  end
end
return finish(n)
