-- ARGS: [limit]. Waiting jobs whose expiry passed (P:expiring, scored by it) end cancelled,
-- reason expired (rule: expiry); a claim cancels the ready ones it meets first. Entries of
-- jobs no longer waiting are dropped. Reply: the ids expired.
local due = redis.call('ZRANGEBYSCORE', P .. ':expiring', '-inf', fmt(NOW), 'LIMIT', 0, ARGS[1])
local out = {}
for _, id in ipairs(due) do
  redis.call('ZREM', P .. ':expiring', id)
  local h = redis.call('HMGET', jk(id), 'state', 'queue', 'avail', 'exp')
  if h[1] == 'pending' or h[1] == 'blocked' then
    expire_job(id, h[2], h[1], h[3], h[4])
    out[#out + 1] = id
  end
end
return finish(out)
