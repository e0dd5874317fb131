--! include limits
--! include leasing
-- ARGS: the acks (leasing.lua: apply_ack); results and child payloads are blobs.
return finish(apply_acks(ARGS))
