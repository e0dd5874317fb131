-- ARGS: ["ids", ids] or ["queue", queue, offset, limit]. A failed job goes
-- back to pending with a fresh budget, unless its dedupe key is now held by another live job
-- (it stays in the DLQ: no duplicate run). Reply: {retried, skipped}.
-- rule: dlq-retry (core.rules.DLQ_RETRY_RESETS)
local function retry(id, dlq)
  local k = jk(id)
  local h = redis.call('HMGET', k, 'state', 'queue', 'dedupe_key', 'priority')
  if h[1] ~= 'failed' then
    if dlq then redis.call('ZREM', dlq, id) end  -- a stale entry: the job moved on
    return 0
  end
  local q, key = h[2], h[3]
  if key then
    local holder = redis.call('HGET', qk(q, 'dedupe'), key)
    if holder and holder ~= id and active(holder) then return -1 end
    redis.call('HSET', qk(q, 'dedupe'), key, id)
  end
  redis.call('ZREM', qk(q, 'failed'), id)
  redis.call('ZREM', qk(q, 'dlq'), id)
  redis.call('HSET', k, 'attempts', '0', 'stalls', '0', 'cancel_req', '0', 'progress', '0',
             'updated', fmt(NOW))
  redis.call('HDEL', k, 'finished')
  make_pending(id, q, num(h[4], 0), NOW)
  emit(A.DLQ_RETRY, id, q, nil, nil)
  return 1
end
local ids, dlq
if ARGS[1] == 'ids' then
  ids = ARGS[2]
else
  local offset, limit = ARGS[3], ARGS[4]
  dlq = qk(ARGS[2], 'dlq')
  ids = redis.call('ZRANGE', dlq, offset, offset + limit - 1)
end
local retried, skipped = 0, 0
for _, id in ipairs(ids) do
  local r = retry(id, dlq)
  if r == 1 then retried = retried + 1 elseif r == -1 then skipped = skipped + 1 end
end
return finish({retried, skipped, #ids})
