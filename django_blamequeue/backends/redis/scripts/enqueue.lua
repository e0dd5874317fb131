-- ARGS: the jobs' headers (codec.job_header); blob(i) is the i-th job's payload.
-- Reply per job: {id answered, deduplicated 0/1, what a unique conflict did or ''}. A job that
-- refuses a conflict (on_conflict 'reject') whose key is held makes the reply
-- {{'', 'DUPLICATE', holder, its state, key}} and the script writes nothing.
for _, j in ipairs(ARGS) do
  if j[29] == 'reject' and redis.call('EXISTS', jk(j[1])) == 0 then
    local holder, state = unique_holder(j[26])
    if holder then return finish({{'', 'DUPLICATE', holder, state, j[26]}}) end
  end
end
local out = {}
for i, j in ipairs(ARGS) do
  local id, dup, _, unique = insert_job(j, blob(i))
  out[#out + 1] = {id, dup, unique or ''}
end
return finish(out)
