"""The redis backend: jobs in Redis ≥ 7, each atomic step one Lua script (SPEC §1, issue 5)."""

from django_blamequeue.backends.redis.backend import RedisBackend

__all__ = ["RedisBackend"]
