-- ARGS: [ids]. A parked (pending, not yet due) job becomes due now: a workflow woken by an
-- event or a finished child. Anything else is left alone, so a wake may repeat. Reply: moved.
local moved = 0
for _, id in ipairs(ARGS) do
  local k = jk(id)
  local h = redis.call('HMGET', k, 'state', 'queue', 'priority', 'avail')
  if h[1] == 'pending' and h[4] and tonumber(h[4]) > NOW then
    unindex(id, h[2], 'pending', h[4])
    make_pending(id, h[2], num(h[3], 0), NOW)
    moved = moved + 1
  end
end
return finish(moved)
