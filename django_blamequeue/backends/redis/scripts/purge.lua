-- ARGS: [queue, limit] or [queue, limit, before, ids]. Deletes up to `limit` waiting jobs
-- (pending, delayed included, and blocked) of the queue with their flow keys; with `before`
-- (µs), only those of `ids` created at or before it (a purge bounded by its confirmation).
-- Reply: how many were deleted.
local q, limit, before, given = ARGS[1], ARGS[2], ARGS[3], ARGS[4]
local ids = {}
if given then
  ids = given
else
  for _, m in ipairs(redis.call('ZRANGE', qk(q, 'ready'), 0, limit - 1)) do
    ids[#ids + 1] = string.sub(m, 17)
  end
  local function more(list)
    for _, id in ipairs(list) do
      if #ids >= limit then return end
      ids[#ids + 1] = id
    end
  end
  more(redis.call('ZRANGE', qk(q, 'delayed'), 0, limit - 1))
  more(redis.call('SRANDMEMBER', qk(q, 'blocked'), limit))
end
local n = 0
for _, id in ipairs(ids) do
  local k = jk(id)
  local h = redis.call('HMGET', k, 'state', 'avail', 'dedupe_key', 'flow_id', 'about', 'ukey',
                       'created', 'queue')
  local waiting = h[1] == 'pending' or h[1] == 'blocked'
  if waiting and before and (h[8] ~= q or (tonumber(h[7]) or 0) > before) then
    -- created after the bound (or another queue's): kept, its index entries too
  elseif waiting then
    unindex(id, q, h[1], h[2])
    if h[3] and redis.call('HGET', qk(q, 'dedupe'), h[3]) == id then
      redis.call('HDEL', qk(q, 'dedupe'), h[3])
    end
    if h[4] then redis.call('SREM', P .. ':flow:' .. h[4], id) end
    if h[5] then redis.call('ZREM', P .. ':about:' .. h[5], id) end
    if h[6] and redis.call('HGET', P .. ':uniq', h[6]) == id then
      redis.call('HDEL', P .. ':uniq', h[6])
    end
    for _, dep in ipairs(redis.call('SMEMBERS', P .. ':deps:' .. id)) do
      redis.call('SREM', P .. ':dependants:' .. dep, id)
    end
    redis.call('DEL', k, P .. ':deps:' .. id, P .. ':att:' .. id)
    n = n + 1
  else  -- an index entry whose job moved on
    redis.call('ZREM', qk(q, 'delayed'), id)
    redis.call('SREM', qk(q, 'blocked'), id)
  end
end
return finish(n)
