-- ARGS: [seconds_us, [[id, token]...]]. Never shortens a lease. Reply: the lost ids.
local add = tonumber(ARGS[1])
local lost = {}
for _, lease in ipairs(ARGS[2]) do
  local id, token = lease[1], lease[2]
  local k = jk(id)
  local h = redis.call('HMGET', k, 'state', 'token', 'expires')
  if h[1] == 'inflight' and h[2] == token then
    local until_us = math.max(num(h[3], 0), NOW + add)
    redis.call('HSET', k, 'expires', fmt(until_us))
    redis.call('ZADD', P .. ':inflight', fmt(until_us), id)
  else
    lost[#lost + 1] = id
  end
end
return finish(lost)
