"""The redis claim script matches concurrency keys to ``key_weights`` globs with Lua patterns:
each glob's pattern, run by the real server, matches exactly the keys ``fnmatch`` does."""

from __future__ import annotations

from fnmatch import fnmatchcase

import pytest
import redis

from django_blamequeue.backends.redis.codec import lua_pattern

from .redis_support import shared_url

GLOBS = ["enterprise:*", "t?nant", "a.b+c%", "[ab]x", "[!ab]x", "*-[0-9]", "x[", "^$()", "*"]
KEYS = [
    "enterprise:acme",
    "enterprise:",
    "Enterprise:acme",
    "tenant",
    "tnant",
    "a.b+c%",
    "axb+c%",
    "ax",
    "bx",
    "cx",
    "q-7",
    "q-x",
    "x[",
    "^$()",
    "",
]
MATCH = (
    "local out = {} for i = 2, #ARGV do "
    "out[i - 1] = string.find(ARGV[i], ARGV[1]) and 1 or 0 end return out"
)


@pytest.mark.parametrize("glob", GLOBS)
def test_a_globs_lua_pattern_matches_the_keys_fnmatch_matches(glob: str) -> None:
    client = redis.Redis.from_url(shared_url())
    try:
        found = client.eval(MATCH, 0, lua_pattern(glob), *KEYS)
    finally:
        client.close()
    assert [k for k, hit in zip(KEYS, found, strict=True) if hit] == [
        k for k in KEYS if fnmatchcase(k, glob)
    ]
