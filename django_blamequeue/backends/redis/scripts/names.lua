-- ARGS: [cap]. Jobs waiting to run (pending, delayed included, and blocked) by queue and name,
-- looking at up to `cap` jobs per queue (a deploy check, not a hot path). Read-only.
-- Reply: {queue, name, count} per name, and per queue whose jobs were not all read
-- {queue, "", jobs left unread}.
local cap = ARGS[1]
local out = {}
for _, q in ipairs(redis.call('SMEMBERS', P .. ':queues')) do
  local by_name, seen, total = {}, 0, 0
  local function count(id)
    if seen >= cap then return end
    seen = seen + 1
    local name = redis.call('HGET', jk(id), 'name')
    if name then by_name[name] = (by_name[name] or 0) + 1 end
  end
  for _, m in ipairs(redis.call('ZRANGE', qk(q, 'ready'), 0, cap - 1)) do count(string.sub(m, 17)) end
  for _, id in ipairs(redis.call('ZRANGE', qk(q, 'delayed'), 0, cap - 1)) do count(id) end
  for _, id in ipairs(redis.call('SRANDMEMBER', qk(q, 'blocked'), cap)) do count(id) end
  total = redis.call('ZCARD', qk(q, 'ready')) + redis.call('ZCARD', qk(q, 'delayed'))
          + redis.call('SCARD', qk(q, 'blocked'))
  for name, n in pairs(by_name) do out[#out + 1] = {q, name, n} end
  if total > seen then out[#out + 1] = {q, '', total - seen} end
end
return finish(out)
