-- ARGV[4..]: 6 per report: parent_id, child_id, state, result?, result_type?, error?.
-- Each is recorded once on its parent's manifest; the parents that changed settle.
-- Reply: how many reports were recorded.
local changed, order, n = {}, {}, 0
for j = 4, #ARGV, 6 do
  local parent = ARGV[j]
  if record(parent, ARGV[j + 1], ARGV[j + 2], opt(ARGV[j + 3]), opt(ARGV[j + 4]),
            opt(ARGV[j + 5])) then
    n = n + 1
    if not changed[parent] then changed[parent] = true; order[#order + 1] = parent end
  end
end
for _, parent in ipairs(order) do settle(parent) end
return finish(n)
