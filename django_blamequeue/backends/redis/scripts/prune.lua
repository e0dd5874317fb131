-- ARGS: [done_before, cancelled_before, failed_before, limit]: times in microseconds as
-- strings, false keeps that state. Deletes old terminal jobs with their flow keys. Reply: how many.
local limit = ARGS[4]
local n = 0
local function forget(id, q)
  local k = jk(id)
  local h = redis.call('HMGET', k, 'flow_id', 'dedupe_key', 'about', 'ukey')
  if h[1] then redis.call('SREM', P .. ':flow:' .. h[1], id) end
  if h[4] and redis.call('HGET', P .. ':uniq', h[4]) == id then
    redis.call('HDEL', P .. ':uniq', h[4])
  end
  if h[3] then redis.call('ZREM', P .. ':about:' .. h[3], id) end
  if h[2] and redis.call('HGET', qk(q, 'dedupe'), h[2]) == id then
    redis.call('HDEL', qk(q, 'dedupe'), h[2])
  end
  redis.call('ZREM', P .. ':waiting', id)
  redis.call('DEL', k, mk(id), P .. ':deps:' .. id, P .. ':dependants:' .. id, P .. ':att:' .. id)
  redis.call('SREM', P .. ':cascade', id)
end
local states = {{'done', ARGS[1]}, {'cancelled', ARGS[2]}, {'failed', ARGS[3]}}
for _, q in ipairs(redis.call('SMEMBERS', P .. ':queues')) do
  for _, s in ipairs(states) do
    if s[2] and n < limit then
      local key = qk(q, s[1])
      local ids = redis.call('ZRANGEBYSCORE', key, '-inf', '(' .. s[2], 'LIMIT', 0, limit - n)
      for _, id in ipairs(ids) do
        forget(id, q)
        redis.call('ZREM', key, id)
        if s[1] == 'failed' then redis.call('ZREM', qk(q, 'dlq'), id) end
        if s[1] == 'cancelled' then redis.call('ZREM', qk(q, 'expired'), id) end
      end
      n = n + #ids
    end
  end
end
return finish(n)
