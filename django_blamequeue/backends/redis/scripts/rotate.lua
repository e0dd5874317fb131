-- ARGS: [[id, state, attempts, fields, entries], ...] from one read of the jobs' hashes
-- (backends/redis/rotation.py). fields: [[name, old blob or false, new blob or false], ...],
-- every sealed field of the hash as read and, where it changes, re-sealed; entries: the same
-- for the kept attempts (P:att:ID), by 0-based index, with their count as read.
-- A job is rewritten only if its state and attempt count and every field and entry as read
-- are still what it holds (compare-and-set), and it is not inflight: an ack, a retry or a
-- replacing enqueue that landed since the read wins. Nothing else is touched ('updated' too).
-- Reply: the ids rewritten.
local function as_read(v) if v == false then return false end return blob(v) end

local rewritten = {}
for _, c in ipairs(ARGS) do
  local id, state, attempts, fields, entries = c[1], c[2], c[3], c[4], c[5]
  local k = jk(id)
  local same = true
  local h = redis.call('HMGET', k, 'state', 'attempts')
  if h[1] ~= state or h[1] == 'inflight' or h[2] ~= attempts then same = false end
  if same then
    for _, f in ipairs(fields) do
      if redis.call('HGET', k, f[1]) ~= as_read(f[2]) then same = false break end
    end
  end
  local ak = P .. ':att:' .. id
  if same and redis.call('LLEN', ak) ~= entries[1] then same = false end
  if same then
    for _, e in ipairs(entries[2]) do
      if redis.call('LINDEX', ak, e[1]) ~= blob(e[2]) then same = false break end
    end
  end
  if same then
    local set = {'HSET', k}
    for _, f in ipairs(fields) do
      if f[3] then set[#set + 1] = f[1]; set[#set + 1] = blob(f[3]) end
    end
    if #set > 2 then redis.call(unpack(set)) end
    for _, e in ipairs(entries[2]) do redis.call('LSET', ak, e[1], blob(e[3])) end
    rewritten[#rewritten + 1] = id
  end
end
return finish(rewritten)
