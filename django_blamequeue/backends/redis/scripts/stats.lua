-- ARGS: nothing. Per queue: {queue, pending, blocked, inflight, waiting_children, done,
-- failed, cancelled, oldest available_at of a pending job or "", done and failed within the
-- last hour, delayed (pending, not due yet), the first delayed one's available_at or "",
-- jobs expired within the last hour}.
-- Read-only.
local hour = fmt(NOW - 3600000000)
local out = {}
for _, q in ipairs(redis.call('SMEMBERS', P .. ':queues')) do
  local ready = qk(q, 'ready')
  -- The oldest ready job is the first of its priority: look at each priority's first member.
  local oldest = false
  local first = redis.call('ZRANGE', ready, 0, 0, 'WITHSCORES')
  local groups = 0
  while #first > 0 and groups < 100 do
    local avail = tonumber(string.sub(first[1], 1, 16))
    if not oldest or avail < oldest then oldest = avail end
    first = redis.call('ZRANGE', ready, '(' .. first[2], '+inf', 'BYSCORE', 'LIMIT', 0, 1,
                       'WITHSCORES')
    groups = groups + 1
  end
  local later = redis.call('ZRANGE', qk(q, 'delayed'), '(' .. fmt(NOW), '+inf', 'BYSCORE',
                          'LIMIT', 0, 1, 'WITHSCORES')
  local due = redis.call('ZRANGE', qk(q, 'delayed'), 0, 0, 'WITHSCORES')
  if #due > 0 and (not oldest or tonumber(due[2]) < oldest) then oldest = tonumber(due[2]) end
  out[#out + 1] = {
    q,
    redis.call('ZCARD', ready) + redis.call('ZCARD', qk(q, 'delayed')),
    redis.call('SCARD', qk(q, 'blocked')),
    num(redis.call('HGET', P .. ':leased', q), 0),
    redis.call('SCARD', qk(q, 'waiting')),
    redis.call('ZCARD', qk(q, 'done')),
    redis.call('ZCARD', qk(q, 'failed')),
    redis.call('ZCARD', qk(q, 'cancelled')),
    oldest and fmt(oldest) or '',
    redis.call('ZCOUNT', qk(q, 'done'), hour, '+inf'),
    redis.call('ZCOUNT', qk(q, 'failed'), hour, '+inf'),
    redis.call('ZCOUNT', qk(q, 'delayed'), '(' .. fmt(NOW), '+inf'),
    later[2] or '',
    redis.call('ZCOUNT', qk(q, 'expired'), hour, '+inf'),
  }
end
return finish(out)
