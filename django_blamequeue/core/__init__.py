"""Backend-independent rules of the job lifecycle: pure functions and value objects."""
