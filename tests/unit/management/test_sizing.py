"""management/sizing: ``runworker``'s slots without ``--concurrency`` (ten, atomic jobs on
SQLite included) and the database connections its banner says a worker may
hold (a slot each, plus one per worker thread that touches the database)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any, cast

import pytest

from django_blamequeue import job
from django_blamequeue.backends import get_backend
from django_blamequeue.backends.base import Backend
from django_blamequeue.jobs import registry
from django_blamequeue.management.sizing import (
    DEFAULT_CONCURRENCY,
    Concurrency,
    ConnectionBound,
    connection_bound,
    default_concurrency,
)

_n = itertools.count()
#: Queues no other test registers jobs on: the registry is process-wide.
SERVED = "sizing-served"
OTHER = "sizing-other"
BASE_THREADS = ("consumer", "registry", "outbox relay")


@pytest.fixture
def register() -> Iterator[Callable[..., Any]]:
    """``register(queue, atomic=..., is_async=..., backend=...)``: a throwaway job."""
    made: list[str] = []

    def make(queue: str, *, is_async: bool = False, **options: Any) -> Any:
        name = f"tests.unit.sizing.{next(_n)}"
        made.append(name)

        def sync_handler(payload: Any) -> None:
            return None

        async def async_handler(payload: Any) -> None:
            return None

        return job(queue=queue, name=name, **options)(async_handler if is_async else sync_handler)

    yield make
    for name in made:
        registry.unregister(name)


def engine(*, listens: bool = False, effects_with_ack: bool = True) -> Backend:
    """The two flags ``connection_bound`` reads of a backend."""
    return cast(
        Backend, SimpleNamespace(supports_listen=listens, effects_with_ack=effects_with_ack)
    )


# -- default concurrency ---------------------------------------------------------------------
def test_a_worker_defaults_to_ten_slots(register: Callable[..., Any]) -> None:
    register(SERVED)
    assert DEFAULT_CONCURRENCY == 10
    assert default_concurrency(get_backend("default"), [SERVED]) == Concurrency(
        10, "default; --concurrency N to change"
    )


def test_atomic_jobs_on_sqlite_leave_the_worker_its_ten_slots(
    register: Callable[..., Any],
) -> None:
    """They take turns among themselves (worker/atomic_turns) instead of costing every other
    job its slot."""
    register(SERVED)
    register(SERVED, atomic=True)
    sizing = default_concurrency(get_backend("default"), [OTHER, SERVED])
    assert sizing == Concurrency(DEFAULT_CONCURRENCY, "default; --concurrency N to change")


# -- the connection bound --------------------------------------------------------------------
def test_a_worker_holds_a_connection_per_slot_and_one_per_worker_thread(
    register: Callable[..., Any],
) -> None:
    register(SERVED)
    bound = connection_bound(engine(), [SERVED], 10, sweeping=False)
    assert bound == ConnectionBound(10, BASE_THREADS)
    assert bound.total == 13
    assert bound.describe() == "≤ 13 per database (10 slots + consumer, registry, outbox relay)"


@pytest.mark.parametrize(
    ("listens", "sweeping", "extra"),
    [
        (True, False, ("listener",)),
        (False, True, ("sweeper",)),
        (True, True, ("listener", "sweeper")),
    ],
)
def test_a_listener_and_a_sweeper_each_hold_one_more(
    listens: bool, sweeping: bool, extra: tuple[str, ...]
) -> None:
    bound = connection_bound(engine(listens=listens), [SERVED], 4, sweeping=sweeping)
    assert bound.threads == (*BASE_THREADS, *extra)
    assert bound.total == 4 + len(BASE_THREADS) + len(extra)


def test_served_async_jobs_add_the_event_loops_connection(register: Callable[..., Any]) -> None:
    register(OTHER, is_async=True)
    assert "event loop" not in connection_bound(engine(), [SERVED], 4, sweeping=False).threads
    register(SERVED, is_async=True)
    assert connection_bound(engine(), [SERVED], 4, sweeping=False).threads == (
        *BASE_THREADS,
        "event loop",
    )


def test_atomic_jobs_add_the_effects_thread_only_where_the_ack_follows_the_commit(
    register: Callable[..., Any],
) -> None:
    register(SERVED, atomic=True)
    in_the_transaction = connection_bound(
        engine(effects_with_ack=True), [SERVED], 4, sweeping=False
    )
    assert "effects" not in in_the_transaction.threads
    after_commit = connection_bound(engine(effects_with_ack=False), [SERVED], 4, sweeping=False)
    assert after_commit.threads == (*BASE_THREADS, "effects")
