"""The rules of unique jobs (``core/unique.py``): specs, keys, and when a holder holds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from uuid import UUID

import pytest

from django_blamequeue.core import unique
from django_blamequeue.core.unique import Unique
from django_blamequeue.exceptions import ErrorCode, QueueError

NOW = datetime(2030, 1, 1, tzinfo=UTC)


def test_the_default_spec_skips_while_waiting_or_running() -> None:
    spec = unique.spec(True)
    assert spec is not None and spec.on_conflict == "skip"
    assert spec.states == ("blocked", "inflight", "pending", "waiting_children")


def test_a_window_adds_done_and_replace_and_debounce_give_the_key_up_at_the_start() -> None:
    assert unique.spec({"window": 60}).states == (  # type: ignore[union-attr]
        "blocked",
        "done",
        "inflight",
        "pending",
        "waiting_children",
    )
    assert unique.spec({"on_conflict": "replace"}).states == ("blocked", "pending")  # type: ignore[union-attr]
    debounce = unique.spec(Unique(on_conflict="debounce", window=5))
    assert debounce is not None and debounce.states == ("blocked", "pending")
    lock = debounce.lock("n", "q", {})
    assert lock is not None and (lock.window, lock.delay) == (None, 5.0)


@pytest.mark.parametrize(
    "value",
    [
        {"on_conflict": "ignore"},
        {"window": 0},
        {"window": float("nan")},
        {"on_conflict": "debounce"},
        {"until": "end"},
        {"until": "start", "states": ["waiting"]},
        {"states": ["queued"]},
        {"states": []},
        {"key": ""},
        {"key": "x" * 256},
        {"colour": "red"},
        "yes",
    ],
)
def test_a_bad_spec_is_refused_with_bad_argument(value: object) -> None:
    with pytest.raises(QueueError) as err:
        unique.spec(value)
    assert err.value.code == ErrorCode.BAD_ARGUMENT


def test_the_derived_key_is_the_name_and_a_hash_of_canonical_json() -> None:
    a = unique.derived_key("send", {"b": 1, "a": [1, 2.5], "when": datetime(2030, 1, 1)})
    b = unique.derived_key("send", {"when": datetime(2030, 1, 1), "a": [1, 2.5], "b": 1})
    assert a == b and a.startswith("send:") and len(a) == len("send:") + 32
    # Pinned: the same bytes in every process and Python version.
    assert unique.canonical_json({"b": Decimal("1.5"), "a": UUID(int=1)}) == (
        b'{"a":"00000000-0000-0000-0000-000000000001","b":"1.5"}'
    )
    assert unique.derived_key("send", {"a": 1}) != unique.derived_key("other", {"a": 1})
    with pytest.raises(QueueError):
        unique.derived_key("send", {"x": object()})


def test_a_key_callable_and_per_queue_make_the_stored_key() -> None:
    spec = unique.spec(Unique(key=lambda p: p.get("user"), per_queue=True))
    assert spec is not None
    lock = spec.lock("n", "emails", {"user": "7"})
    assert lock is not None and lock.key == "emails:7"
    assert spec.lock("n", "emails", {}) is None  # None from the callable: not unique


def test_a_holder_holds_while_its_state_counts_and_its_window_lasts() -> None:
    states = unique.encode_states(["pending", "inflight"])
    assert unique.holds("pending", states, None, NOW)
    assert not unique.holds("done", states, None, NOW)
    assert unique.holds("inflight", states, NOW + timedelta(seconds=1), NOW)
    assert not unique.holds("inflight", states, NOW, NOW)
    assert not unique.holds("pending", None, None, NOW)  # taken over
