-- ARGS: ["done" or "failed", [[eid, error]...]]. Delivered entries are
-- deleted; failed ones are visible again at once, their attempts counted, the error kept.
local done = ARGS[1] == 'done'
for _, e in ipairs(ARGS[2]) do
  local eid = e[1]
  local k = P .. ':ob:' .. eid
  redis.call('ZREM', P .. ':outbox:leased', eid)
  local h = redis.call('HMGET', k, 'kind', 'job_id')
  if h[1] then
    if done then
      redis.call('DEL', k)
      redis.call('ZREM', P .. ':outbox', eid)
      local count = P .. ':outbox:n:' .. h[1]
      if redis.call('HINCRBY', count, h[2], -1) <= 0 then redis.call('HDEL', count, h[2]) end
    else
      redis.call('HINCRBY', k, 'attempts', 1)
      redis.call('HSET', k, 'last_error', e[2])
      redis.call('ZADD', P .. ':outbox', eid, eid)
    end
  end
end
return finish(0)
