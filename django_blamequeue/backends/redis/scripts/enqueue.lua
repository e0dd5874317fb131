-- ARGS: the jobs' headers (codec.job_header); blob(i) is the i-th job's payload.
-- Reply per job: {id answered, deduplicated 0/1}.
local out = {}
for i, j in ipairs(ARGS) do
  local id, dup = insert_job(j, blob(i))
  out[#out + 1] = {id, dup}
end
return finish(out)
