"""The decisions of ``slot_connections`` on one thread's connections: kept,
closed, back to the pool, pinged after idling (the conformance suite proves them on real
SQLite and PostgreSQL connections; this covers the pool, which needs psycopg_pool)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from django_blamequeue.worker import slot_db


class FakeConnection:
    def __init__(self, *, pool: bool = False, usable: bool = True) -> None:
        self.alias = "fake"
        self.settings_dict: dict[str, Any] = {"OPTIONS": {"pool": True} if pool else {}}
        self.connection: object | None = object()
        self.in_atomic_block = False
        self.autocommit = True
        self.errors_occurred = False
        self.usable = usable
        self.closed = 0

    def get_autocommit(self) -> bool:
        return self.autocommit

    def is_usable(self) -> bool:
        return self.usable

    def close(self) -> None:
        self.closed += 1
        self.connection = None


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[FakeConnection]]:
    made: list[FakeConnection] = []

    class Handler:
        def all(self, initialized_only: bool = False) -> list[FakeConnection]:
            return made

    monkeypatch.setattr(slot_db, "connections", Handler())
    yield made


def test_a_plain_connection_is_kept_after_a_job(fakes: list[FakeConnection]) -> None:
    fakes.append(FakeConnection())
    slot_db.after_job(interrupted=False)
    assert fakes[0].closed == 0


def test_a_pooled_connection_goes_back_to_the_pool_after_every_job(
    fakes: list[FakeConnection],
) -> None:
    fakes.append(FakeConnection(pool=True))
    slot_db.after_job(interrupted=False)
    assert fakes[0].closed == 1


@pytest.mark.parametrize(
    "spoil",
    [
        lambda c: setattr(c, "errors_occurred", True),
        lambda c: setattr(c, "autocommit", False),
        lambda c: None,  # interrupted
    ],
    ids=["database error", "transaction left open", "interrupted"],
)
def test_a_connection_that_cannot_be_trusted_is_closed(
    fakes: list[FakeConnection], spoil: Any
) -> None:
    c = FakeConnection()
    fakes.append(c)
    spoil(c)
    interrupted = not c.errors_occurred and c.autocommit
    slot_db.after_job(interrupted=interrupted)
    assert c.closed == 1


def test_an_idle_connection_is_pinged_before_the_next_job_and_closed_if_dead(
    fakes: list[FakeConnection], monkeypatch: pytest.MonkeyPatch
) -> None:
    alive, dead = FakeConnection(), FakeConnection(usable=False)
    fakes += [alive, dead]
    clock = [1000.0]
    monkeypatch.setattr(slot_db.time, "monotonic", lambda: clock[0])
    slot_db.after_job(interrupted=False)
    clock[0] += slot_db.IDLE_CHECK / 2
    slot_db.before_job()  # recently used: not pinged
    assert (alive.closed, dead.closed) == (0, 0)
    clock[0] += slot_db.IDLE_CHECK + 1
    slot_db.before_job()
    assert (alive.closed, dead.closed) == (0, 1)
