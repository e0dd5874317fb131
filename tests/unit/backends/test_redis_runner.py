"""``ScriptRunner``: the redis backend's client is made on first use, once, and closing the
runner drops it (and the scripts registered on it) so the next call connects afresh."""

from __future__ import annotations

from django_blamequeue.backends.redis.keys import Keys
from django_blamequeue.backends.redis.runner import ScriptRunner


def runner() -> ScriptRunner:
    options = {"URL": "redis://127.0.0.1:9/0"}  # never reached: no command is sent
    return ScriptRunner("fast", options, Keys("unit"), "default")


def test_the_client_is_made_on_first_use_and_kept() -> None:
    r = runner()
    assert r._client is None
    first = r.client
    assert r.client is first


def test_closing_drops_the_client_and_the_next_use_makes_a_new_one() -> None:
    r = runner()
    first = r.client
    r.close()
    assert r._client is None and r.client is not first
