-- ARGS: [id, token]. rule: rescue — mark the held lease as running alone in its worker (on probation,
-- core.lifecycle.on_probation); rescue.lua counts a stall of that lease against the job.
local id, token = ARGS[1], ARGS[2]
local k = jk(id)
local h = redis.call('HMGET', k, 'state', 'token')
if h[1] ~= 'inflight' or h[2] ~= token then return finish(0) end
redis.call('HSET', k, 'alone', token)
return finish(1)
