-- lib.lua: prepended to every script of the redis backend (see ../lua.py).
--
-- Every key lives under one hash tag, KEYS[1] (e.g. "{blamequeue}"), so each script touches a
-- single slot and runs unchanged on Redis Cluster. The header every script receives:
--   ARGV[1]  now in microseconds since the epoch, or "" for Redis TIME
--   ARGV[2]  this backend's alias (a child whose parent_backend is it reports in-script)
--   ARGV[3]  "1" when high-volume audit events (enqueue, ...) are wanted
--   ARGV[4]  the script's own arguments as JSON (None as false, big numbers as strings)
--   ARGV[5…] binary blobs the JSON points at by number: blob(1) is ARGV[5] (payloads, results)
-- Times are integer microseconds, written with fmt(): Lua numbers are doubles, exact below 2^53.
-- Every script ends with `return finish(result)`: {result, events, remote, outboxed, woken}.

local P = KEYS[1]
local NOW
if ARGV[1] ~= '' then
  NOW = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  NOW = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local ALIAS = ARGV[2]
local HV = ARGV[3] == '1'
local ARGS = cjson.decode(ARGV[4])
local function blob(i) return ARGV[4 + i] end
local EV = {}        -- audit events: {action, job_id, queue, attempt, data_json}
local WAKE = {}      -- queue -> true: jobs became ready there
local REMOTE = {}    -- {backend, child_id}: unfinished children elsewhere, to cancel after
local OUTBOXED = 0   -- outbox entries written (the caller nudges its relay)
local LEASED = {}    -- queue -> change of its leased-jobs counter, written once at the end
local KNOWN = {}     -- queues added to P:queues by this call

local function fmt(n) return string.format('%.0f', n) end
local function jk(id) return P .. ':job:' .. id end
local function qk(q, s) return P .. ':q:' .. q .. ':' .. s end
local function mk(parent) return P .. ':m:' .. parent end
local function num(v, default)
  if v == false or v == nil or v == '' then return default end
  return tonumber(v) or default  -- a field of the wrong type (HSET past the API)
end
local function terminal_state(s) return s == 'done' or s == 'failed' or s == 'cancelled' end
local function active(id)
  local s = redis.call('HGET', jk(id), 'state')
  return s ~= false and not terminal_state(s)
end

local function emit(action, id, q, attempt, data)
  EV[#EV + 1] = {action, id or '', q or '', attempt and fmt(attempt) or '',
                 data and cjson.encode(data) or ''}
end

