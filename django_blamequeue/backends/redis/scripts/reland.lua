-- ARGS: [parent_id, children] (lib.lua: land). Re-lands children that never landed, only
-- while the parent still waits for them. Reply: how many were sent.
local parent, children = ARGS[1], ARGS[2]
if redis.call('HGET', jk(parent), 'state') ~= 'waiting_children' then return finish(0) end
for _, c in ipairs(children) do land(c) end
return finish(#children)
