--! include limits
--! include leasing
-- ARGS: [queues, limit, lease_us, nonce] (leasing.lua: claim).
return finish(claim(claim_spec(ARGS)))
