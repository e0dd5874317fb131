"""The redis backend: jobs in Redis ≥ 7, each atomic step one Lua script (SPEC §1, issue 5)."""

from .backend import RedisBackend

__all__ = ["RedisBackend"]
