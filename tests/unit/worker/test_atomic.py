"""worker/atomic.sqlite_contention: why the atomic jobs a worker serves contend on SQLite's
one writer (``blamequeue.W020``, the runworker warning and its one-slot default), or None."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from django_blamequeue import job
from django_blamequeue.backends import get_backend
from django_blamequeue.jobs import registry
from django_blamequeue.worker.atomic import sqlite_contention

_n = itertools.count()
Q = "atomic-contention"


@pytest.fixture
def atomic_job() -> Iterator[Callable[..., str]]:
    """``atomic_job(stem, queue=Q, **options)``: a throwaway ``@job(atomic=True)``."""
    made: list[str] = []

    def make(stem: str, queue: str = Q, **options: Any) -> str:
        name = f"tests.unit.atomic.{stem}.{next(_n)}"
        made.append(name)

        def handler(payload: Any) -> None:
            return None

        job(queue=queue, name=name, atomic=True, **options)(handler)
        return name

    yield make
    for name in made:
        registry.unregister(name)


def test_atomic_jobs_on_sqlite_with_more_than_one_slot_contend(
    atomic_job: Callable[..., str],
) -> None:
    name = atomic_job("report")
    why = sqlite_contention(get_backend("default"), [Q], 4)
    assert why == (
        f"atomic jobs ({name}) run on SQLite database 'default' with concurrency 4: "
        "each holds the write lock while its handler runs, so the other slots wait for it"
    )


def test_the_reason_names_three_jobs_at_most(atomic_job: Callable[..., str]) -> None:
    names = sorted(atomic_job(stem) for stem in ("a", "b", "c", "d"))
    why = sqlite_contention(get_backend("default"), [Q], 2)
    assert why is not None and f"({', '.join(names[:3])} …)" in why


def test_one_slot_or_no_atomic_job_served_is_no_contention(
    atomic_job: Callable[..., str],
) -> None:
    atomic_job("elsewhere", queue="atomic-not-served")
    atomic_job("other-backend", backend="postgres")
    assert sqlite_contention(get_backend("default"), [Q, "atomic-not-served"], 1) is None
    assert sqlite_contention(get_backend("default"), [Q], 8) is None