local function finish(result)
  for q, n in pairs(LEASED) do
    if n ~= 0 then redis.call('HINCRBY', P .. ':leased', q, n) end
  end
  local woken = {}
  for q, _ in pairs(WAKE) do
    woken[#woken + 1] = q
    redis.call('PUBLISH', P .. ':wake', q)
  end
  return {result, EV, REMOTE, OUTBOXED, woken}
end

-- Ready jobs of a queue sort by score = -priority, then by member: available_at as 16 digits
-- followed by the id, so equal priorities order by available_at, then id (FIFO), exactly.
local function member(avail, id) return string.format('%016.0f', avail) .. id end

-- A job with a concurrency key is also indexed by key while ready: P:q:Q:kr:KEY (same
-- scores and members as the ready set), and its key is in P:q:Q:keyring (score: when a claim
-- last served it), so a limited claim finds other keys' jobs behind a full key (limits.lua).
local function kr(q, key) return qk(q, 'kr:' .. key) end

-- Index a pending job: ready when due, else delayed (its hash says pending at `avail`).
local function index_pending(id, q, prio, avail)
  if avail <= NOW then
    local m = member(avail, id)
    redis.call('ZADD', qk(q, 'ready'), -prio, m)
    local key = redis.call('HGET', jk(id), 'ckey')
    if key then
      redis.call('ZADD', kr(q, key), -prio, m)
      redis.call('ZADD', qk(q, 'keyring'), 'NX', 0, key)
    end
    WAKE[q] = true
  else
    redis.call('ZADD', qk(q, 'delayed'), fmt(avail), id)
  end
end

-- A ready keyed job left the ready set (claimed, cancelled, purged).
local function unindex_key(q, key, m)
  redis.call('ZREM', kr(q, key), m)
  if redis.call('EXISTS', kr(q, key)) == 0 then redis.call('ZREM', qk(q, 'keyring'), key) end
end

local function make_pending(id, q, prio, avail)
  redis.call('HSET', jk(id), 'state', 'pending', 'avail', fmt(avail))
  index_pending(id, q, prio, avail)
end

local function leased(q, n) LEASED[q] = (LEASED[q] or 0) + n end

-- Under maxmemory Redis refuses a script whose first write may add memory (HSET, ZADD) and
-- lets one that has written go on. Claims and acks must still run on a full Redis (they are
-- what empties it), so each makes its first write a removal: this one, at once; the caller
-- batches the others. Answers whether it wrote.
local REMOVED = false
local function remove_first(key, member)
  if REMOVED then return false end
  REMOVED = true
  redis.call('ZREM', key, member)
  return true
end

-- One command over many items, `per` arguments an item (a member; a score and a member), in
-- as few calls as Lua's stack allows: `each('ZREM', key, members, 1)`.
local EACH_ARGS = 4000
local function each(command, key, items, per)
  local step = EACH_ARGS - EACH_ARGS % per
  for i = 1, #items, step do
    redis.call(command, key, unpack(items, i, math.min(#items, i + step - 1)))
  end
end

-- Take a job out of the index of the (non-terminal) state it is leaving. The lease fields of a
-- job (token, expires) mean something only while it is inflight: every fence checks the state.
local function unindex(id, q, state, avail)
  if state == 'pending' then
    if avail then
      local m = member(tonumber(avail), id)
      redis.call('ZREM', qk(q, 'ready'), m)
      local key = redis.call('HGET', jk(id), 'ckey')
      if key then unindex_key(q, key, m) end
    end
    redis.call('ZREM', qk(q, 'delayed'), id)
  elseif state == 'blocked' then
    redis.call('SREM', qk(q, 'blocked'), id)
  elseif state == 'waiting_children' then
    redis.call('SREM', qk(q, 'waiting'), id)
    redis.call('ZREM', P .. ':waiting', id)
  elseif state == 'inflight' then
    redis.call('ZREM', P .. ':inflight', id)
    leased(q, -1)
    local key = redis.call('HGET', jk(id), 'ckey')
    if key and redis.call('HINCRBY', qk(q, 'kin'), key, -1) <= 0 then
      redis.call('HDEL', qk(q, 'kin'), key)
    end
  end
end

local function outbox_add(kind, backend, job_id, fields)
  local eid = redis.call('INCR', P .. ':outbox:seq')
  local args = {'HSET', P .. ':ob:' .. eid, 'kind', kind, 'backend', backend, 'job_id', job_id}
  for i = 1, #fields, 2 do
    if fields[i + 1] then
      args[#args + 1] = fields[i]
      args[#args + 1] = fields[i + 1]
    end
  end
  redis.call(unpack(args))
  redis.call('ZADD', P .. ':outbox', eid, eid)
  redis.call('HINCRBY', P .. ':outbox:n:' .. kind, job_id, 1)
  OUTBOXED = OUTBOXED + 1
end

local report, settle, cascade_cancel, cancel_ids

-- The indexes and side effects of a job that just became terminal (its hash says so
-- already): the finish-time index, the DLQ, the dedupe key freed, the report to a parent.
-- `exp`: the job's expiry field when the caller read it (false: none, so it is not in
-- P:expiring), nil when unknown. `finished`: a batch's finish-time entries (key -> {score,
-- id, ...}), written by the caller with one ZADD a key (`each`); nil: written here.
local function on_terminal(id, q, state, key, parent, exp, finished)
  if finished then
    local index = qk(q, state)
    local entries = finished[index]
    if not entries then entries = {}; finished[index] = entries end
    entries[#entries + 1] = fmt(NOW)
    entries[#entries + 1] = id
  else
    redis.call('ZADD', qk(q, state), fmt(NOW), id)
  end
  if exp ~= false then redis.call('ZREM', P .. ':expiring', id) end
  if state == 'failed' then redis.call('ZADD', qk(q, 'dlq'), 0, id) end
  if key and redis.call('HGET', qk(q, 'dedupe'), key) == id then
    redis.call('HDEL', qk(q, 'dedupe'), key)
  end
  if parent then report(id) end
end

-- Into a terminal state, from a state already unindexed.
local function terminal(id, q, state)
  local k = jk(id)
  redis.call('HSET', k, 'state', state, 'finished', fmt(NOW), 'updated', fmt(NOW))
  local h = redis.call('HMGET', k, 'dedupe_key', 'parent_id')
  on_terminal(id, q, state, h[1], h[2])
end

-- A child's outcome on its parent's manifest, once: only a pending entry changes.
-- rule: report-once (core.rules.records_report)
local function record(parent, child, state, result, rtype, err)
  local m = mk(parent)
  if redis.call('HGET', m, 's:' .. child) ~= 'pending' then return false end
  local args = {'HSET', m, 's:' .. child, state}
  if result then args[#args + 1] = 'r:' .. child; args[#args + 1] = result end
  if rtype then args[#args + 1] = 't:' .. child; args[#args + 1] = rtype end
  if err then args[#args + 1] = 'e:' .. child; args[#args + 1] = err end
  redis.call(unpack(args))
  local pk = jk(parent)
  redis.call('HINCRBY', pk, 'kp', -1)
  local counter = ({done = 'kd', failed = 'kf', cancelled = 'kc'})[state]
  if counter then redis.call('HINCRBY', pk, counter, 1) end
  emit(A.FLOW_REPORT, child, nil, nil, {parent_id = parent, state = state})
  return true
end

-- A terminal child reports: on its parent's manifest here (and settles it), or through the
-- outbox to the backend that holds its parent; either way in this script.
report = function(id)
  local h = redis.call('HMGET', jk(id), 'parent_id', 'parent_backend', 'state', 'result',
                       'ctype', 'error')
  local parent = h[1]
  if not parent then return false end
  local state = h[3]
  local result = state == 'done' and h[4]
  local err = state ~= 'done' and h[6]
  if (h[2] or ALIAS) == ALIAS then
    if record(parent, id, state, result, h[5], err) then settle(parent) end
  else
    outbox_add('report', h[2], id, {'parent_id', parent, 'child_id', id, 'state', state,
                                    'result', result, 'result_type', h[5], 'error', err})
  end
  return true
end

-- The unfinished children of a parent that live on other backends: cancelled by the caller
-- once this script returned, and again by the flow sweeper (the cascade set) after a crash.
local function remote_children(parent)
  local m = redis.call('HGETALL', mk(parent))
  local fields = {}
  for i = 1, #m, 2 do fields[m[i]] = m[i + 1] end
  local here, n = {}, 0
  for f, backend in pairs(fields) do
    if string.sub(f, 1, 2) == 'b:' then
      local child = string.sub(f, 3)
      if backend == ALIAS then
        here[#here + 1] = child
      elseif fields['s:' .. child] == 'pending' then
        REMOTE[#REMOTE + 1] = {backend, child}
        n = n + 1
      end
    end
  end
  if n > 0 then redis.call('SADD', P .. ':cascade', parent) end
  return here, n
end

-- Cancel what can no longer run: blocked DAG dependants and children, transitively.
-- rule: cascade (core.rules.cascades)
cascade_cancel = function(ids)
  local seen, frontier, total, remote = {}, ids, 0, 0
  for _, id in ipairs(ids) do seen[id] = true end
  while #frontier > 0 do
    local nxt = {}
    for _, id in ipairs(frontier) do
      for _, d in ipairs(redis.call('SMEMBERS', P .. ':dependants:' .. id)) do
        if not seen[d] then seen[d] = true; nxt[#nxt + 1] = d end
      end
      local here, n = remote_children(id)
      remote = remote + n
      for _, c in ipairs(here) do
        if not seen[c] then seen[c] = true; nxt[#nxt + 1] = c end
      end
    end
    total = total + cancel_ids(nxt)
    frontier = nxt
  end
  return total, remote
end

-- Waiting jobs (pending, blocked, waiting_children) are cancelled at once, running ones get a
-- cancel request; terminal and unknown ids are skipped.
cancel_ids = function(ids)
  local n = 0
  for _, id in ipairs(ids) do
    local k = jk(id)
    local h = redis.call('HMGET', k, 'state', 'queue', 'avail')
    if h[1] and not terminal_state(h[1]) then
      n = n + 1
      if h[1] == 'inflight' then
        redis.call('HSET', k, 'cancel_req', '1', 'updated', fmt(NOW))
        emit(A.CANCEL_REQUESTED, id, h[2], nil, {cascade = true})
      else
        unindex(id, h[2], h[1], h[3])
        redis.call('HSET', k, 'reason', 'cancelled')
        terminal(id, h[2], 'cancelled')
        emit(A.CANCEL, id, h[2], nil, {cascade = true})
      end
    end
  end
  return n
end

local function cascade_children(parent)
  local n, remote = cascade_cancel({parent})
  if n > 0 or remote > 0 then emit(A.FLOW_CASCADE, parent, nil, nil, {}) end
  return n + remote
end

-- A waiting job past its expiry ends cancelled, reason expired, as a cancel does (reports,
-- cascades). rule: expiry (core.rules.expired)
local function expire_job(id, q, state, avail, exp)
  unindex(id, q, state, avail)
  redis.call('HSET', jk(id), 'reason', 'expired')
  terminal(id, q, 'cancelled')
  redis.call('ZADD', qk(q, 'expired'), fmt(NOW), id)
  emit(A.EXPIRE, id, q, nil, {expires_at = exp})
  cascade_children(id)
end

-- Re-pend a parked parent when no child is pending, or at a failure under "fail" (then the
-- unfinished children are cancelled). Counters on the parent make this O(1).
-- rule: settle-due (core.rules.settle_due)
settle = function(parent)
  local pk = jk(parent)
  local h = redis.call('HMGET', pk, 'state', 'flow_mode', 'kp', 'kf', 'kd', 'kc', 'queue',
                       'priority')
  if h[1] ~= 'waiting_children' then return false end
  local pending, failed = num(h[3], 0), num(h[4], 0)
  if pending > 0 and not (h[2] ~= CONTINUE and failed > 0) then return false end
  local q = h[7]
  unindex(parent, q, 'waiting_children')
  redis.call('HSET', pk, 'updated', fmt(NOW))
  make_pending(parent, q, num(h[8], 0), NOW)
  local tally = {}
  local counts = {pending = pending, failed = failed, done = num(h[5], 0), cancelled = num(h[6], 0)}
  for name, v in pairs(counts) do
    if v > 0 then tally[name] = v end
  end
  emit(A.FLOW_SETTLE, parent, q, nil, {children = tally, fail_fast = pending > 0})
  if pending > 0 then cascade_children(parent) end
  return true
end

-- Blocked DAG jobs whose last unfinished dependency just finished become pending.
-- rule: dag-release (core.rules.released)
local function release_dependants(id)
  local key = P .. ':dependants:' .. id
  for _, d in ipairs(redis.call('SMEMBERS', key)) do
    local deps = P .. ':deps:' .. d
    redis.call('SREM', deps, id)
    if redis.call('SCARD', deps) == 0 then
      local h = redis.call('HMGET', jk(d), 'state', 'queue', 'priority')
      if h[1] == 'blocked' then
        redis.call('SREM', qk(h[2], 'blocked'), d)
        redis.call('HSET', jk(d), 'updated', fmt(NOW))
        make_pending(d, h[2], num(h[3], 0), NOW)
      end
    end
  end
  redis.call('DEL', key)
end

-- The job that holds unique key `ukey` (P:uniq), with its state and queue, while it holds
-- it; nil when the key is free. A holder that no longer holds loses its claim here.
-- rule: unique (core.unique.holds)
local function unique_holder(ukey)
  local holder = redis.call('HGET', P .. ':uniq', ukey)
  if not holder then return nil end
  local h = redis.call('HMGET', jk(holder), 'state', 'ustates', 'uuntil', 'queue')
  if not (h[1] and h[2]) then return nil end
  if string.find(h[2], ',' .. h[1] .. ',', 1, true) and (not h[3] or tonumber(h[3]) > NOW) then
    return holder, h[1], h[4]
  end
  redis.call('HDEL', jk(holder), 'ustates')
  return nil
end

-- A unique job's enqueue met its key's holder: count the call; replace and debounce give a
-- waiting holder the new payload (debounce: and the new start). Returns what it did.
local function absorb(holder, state, hq, j, payload)
  local hk, mode, out = jk(holder), j[29], 'skip'
  redis.call('HINCRBY', hk, 'ucalls', 1)
  if (mode == 'replace' or mode == 'debounce') and (state == 'pending' or state == 'blocked') then
    out = mode
    redis.call('HSET', hk, 'payload', payload, 'ctype', j[4], 'cenc', j[5], 'updated', fmt(NOW))
    if mode == 'debounce' and state == 'pending' then
      local h = redis.call('HMGET', hk, 'avail', 'priority')
      unindex(holder, hq, 'pending', h[1])
      make_pending(holder, hq, num(h[2], 0), j[7] and tonumber(j[7]) or NOW + tonumber(j[8]))
    end
  end
  if HV then emit(A.UNIQUE, holder, hq, nil, {outcome = out, key = j[26], name = j[3]}) end
  return out
end

-- A new job: `j` its JSON header (codec.job_header), `payload` its bytes. An existing id is
-- answered as it is (the relay may send twice); a held dedupe key answers its holder, and so
-- does a held unique key (absorb).
-- Returns the id answered, 1 if deduplicated else 0, whether a job was inserted, and what a
-- unique conflict did ('skip', 'replace', 'debounce').
local OPTIONAL = {[10] = 'timeout', [11] = 'classification', [12] = 'trace_id',
                  [13] = 'dedupe_key', [14] = 'flow_id', [15] = 'parent_id', [16] = 'flow_key',
                  [17] = 'flow_phase', [18] = 'flow_mode', [19] = 'parent_backend',
                  [23] = 'about', [24] = 'origin', [25] = 'ckey', [26] = 'ukey',
                  [27] = 'ustates'}
local function insert_job(j, payload)
  local id, q, name = j[1], j[2], j[3]
  local k = jk(id)
  if redis.call('EXISTS', k) == 1 then return id, 0, false end
  local ukey = j[26]
  if ukey then
    local holder, state, hq = unique_holder(ukey)
    if holder then return holder, 1, false, absorb(holder, state, hq, j, payload) end
  end
  local key = j[13]
  if key then
    local holder = redis.call('HGET', qk(q, 'dedupe'), key)
    if holder and active(holder) then return holder, 1, false end
  end
  local prio = tonumber(j[6])
  local avail = j[7] and tonumber(j[7]) or NOW + tonumber(j[8])
  local blocked = j[21] == 1
  local f = {'HSET', k, 'id', id, 'queue', q, 'name', name, 'payload', payload,
             'ctype', j[4], 'cenc', j[5], 'priority', j[6], 'attempts', '0',
             'max_attempts', j[9], 'stalls', '0', 'progress', '0', 'created', fmt(NOW),
             'updated', fmt(NOW), 'flow_depth', j[20], 'avail', fmt(avail),
             'state', blocked and 'blocked' or 'pending'}
  for index, field in pairs(OPTIONAL) do
    if j[index] then f[#f + 1] = field; f[#f + 1] = j[index] end
  end
  local deps = j[22]
  if deps ~= '' then f[#f + 1] = 'depends_on'; f[#f + 1] = deps end
  local exp = j[30]  -- ["at", us] or ["in", us after now]: P:expiring finds it when due
  if exp then
    exp = exp[1] == 'at' and tonumber(exp[2]) or NOW + tonumber(exp[2])
    f[#f + 1] = 'exp'; f[#f + 1] = fmt(exp)
  end
  redis.call(unpack(f))
  if exp then redis.call('ZADD', P .. ':expiring', fmt(exp), id) end
  if not KNOWN[q] then
    KNOWN[q] = true
    redis.call('SADD', P .. ':queues', q)
  end
  if j[14] then redis.call('SADD', P .. ':flow:' .. j[14], id) end
  if j[23] then redis.call('ZADD', P .. ':about:' .. j[23], NOW, id) end
  if key then redis.call('HSET', qk(q, 'dedupe'), key, id) end
  if ukey then
    redis.call('HSET', P .. ':uniq', ukey, id)
    redis.call('HSET', k, 'ucalls', '0')
    if j[28] then redis.call('HSET', k, 'uuntil', fmt(NOW + tonumber(j[28]))) end
  end
  if HV then emit(A.ENQUEUE, id, q, nil, {name = name}) end
  if not blocked then
    index_pending(id, q, prio, avail)
    return id, 0, true
  end
  -- Only unfinished dependencies count; one not inserted yet counts as unfinished (a relay
  -- may deliver a big flow in pages). A cancelled dependency cancels this job at once.
  local open, dead = 0, false
  for dep in string.gmatch(deps, '%S+') do
    local s = redis.call('HGET', jk(dep), 'state')
    if s == 'cancelled' then
      dead = true
    elseif s ~= 'done' then
      redis.call('SADD', P .. ':deps:' .. id, dep)
      redis.call('SADD', P .. ':dependants:' .. dep, id)
      open = open + 1
    end
  end
  if dead then
    redis.call('HSET', k, 'reason', 'cancelled')
    terminal(id, q, 'cancelled')
    emit(A.CANCEL, id, q, nil, {cascade = true})
  elseif open > 0 then
    redis.call('SADD', qk(q, 'blocked'), id)
  else
    make_pending(id, q, prio, avail)
  end
  return id, 0, true
end

-- Children of a fan-out or a repair: [key, backend, spec JSON, job header, payload blob].
-- Those on this backend land here; the others go out through the outbox as enqueues.
local function land(child)
  if child[2] == ALIAS then
    insert_job(child[4], blob(child[5]))
  else
    outbox_add('enqueue', child[2], child[4][1], {'body', child[3]})
  end
end

-- A job's attempt history (Backend.attempts): a list of JSON entries at P:att:ID,
-- [attempt, outcome, started, finished, worker, reason, error_type, error, traceback],
-- kept per ATTEMPT_HISTORY (`level`: 0 off, 1 every attempt not done, 2 all), at most
-- ATTEMPTS_KEPT entries (the newest), deleted with the job.
local ATTEMPTS_KEPT = 1000
local function keep_attempt(id, level, outcome, attempt, started, worker, reason, etype, err, tb)
  if level == 0 or (level == 1 and outcome == 'done') then return end
  local key = P .. ':att:' .. id
  redis.call('RPUSH', key, cjson.encode({num(attempt, 0), outcome, started or false, fmt(NOW),
                                         worker or false, reason or false, etype or false,
                                         err or false, tb or false}))
  redis.call('LTRIM', key, -ATTEMPTS_KEPT, -1)
end
