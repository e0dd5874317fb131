-- ARGS: [[id, token, checkpoint JSON text], ...]: store each value on its job's hash, fenced
-- by the token like every write of an attempt (rule: fence). The claim hands the field to the
-- next attempt (leasing.lua: CLAIMED); no other step touches it.
-- Reply: {refused ids, stored: {id, queue, attempts, bytes} per stored value}.
local refused, stored = {}, {}
for _, c in ipairs(ARGS) do
  local id, token, text = c[1], c[2], c[3]
  local k = jk(id)
  local h = redis.call('HMGET', k, 'state', 'token', 'queue', 'attempts')
  if h[1] ~= 'inflight' or h[2] ~= token then
    refused[#refused + 1] = id
  else
    redis.call('HSET', k, 'checkpoint', text)
    if HV then emit(A.CHECKPOINT, id, h[3], tonumber(h[4]), {bytes = #text}) end
  end
end
return finish(refused)
