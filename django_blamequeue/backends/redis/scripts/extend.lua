-- ARGS: [id, token, seconds_us]. The expiry becomes now + seconds (never shorter).
local id, token, add = ARGS[1], ARGS[2], tonumber(ARGS[3])
local k = jk(id)
local h = redis.call('HMGET', k, 'state', 'token', 'expires')
if h[1] ~= 'inflight' or h[2] ~= token then return finish(0) end
local until_us = math.max(num(h[3], 0), NOW + add)
redis.call('HSET', k, 'expires', fmt(until_us), 'updated', fmt(NOW))
redis.call('ZADD', P .. ':inflight', fmt(until_us), id)
return finish(1)
