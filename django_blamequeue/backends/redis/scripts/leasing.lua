-- leasing.lua: claim and ack, shared by claim.lua, ack.lua and ack_claim.lua.

-- Due delayed and retrying jobs join the ready set (at most n per queue and claim).
local function promote(q, n)
  local due = redis.call('ZRANGEBYSCORE', qk(q, 'delayed'), '-inf', fmt(NOW), 'LIMIT', 0, n)
  for _, id in ipairs(due) do
    redis.call('ZREM', qk(q, 'delayed'), id)
    local h = redis.call('HMGET', jk(id), 'state', 'priority', 'avail')
    if h[1] == 'pending' then make_pending(id, q, num(h[2], 0), num(h[3], NOW)) end
  end
end

local CLAIMED = {'id', 'queue', 'name', 'ctype', 'cenc', 'attempts', 'max_attempts',
                 'priority', 'timeout', 'trace_id', 'classification', 'flow_id', 'parent_id',
                 'avail', 'created', 'flow_phase', 'flow_mode', 'flow_depth', 'stalls',
                 'checkpoint', 'ckey', 'snoozes',
                 'exp', 'payload'}
local NCLAIMED = #CLAIMED
local CKEY = 21
local EXP = 23

-- Lease one candidate ({score, member, queue}) whose fields `h` (CLAIMED) were just read.
-- Its ready-set member and its id are left in `taken` (queue -> members) and `ids`: the claim
-- takes them out of the ready sets and puts them in P:inflight with one command each.
local function lease(c, id, h, token, expires, started, gate, taken, ids)
  local k = jk(id)
  if not remove_first(qk(c[3], 'ready'), c[2]) then
    local members = taken[c[3]]
    if not members then members = {}; taken[c[3]] = members end
    members[#members + 1] = c[2]
  end
  ids[#ids + 1] = expires
  ids[#ids + 1] = id
  h[6] = fmt((tonumber(h[6]) or 0) + 1)  -- a field HSET past the API never fails a claim
  -- The queue whose index held the job is its queue: a `queue` field HSET past the API to
  -- another one is mended here, or the ack would settle the job in a queue it was never in.
  if h[2] == c[3] then
    redis.call('HSET', k, 'state', 'inflight', 'attempts', h[6], 'token', token,
               'expires', expires, 'started', started, 'updated', started)
  else
    h[2] = c[3]
    redis.call('HSET', k, 'state', 'inflight', 'attempts', h[6], 'token', token,
               'expires', expires, 'started', started, 'updated', started, 'queue', c[3])
  end
  leased(c[3], 1)
  local key = h[CKEY]
  if key then
    redis.call('HINCRBY', qk(c[3], 'kin'), key, 1)
    unindex_key(c[3], key, c[2])
  end
  if gate then count_start(c[3], gate, key, token, h[3]) end
end

-- Lease up to `limit` jobs over `queues`: priority desc, then available_at, then id, across
-- the queues. The i-th job's lease token is `nonce` (28 random hex digits, one per call)
-- followed by i in 4 hex digits: unguessable, and unique per lease. A candidate past its
-- expiry is cancelled instead (expire_job) and leases nothing.
-- Reply: {header, payloads}: header a JSON array of [token, expires, started, id, queue,
-- name, ..., payload length or -1 for none] per job (CLAIMED without the payload; numbers as
-- strings), then the payloads one after the other in one bulk (one to parse, not one a job).
-- `limited`: queue -> the settings' default limits of queues claimed under limits (limits.lua);
-- a paused queue gives nothing, and a queue with live limits obeys them whatever was passed.
local function claim(queues, limit, lease_us, nonce, limited)
  -- `mixed`: the candidates are not in the order of one ready set (ZRANGE's is the claim's).
  local candidates, gates, mixed = {}, {}, false
  for _, q in ipairs(queues) do
    local gate = gate_of(q, limited and limited[q])
    if gate ~= PAUSED then
      promote(q, 1000)
      if gate then
        gates[q] = gate
        mixed = true
        limited_candidates(q, limit, gate, candidates)
      else
        -- A ready job is due unless it was made ready by a caller whose `now` ran ahead.
        local items = redis.call('ZRANGE', qk(q, 'ready'), 0, 2 * limit + 8, 'WITHSCORES')
        local got = 0
        mixed = mixed or #candidates > 0
        for j = 1, #items, 2 do
          if got >= limit then break end
          if tonumber(string.sub(items[j], 1, 16)) <= NOW then
            candidates[#candidates + 1] = {tonumber(items[j + 1]), items[j], q}
            got = got + 1
          end
        end
      end
    end
  end
  if mixed then
    table.sort(candidates, function(x, y)
      if x[1] ~= y[1] then return x[1] < y[1] end
      return x[2] < y[2]
    end)
  end
  local header, payloads = {}, {}
  local expires, started = fmt(NOW + lease_us), fmt(NOW)
  local n = 0
  local taken, ids = {}, {}
  for _, c in ipairs(candidates) do
    if n >= limit then break end
    local id = string.sub(c[2], 17)
    local h = redis.call('HMGET', jk(id), unpack(CLAIMED))
    if h[EXP] and num(h[EXP], NOW + 1) <= NOW then  -- rule: expiry: cancelled, never leased
      expire_job(id, c[3], 'pending', h[14], h[EXP])
    else
      n = n + 1
      local token = nonce .. string.format('%04x', n)
      lease(c, id, h, token, expires, started, gates[c[3]], taken, ids)
      local row = {token, expires, started, unpack(h, 1, EXP - 1)}
      local payload = h[NCLAIMED]
      row[EXP + 3] = payload and #payload or -1  -- after the 3 + 22 fields
      payloads[#payloads + 1] = payload or nil
      header[#header + 1] = row
    end
  end
  for q, members in pairs(taken) do each('ZREM', qk(q, 'ready'), members, 1) end
  each('ZADD', P .. ':inflight', ids, 2)
  if #header == 0 then return {''} end
  return {cjson.encode(header), table.concat(payloads)}
end

-- One ack, from JSON: [id, token, state, result blob or false, error, traceback, reason,
-- delay_us, give_back 0/1, yields_to_cancel 0/1, children (a fan-out's, see land) or false,
-- snoozed 0/1, error_type or false, worker or false, history level (keep_attempt)]; or, for
-- a plain success that keeps no history, [id, token, result blob or false] (codec.ack_spec).
-- Reply row: {id, ok, state, queue, attempts, name, fanned}.
local function fan_out(id, k, h, children)
  local q = h[4]
  if h[3] == '1' then  -- a cancel request wins: nothing is stored
    redis.call('HSET', k, 'reason', 'cancelled')
    terminal(id, q, 'cancelled')
    return {id, 1, 'cancelled', q, h[5], h[6], 1}
  end
  redis.call('HSET', k, 'state', 'waiting_children', 'flow_phase', 'collect')
  redis.call('SADD', qk(q, 'waiting'), id)
  redis.call('ZADD', P .. ':waiting', 0, id)
  local m = mk(id)
  local added = 0
  for _, c in ipairs(children) do
    local child = c[4][1]
    if redis.call('HSETNX', m, 's:' .. child, 'pending') == 1 then
      redis.call('HSET', m, 'k:' .. child, c[1], 'b:' .. child, c[2], 'j:' .. child, c[3])
      added = added + 1
    end
    land(c)
  end
  redis.call('HINCRBY', k, 'kp', added)
  emit(A.FLOW_FAN_OUT, id, q, tonumber(h[5]), {children = #children})
  if #children == 0 then settle(id) end
  return {id, 1, 'waiting_children', q, h[5], h[6], 1}
end

-- The fields an ack reads: the fence, what it settles, and which optional fields the job has
-- (so it deletes only fields that exist and leaves P:expiring alone for a job without expiry).
local ACKED = {'state', 'token', 'cancel_req', 'queue', 'attempts', 'name', 'priority', 'flow_id',
               'dedupe_key', 'parent_id', 'started', 'ckey', 'exp',
               'error', 'traceback', 'etype', 'reason'}
local UNSET = {error = 14, traceback = 15, etype = 16, reason = 17}  -- field -> index in ACKED

local function apply_ack(a, unleased, finished)
  if #a == 3 then a = {a[1], a[2], 'done', a[3], false, false, false, '0', 0, 1, false, 0} end
  local id, token, wanted = a[1], a[2], a[3]
  local k = jk(id)
  local h = redis.call('HMGET', k, unpack(ACKED))
  if h[1] ~= 'inflight' or h[2] ~= token then return {id, 0} end  -- rule: fence
  local q = h[4]
  -- Out of flight (lib.lua unindex, inflight): P:inflight once for the batch (apply_acks).
  if not remove_first(P .. ':inflight', id) then unleased[#unleased + 1] = id end
  leased(q, -1)
  local ckey = h[12]
  if ckey and redis.call('HINCRBY', qk(q, 'kin'), ckey, -1) <= 0 then
    redis.call('HDEL', qk(q, 'kin'), ckey)
  end
  local now = fmt(NOW)
  local set, del = {'HSET', k, 'updated', now}, {'HDEL', k}
  if wanted == 'waiting_children' then
    redis.call(unpack(set))
    return fan_out(id, k, h, a[11] or {})
  end
  local result = a[4] and blob(a[4])
  local err, tb, reason = a[5], a[6], a[7]
  local wins = a[10] == 1 and h[3] == '1'  -- rule: cancel-wins
  local state = wins and 'cancelled' or wanted
  local attempts = tonumber(h[5])
  local function unset(field)
    if h[UNSET[field]] then del[#del + 1] = field end
  end
  if a[9] == 1 then  -- graceful release, a snooze, a hand-back: the attempt is given back
    attempts = attempts - 1
    set[#set + 1] = 'attempts'; set[#set + 1] = fmt(attempts)
  end
  if a[12] == 1 then redis.call('HINCRBY', k, 'snoozes', 1) end
  if wanted == 'done' then  -- a job is done once: it holds no result before
    if result then set[#set + 1] = 'result'; set[#set + 1] = result end
    set[#set + 1] = 'progress'; set[#set + 1] = '100'
    if not wins then  -- a done job keeps no error (the audit trail keeps each attempt's)
      unset('error'); unset('traceback'); unset('etype'); unset('reason')
    end
  end
  if err then
    set[#set + 1] = 'error'; set[#set + 1] = err
    if tb then set[#set + 1] = 'traceback'; set[#set + 1] = tb else unset('traceback') end
    if a[13] then set[#set + 1] = 'etype'; set[#set + 1] = a[13] else unset('etype') end
  end
  if wins then reason = 'cancelled' end
  if reason then set[#set + 1] = 'reason'; set[#set + 1] = reason end
  if #del > 2 then redis.call(unpack(del)) end
  if not (state == 'pending' and a[9] == 1) then  -- an attempt given back is no attempt
    local outcome = state == 'pending' and 'retried' or state
    keep_attempt(id, a[15] or 0, outcome, attempts, h[11], a[14], reason, a[13], err, tb)
  end
  if state == 'pending' then  -- (a job in flight has no finish time)
    redis.call(unpack(set))
    make_pending(id, q, num(h[7], 0), NOW + tonumber(a[8]))
    if reason == NO_HANDLER then redis.call('SADD', qk(q, 'nohandler'), id) end
  else
    set[#set + 1] = 'state'; set[#set + 1] = state
    set[#set + 1] = 'finished'; set[#set + 1] = now
    redis.call(unpack(set))
    on_terminal(id, q, state, h[9], h[10], h[13], finished)
    if state == 'done' and h[8] then release_dependants(id) end
    if state == 'cancelled' then cascade_cancel({id}) end
  end
  return {id, 1, state, q, fmt(attempts), h[6], 0}
end

-- Reply: a JSON array of the rows ("" for no ack): one bulk to parse, not seven per ack.
local function apply_acks(acks)
  local out, unleased, finished = {}, {}, {}
  for _, a in ipairs(acks) do out[#out + 1] = apply_ack(a, unleased, finished) end
  each('ZREM', P .. ':inflight', unleased, 1)  -- before a claim in the same call leases again
  for index, entries in pairs(finished) do each('ZADD', index, entries, 2) end
  return #out > 0 and cjson.encode(out) or ''
end

-- [queues, limit, lease_us, nonce, limited or false]
local function claim_spec(c)
  return c[1], c[2], tonumber(c[3]), c[4], c[5] or nil
end
