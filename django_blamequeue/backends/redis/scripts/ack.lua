--! include leasing
-- ARGV[4..]: nacks, then each ack (leasing.lua: apply_ack).
local rows = apply_acks(ARGV, 4)
return finish(rows)
