"""The atomic-mix benchmark's jobs, as an installed app so ``runworker`` autodiscovers them."""
