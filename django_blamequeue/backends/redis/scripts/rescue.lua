-- ARGS: [limit, max_stalled]. Leases that expired before now go back to pending (stalls + 1),
-- or fail as stalled past max_stalled or on their last attempt; a job asked to cancel whose
-- worker died is cancelled. Reply: {repended, failed, cancelled}.
local limit, max_stalled = ARGS[1], ARGS[2]
local MSG = STALLED_MESSAGE  -- rule: rescue (core.lifecycle.rescue)
local ids = redis.call('ZRANGEBYSCORE', P .. ':inflight', '-inf', '(' .. fmt(NOW), 'LIMIT', 0,
                       limit)
local counts = {pending = 0, failed = 0, cancelled = 0}
for _, id in ipairs(ids) do
  local k = jk(id)
  local h = redis.call('HMGET', k, 'state', 'attempts', 'max_attempts', 'stalls', 'cancel_req',
                       'queue', 'priority')
  if h[1] ~= 'inflight' then
    redis.call('ZREM', P .. ':inflight', id)  -- a stale index entry
  else
    local attempts, stalls = tonumber(h[2]), tonumber(h[4]) + 1
    local to
    if h[5] == '1' then
      to = 'cancelled'
    elseif stalls > max_stalled or attempts >= tonumber(h[3]) then
      to = 'failed'
    else
      to = 'pending'
    end
    local q = h[6]
    unindex(id, q, 'inflight')
    redis.call('HSET', k, 'stalls', fmt(stalls), 'updated', fmt(NOW))
    if to == 'pending' then
      redis.call('HSET', k, 'error', MSG, 'reason', 'stalled')
      redis.call('HDEL', k, 'finished')
      make_pending(id, q, num(h[7], 0), NOW)
    elseif to == 'failed' then
      redis.call('HSET', k, 'error', MSG, 'reason', 'stalled')
      terminal(id, q, 'failed')
    else
      redis.call('HSET', k, 'reason', 'cancelled')
      terminal(id, q, 'cancelled')
      cascade_cancel({id})
    end
    counts[to] = counts[to] + 1
    emit(A.STALLED, id, q, attempts, {to = to, stalls = stalls})
    if to == 'failed' then
      emit(A.DLQ_WRITE, id, q, attempts, {reason = 'stalled', error = MSG})
    end
  end
end
return finish({counts.pending, counts.failed, counts.cancelled})
