-- ARGS: [flow_id]. Cancels every non-terminal job of the flow. Reply: how many.
local flow = ARGS[1]
local ids = {}
for _, id in ipairs(redis.call('SMEMBERS', P .. ':flow:' .. flow)) do
  if active(id) then ids[#ids + 1] = id end
end
local n = cancel_ids(ids)
cascade_cancel(ids)  -- children of these parents on other backends
emit(A.FLOW_CANCEL, nil, nil, nil, {flow_id = flow, count = n})
return finish(n)
