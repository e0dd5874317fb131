-- ARGS: [queues or false]. Pending jobs a worker handed back for lack of a handler
-- (P:q:Q:nohandler, written by the ack), by queue and name; ids that moved on are dropped
-- from the set. Reply: {queue, name, count} per name.
local queues = ARGS[1] or redis.call('SMEMBERS', P .. ':queues')
local out = {}
for _, q in ipairs(queues) do
  local set = qk(q, 'nohandler')
  local by_name = {}
  for _, id in ipairs(redis.call('SMEMBERS', set)) do
    local h = redis.call('HMGET', jk(id), 'state', 'reason', 'name')
    if h[1] == 'pending' and h[2] == NO_HANDLER then
      by_name[h[3]] = (by_name[h[3]] or 0) + 1
    else
      redis.call('SREM', set, id)
    end
  end
  for name, n in pairs(by_name) do out[#out + 1] = {q, name, n} end
end
return finish(out)
