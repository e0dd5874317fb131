"""Weighted shares between concurrency keys (rule: shares), counted by the engine across every
claim, on every backend: two backlogged keys of weights 5 and 1 split the queue's slots 5:1, a
lone key takes them all, and a freed slot goes to the key furthest below its share.

The queue's slots are its ``concurrency`` here, so the split is exact whatever order SQS
delivers messages in (``claims`` claims in a loop with a deadline, as the control tests do)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from django_blamequeue import ErrorCode, QueueError, QueueLimits, queue
from django_blamequeue.backends.base import Backend

from .support import audit_rows, succeed
from .test_control import claims, settled_empty, short_hold  # noqa: F401 (the fixture)

WEIGHTS = {"enterprise:*": 5}


def backlog(backend: str, n: int, *keys: str) -> None:
    for key in keys:
        queue.enqueue_many("reports", list(range(n)), concurrency_key=key, backend=backend)


def split(got: list[Any]) -> Counter[str | None]:
    return Counter(c.concurrency_key for c in got)


def test_two_backlogged_keys_share_the_queues_slots_by_weight(
    backend: str, engine: Backend
) -> None:
    backlog(backend, 15, "free:bob", "enterprise:acme")
    queue.set_limits("reports", concurrency=6, key_weights=WEIGHTS, backend=backend)
    got = claims(engine, "reports", want=6)
    assert split(got) == {"enterprise:acme": 5, "free:bob": 1}
    assert settled_empty(engine, "reports")


def test_a_freed_slot_goes_to_the_key_furthest_below_its_share(
    backend: str, engine: Backend
) -> None:
    backlog(backend, 15, "free:bob", "enterprise:acme")
    queue.set_limits("reports", concurrency=6, key_weights=WEIGHTS, backend=backend)
    got = claims(engine, "reports", want=6)
    succeed(engine, next(c for c in got if c.concurrency_key == "free:bob"))
    (again,) = claims(engine, "reports", want=1)
    assert again.concurrency_key == "free:bob"
    succeed(engine, next(c for c in got if c.concurrency_key == "enterprise:acme"))
    (then,) = claims(engine, "reports", want=1)
    assert then.concurrency_key == "enterprise:acme"


def test_a_lone_key_takes_every_slot_whatever_its_weight(backend: str, engine: Backend) -> None:
    backlog(backend, 10, "free:bob")
    queue.set_limits("reports", concurrency=6, key_weights=WEIGHTS, backend=backend)
    got = claims(engine, "reports", want=6)
    assert split(got) == {"free:bob": 6}


def test_jobs_without_a_key_share_as_one_key_of_weight_one(backend: str, engine: Backend) -> None:
    queue.enqueue_many("reports", list(range(15)), backend=backend)
    backlog(backend, 15, "enterprise:acme")
    queue.set_limits("reports", concurrency=6, key_weights=WEIGHTS, backend=backend)
    got = claims(engine, "reports", want=6)
    assert split(got) == {"enterprise:acme": 5, None: 1}


def test_settings_weights_hold_and_live_ones_replace_them(backend: str, engine: Backend) -> None:
    backlog(backend, 15, "free:bob", "enterprise:acme")
    defaults = QueueLimits(concurrency=4, key_weights=(("free:*", 3),))
    got = claims(engine, "reports", want=4, limits=defaults)
    assert split(got) == {"free:bob": 3, "enterprise:acme": 1}
    limits = queue.set_limits("reports", concurrency=4, key_weights=WEIGHTS, backend=backend)
    assert queue.get_limits("reports", backend=backend).key_weights == (("enterprise:*", 5),)
    assert "weights enterprise:*=5" in limits.describe()
    for c in got:
        succeed(engine, c)
    assert split(claims(engine, "reports", want=4, limits=defaults)) == {
        "enterprise:acme": 3,
        "free:bob": 1,
    }


@pytest.mark.parametrize("bad", [{"": 5}, {"a:*": 0}, {"a:*": 1.5}, "a:*=5"], ids=repr)
def test_bad_key_weights_are_refused_with_bad_key_weight_and_write_nothing(
    backend: str, engine: Backend, bad: Any
) -> None:
    with pytest.raises(QueueError) as info:
        queue.set_limits("reports", key_weights=bad, backend=backend)
    assert info.value.code == ErrorCode.BAD_KEY_WEIGHT
    assert engine.controls() == {}
    assert not audit_rows(engine).exists()
