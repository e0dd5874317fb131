-- ARGS: ids. Writes a report for each terminal child among them (repair of lost
-- reports: a report recorded already changes nothing). Reply: how many were terminal children.
local n = 0
for _, id in ipairs(ARGS) do
  local h = redis.call('HMGET', jk(id), 'state', 'parent_id')
  if h[2] and terminal_state(h[1]) then
    report(id)
    n = n + 1
  end
end
return finish(n)
