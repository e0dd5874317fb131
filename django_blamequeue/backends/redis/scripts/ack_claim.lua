--! include leasing
-- The acks of finished jobs and the next claim, in one atomic step: acks first (a slot freed
-- by an ack may be refilled at once), then the claim arguments as in claim.lua.
local rows, i = apply_acks(ARGV, 4)
local claimed = claim(claim_args(ARGV, i))
return finish({rows, claimed})
