-- ARGV[4..]: parent ids. Settles those that are due. Reply: the ids settled.
local out = {}
for j = 4, #ARGV do
  if settle(ARGV[j]) then out[#out + 1] = ARGV[j] end
end
return finish(out)
