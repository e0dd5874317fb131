-- ARGS: [resolutions, samples]: the console's chart buckets (core/timeseries.py). Each
-- resolution [step, keep] has a hash per bucket, P:ts:STEP:START (START: seconds since the
-- epoch), whose field "QUEUE\31NAME" holds 5 + 2 * SLOTS numbers separated by commas: done,
-- failed, retried, cancelled, depth (-1: none), the wait histogram, the run histogram. A
-- sample [queue, name, done, failed, retried, cancelled, depth or false, wait, run] adds its
-- counts (its depth replaces the bucket's). Each hash expires once its window has passed,
-- so Redis prunes them by itself. Reply: how many fields were written.
local resolutions, samples = ARGS[1], ARGS[2]
local now_s = math.floor(NOW / 1000000)
local written = 0
for _, r in ipairs(resolutions) do
  local step, keep = r[1], r[2]
  local start = now_s - now_s % step
  local key = P .. ':ts:' .. fmt(step) .. ':' .. fmt(start)
  for _, s in ipairs(samples) do
    local field = s[1] .. '\31' .. s[2]
    local v = {}
    local old = redis.call('HGET', key, field)
    if old then
      for x in string.gmatch(old, '[^,]+') do v[#v + 1] = tonumber(x) end
    end
    local add = {s[3], s[4], s[5], s[6]}
    for _, x in ipairs(s[8]) do add[#add + 1] = x end
    for _, x in ipairs(s[9]) do add[#add + 1] = x end
    local out = {}
    for i = 1, 4 do out[i] = (v[i] or 0) + add[i] end
    out[5] = s[7] or v[5] or -1
    for i = 5, #add do out[i + 1] = (v[i + 1] or 0) + add[i] end
    for i = 1, #out do out[i] = fmt(out[i]) end
    redis.call('HSET', key, field, table.concat(out, ','))
    written = written + 1
  end
  redis.call('EXPIREAT', key, fmt(start + step + keep))
end
return finish(written)
