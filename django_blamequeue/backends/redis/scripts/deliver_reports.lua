-- ARGS: reports [parent_id, child_id, state, result blob or false, result_type, error].
-- Each is recorded once on its parent's manifest; the parents that changed settle.
-- Reply: how many reports were recorded.
local changed, order, n = {}, {}, 0
for _, r in ipairs(ARGS) do
  local parent = r[1]
  if record(parent, r[2], r[3], r[4] and blob(r[4]), r[5], r[6]) then
    n = n + 1
    if not changed[parent] then changed[parent] = true; order[#order + 1] = parent end
  end
end
for _, parent in ipairs(order) do settle(parent) end
return finish(n)
