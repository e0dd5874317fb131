--! include limits
--! include leasing
-- ARGS: [acks, claim]. The acks of finished jobs and the next claim in one atomic step: acks
-- first (a slot an ack frees may be refilled at once), then the claim as in claim.lua.
local rows = apply_acks(ARGS[1])
return finish({rows, claim(claim_spec(ARGS[2]))})
