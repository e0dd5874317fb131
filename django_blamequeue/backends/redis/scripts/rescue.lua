-- ARGS: [limit, max_stalled, history level]. Leases that expired before now go back to pending (stalls + 1),
-- or fail as stalled on their last attempt, or past max_stalled when the lease ran alone; a
-- job asked to cancel whose worker died is cancelled. Reply: {repended, failed, cancelled,
-- JSON rows of what was rescued, for the log}.
local limit, max_stalled, level = ARGS[1], ARGS[2], ARGS[3] or 0
local MSG = STALLED_MESSAGE  -- rule: rescue (core.lifecycle.rescue)
local ids = redis.call('ZRANGEBYSCORE', P .. ':inflight', '-inf', '(' .. fmt(NOW), 'LIMIT', 0,
                       limit)
local counts = {pending = 0, failed = 0, cancelled = 0}
local rescued = {}  -- {id, name, queue, to, attempts, max_attempts, stalls}: the worker logs them
for _, id in ipairs(ids) do
  local k = jk(id)
  local h = redis.call('HMGET', k, 'state', 'attempts', 'max_attempts', 'stalls', 'cancel_req',
                       'queue', 'priority', 'alone', 'token', 'name', 'started')
  if h[1] ~= 'inflight' then
    redis.call('ZREM', P .. ':inflight', id)  -- a stale index entry
  else
    local attempts, stalls = num(h[2], 1), num(h[4], 0) + 1
    -- a stall counts past max_stalled only for a lease its worker ran alone (run_alone)
    local alone = h[8] ~= false and h[8] == h[9]
    local to
    if h[5] == '1' then
      to = 'cancelled'
    elseif attempts >= num(h[3], 1) then
      to = 'failed'
    elseif stalls > max_stalled and (alone or max_stalled == 0) then
      to = 'failed'
    else
      to = 'pending'
    end
    local q = h[6]
    keep_attempt(id, level, 'stalled', attempts, h[11], false, 'stalled', false, MSG, false)
    unindex(id, q, 'inflight')
    redis.call('HSET', k, 'stalls', fmt(stalls), 'updated', fmt(NOW))
    if to == 'pending' then
      redis.call('HSET', k, 'error', MSG, 'reason', 'stalled')
      redis.call('HDEL', k, 'finished', 'etype')
      make_pending(id, q, num(h[7], 0), NOW)
    elseif to == 'failed' then
      redis.call('HSET', k, 'error', MSG, 'reason', 'stalled')
      redis.call('HDEL', k, 'etype')
      terminal(id, q, 'failed')
    else
      redis.call('HSET', k, 'reason', 'cancelled')
      terminal(id, q, 'cancelled')
      cascade_cancel({id})
    end
    counts[to] = counts[to] + 1
    emit(A.STALLED, id, q, attempts, {to = to, stalls = stalls, name = h[10]})
    rescued[#rescued + 1] = {id, h[10], q, to, fmt(attempts), h[3], fmt(stalls)}
    if to == 'failed' then
      emit(A.DLQ_WRITE, id, q, attempts, {reason = 'stalled', error = MSG})
    end
  end
end
return finish({counts.pending, counts.failed, counts.cancelled,
               #rescued > 0 and cjson.encode(rescued) or ''})
