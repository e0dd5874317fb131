"""The flow benchmark's jobs, as an installed app so ``runworker`` autodiscovers them."""
