-- ARGS: [id]. Reply: {found, cancelled, requested, state}.
local id = ARGS[1]
local k = jk(id)
local h = redis.call('HMGET', k, 'state', 'queue', 'cancel_req', 'avail')
local state, q = h[1], h[2]
if not state then return finish({0, 0, 0, ''}) end
if terminal_state(state) then return finish({1, 0, 0, state}) end
if state == 'inflight' then
  if h[3] ~= '1' then
    redis.call('HSET', k, 'cancel_req', '1', 'updated', fmt(NOW))
    emit(A.CANCEL_REQUESTED, id, q, nil, nil)
  end
  return finish({1, 0, 1, state})
end
unindex(id, q, state, h[4])
redis.call('HSET', k, 'reason', 'cancelled')
terminal(id, q, 'cancelled')
emit(A.CANCEL, id, q, nil, nil)
cascade_children(id)
return finish({1, 1, 0, 'cancelled'})
