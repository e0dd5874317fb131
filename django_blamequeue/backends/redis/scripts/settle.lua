-- ARGS: parent ids. Settles those that are due. Reply: the ids settled.
local out = {}
for _, parent in ipairs(ARGS) do
  if settle(parent) then out[#out + 1] = parent end
end
return finish(out)
