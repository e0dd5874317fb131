-- ARGV[4..]: njobs, then JOB_ARGS per job. Reply per job: {id answered, deduplicated 0/1}.
local n = tonumber(ARGV[4])
local out = {}
for j = 0, n - 1 do
  local id, dup = insert_job(ARGV, 5 + j * JOB_ARGS)
  out[#out + 1] = {id, dup}
end
return finish(out)
