-- ARGS: [limit, lease_us, after]: entries after sequence number `after` (a relay's pass moves
-- forward, so entries it could not deliver wait for its next pass). Leases up to `limit` unsent outbox entries for one relay, so
-- that relays in many processes share the outbox instead of each sending everything. A lease
-- that ran out (the relay died mid-send) makes its entries visible again first. Times are
-- Redis TIME, never a caller's moved clock. Reply: {eid, kind, backend, job_id, field, value...}.
local t = redis.call('TIME')
local real = tonumber(t[1]) * 1000000 + tonumber(t[2])
local limit, lease, after = ARGS[1], ARGS[2], ARGS[3]
local leased = P .. ':outbox:leased'
for _, eid in ipairs(redis.call('ZRANGEBYSCORE', leased, '-inf', fmt(real), 'LIMIT', 0, 1000)) do
  redis.call('ZREM', leased, eid)
  redis.call('ZADD', P .. ':outbox', eid, eid)
end
local out = {}
local page = redis.call('ZRANGEBYSCORE', P .. ':outbox', '(' .. after, '+inf', 'LIMIT', 0, limit)
for _, eid in ipairs(page) do
  redis.call('ZREM', P .. ':outbox', eid)
  redis.call('ZADD', leased, fmt(real + lease), eid)
  local entry = redis.call('HGETALL', P .. ':ob:' .. eid)
  table.insert(entry, 1, eid)
  out[#out + 1] = entry
end
return finish(out)
