-- ARGV[4..]: parent_id, then per child: key, backend, spec, JOB_ARGS. Re-lands children that
-- never landed, only while the parent still waits for them. Reply: how many were sent.
local parent = ARGV[4]
if redis.call('HGET', jk(parent), 'state') ~= 'waiting_children' then return finish(0) end
local n = 0
for j = 5, #ARGV, 3 + JOB_ARGS do
  if ARGV[j + 1] == ALIAS then
    insert_job(ARGV, j + 3)
  else
    outbox_add('enqueue', ARGV[j + 1], ARGV[j + 3], {'body', ARGV[j + 2]})
  end
  n = n + 1
end
return finish(n)
