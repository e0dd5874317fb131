-- ARGS: [id, token, progress 0-100], fenced by the token like every write of an attempt.
local id, token = ARGS[1], ARGS[2]
local k = jk(id)
local h = redis.call('HMGET', k, 'state', 'token')
if h[1] ~= 'inflight' or h[2] ~= token then return finish(0) end
redis.call('HSET', k, 'progress', fmt(ARGS[3]), 'updated', fmt(NOW))
return finish(1)
