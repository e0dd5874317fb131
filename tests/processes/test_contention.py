"""Many claimers and many enqueuers at once: claims stay within their batch and never
overlap; one dedupe key makes one row."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connections

from django_blamequeue import queue
from django_blamequeue.backends import get_backend
from django_blamequeue.models import Job
from tests.procapp.jobs import QUEUE

from .conftest import Report, engine

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, databases="__all__")]


def run_threads(n: int, target: Callable[[], Any]) -> list[BaseException]:
    """Start ``n`` threads on one barrier; answer what they raised."""
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            barrier.wait(timeout=30)
            target()
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread did not finish"
    return errors


def test_concurrent_claimers_get_at_most_their_batch_and_never_the_same_job(
    backend: str, report: Report
) -> None:
    """SKIP LOCKED under ``IN (subquery) LIMIT`` can lock more rows than the limit; the
    claim is a CTE. On SQLite the claim is one write transaction, serialised."""
    n_jobs, claimers, batch = 1_000, 8, 10
    queue.enqueue_many(
        QUEUE, [{"i": i} for i in range(n_jobs)], name="procapp.effect", backend=backend
    )
    b = get_backend(backend)
    sizes: list[int] = []
    ids: list[str] = []
    lock = threading.Lock()

    def claim_until_empty() -> None:
        while got := b.claim([QUEUE], batch, 60):
            with lock:
                sizes.append(len(got))
                ids.extend(c.job_id for c in got)

    start = time.monotonic()
    errors = run_threads(claimers, claim_until_empty)
    elapsed = time.monotonic() - start
    assert errors == []
    twice = len(ids) - len(set(ids))
    report(
        f"claims[{engine(backend)}]",
        claimers=claimers,
        jobs=n_jobs,
        claims=len(sizes),
        largest=max(sizes),
        ids_twice=twice,
        s=elapsed,
    )
    assert max(sizes) <= batch
    assert twice == 0 and len(ids) == n_jobs
    rows = Job.objects.using(backend).filter(queue=QUEUE)
    assert rows.filter(state="inflight", attempts=1).count() == n_jobs


def test_fifty_threads_enqueueing_one_dedupe_key_make_one_row(backend: str, report: Report) -> None:
    answers: list[Any] = []
    lock = threading.Lock()

    def enqueue() -> None:
        got = queue.enqueue(
            QUEUE, {"n": 1}, name="procapp.effect", dedupe_key="the-one", backend=backend
        )
        with lock:
            answers.append(got)

    start = time.monotonic()
    errors = run_threads(50, enqueue)
    elapsed = time.monotonic() - start
    assert errors == []
    rows = Job.objects.using(backend).filter(queue=QUEUE, dedupe_key="the-one")
    fresh = [a for a in answers if not a.deduplicated]
    report(
        f"dedupe[{engine(backend)}]",
        threads=50,
        rows=rows.count(),
        answered_deduplicated=len(answers) - len(fresh),
        s=elapsed,
    )
    assert rows.count() == 1
    assert len(answers) == 50 and len(fresh) == 1
    assert {a.job_id for a in answers} == {rows.get().id}
