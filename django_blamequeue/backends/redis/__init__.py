"""The redis backend: jobs in Redis ≥ 7, each atomic step one Lua script (docs/index.md)."""

from django_blamequeue.backends.redis.backend import RedisBackend

__all__ = ["RedisBackend"]
