-- ARGS: [op, queue, ...]: ["pause", q, reason, by], ["resume", q], ["limits", q, limits or false]
-- with limits [c, kc, rm, rp, krm, krp, names, kw] (false for none; kw: the key weights,
-- [[glob, weight, Lua pattern], ...], stored as JSON). Changes the queue's control hash
-- (limits.lua), bumps its version and tells listening workers (P:ctlwake); a resume also wakes
-- idle ones. Reply: the hash after the change, as a flat list.
local op, q = ARGS[1], ARGS[2]
local key = qk(q, 'ctl')
local FIELDS = {'c', 'kc', 'rm', 'rp', 'krm', 'krp'}
if op == 'pause' then
  redis.call('HSET', key, 'paused', '1', 'reason', ARGS[3] or '', 'at', fmt(NOW))
  if ARGS[4] then redis.call('HSET', key, 'by', ARGS[4]) else redis.call('HDEL', key, 'by') end
elseif op == 'resume' then
  redis.call('HSET', key, 'paused', '0')
  redis.call('HDEL', key, 'reason', 'at', 'by')
  WAKE[q] = true
else
  local limits = ARGS[3]
  redis.call('HDEL', key, 'ov', 'kw', unpack(FIELDS))
  if limits then
    redis.call('HSET', key, 'ov', '1')
    for i, field in ipairs(FIELDS) do
      if limits[i] then redis.call('HSET', key, field, tostring(limits[i])) end
    end
    if limits[8] then redis.call('HSET', key, 'kw', cjson.encode(limits[8])) end
  end
end
redis.call('HINCRBY', key, 'v', 1)
redis.call('SADD', P .. ':ctls', q)
redis.call('PUBLISH', P .. ':ctlwake', q)
return finish(redis.call('HGETALL', key))
