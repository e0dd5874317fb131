--! include leasing
-- ARGV[4..]: nqueues, queues..., limit, lease_us, tokens (one per job that may be leased).
return finish(claim(claim_args(ARGV, 4)))
