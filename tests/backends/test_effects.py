"""What atomic runs do that is specific to one engine's locking (docs/effects.md).

PostgreSQL: the handler's transaction locks the job's row only at its fenced ack, at the very
end, so the worker's lease renewals (another connection) go on meanwhile, and the handler's
progress is written outside its transaction (else its row lock would block them).
SQLite: the transaction holds the write lock from BEGIN IMMEDIATE; nobody else writes until
it ends, so nobody can take the job over meanwhile either.
"""

from __future__ import annotations

import io
import itertools
import re
import threading
import time
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from django.core.management import call_command

from django_blamequeue import current_job, queue
from django_blamequeue.backends import get_backend
from django_blamequeue.jobs import registry
from django_blamequeue.models import Job
from django_blamequeue.testing import wait_until
from tests.conftest import need_server

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


@pytest.fixture
def slow_atomic() -> Any:
    started, release = threading.Event(), threading.Event()

    @registry.job(queue="slow-atomic", name="tests.backends.slow_atomic", atomic=True)
    def slow(payload: Any) -> str:
        ctx = current_job()
        Job.objects.using(ctx.backend.effects_database).filter(id="nothing").update(priority=1)
        ctx.progress(40)
        started.set()
        assert release.wait(20)
        return "done"

    yield SimpleNamespace(enqueue=slow.enqueue, started=started, release=release)
    release.set()
    registry.unregister("tests.backends.slow_atomic")


def test_on_postgresql_an_open_atomic_run_is_renewed_and_its_progress_is_visible(
    slow_atomic: Any,
) -> None:
    need_server("postgres")
    job_id = slow_atomic.enqueue({}, backend="postgres").job_id
    queue.consume("slow-atomic", backend="postgres", lease=1, poll_interval=0.05)
    assert slow_atomic.started.wait(15)
    row = Job.objects.using("postgres").filter(id=job_id)
    first = row.values_list("lease_expires_at", flat=True).get()
    assert row.values_list("progress", flat=True).get() == 40  # committed outside the run
    assert wait_until(lambda: row.values_list("lease_expires_at", flat=True).get() > first, 5)
    slow_atomic.release.set()
    assert wait_until(lambda: row.values_list("state", flat=True).get() == "done", 10)


def test_on_sqlite_an_open_atomic_run_holds_the_write_lock_so_no_rescue_can_take_it(
    slow_atomic: Any,
) -> None:
    b = get_backend("default")
    job_id = slow_atomic.enqueue({}, backend="default").job_id
    queue.consume("slow-atomic", backend="default", lease=1, poll_interval=0.05)
    assert slow_atomic.started.wait(15)
    later = b.now() + timedelta(seconds=5)  # past the 1 s lease (not renewed meanwhile)
    rescued: list[Any] = []
    rescuer = threading.Thread(target=lambda: rescued.append(b.rescue_expired(later)))
    rescuer.start()
    rescuer.join(0.5)
    assert rescuer.is_alive(), "the rescue should wait for the handler's write lock"
    slow_atomic.release.set()
    rescuer.join(30)
    assert rescued and (rescued[0].repended, rescued[0].failed) == (0, 0)
    info = queue.get_job(job_id, backend="default")
    assert info is not None and (info.state, info.attempts, info.result) == ("done", 1, "done")


Span = tuple[float, float]


def drain_turns(plain: int, plain_seconds: float, *args: str) -> tuple[str, list[Span], list[Span]]:
    """Four atomic jobs of 0.1 s (timeout 0.25 s), then ``plain`` plain ones, on one queue,
    drained by ``runworker turns --burst *args``: its output and each kind's run spans."""
    spans: dict[str, list[Span]] = {"atomic": [], "plain": []}
    lock = threading.Lock()

    def spanned(kind: str, seconds: float) -> None:
        start = time.monotonic()
        time.sleep(seconds)
        with lock:
            spans[kind].append((start, time.monotonic()))

    # Four in one batch: without turns the last would wait 0.3 s, past its timeout.
    @registry.job(queue="turns", name="tests.backends.turns.ledger", atomic=True, timeout=0.25)
    def ledger(payload: Any) -> None:
        ctx = current_job()
        Job.objects.using(ctx.backend.effects_database).filter(id="nothing").update(priority=1)
        spanned("atomic", 0.1)

    @registry.job(queue="turns", name="tests.backends.turns.email")
    def email(payload: Any) -> None:
        spanned("plain", plain_seconds)

    try:
        ledger.enqueue_many([{}] * 4)  # first in claim order
        email.enqueue_many([{}] * plain)
        out = io.StringIO()
        call_command("runworker", "turns", "--burst", "--no-sweep", *args, stdout=out)
    finally:
        registry.unregister("tests.backends.turns.ledger")
        registry.unregister("tests.backends.turns.email")
    return out.getvalue(), sorted(spans["atomic"]), sorted(spans["plain"])


def test_on_sqlite_atomic_runs_take_turns_while_other_jobs_keep_their_slots() -> None:
    """``runworker`` keeps its ten slots for one queue mixing both: the atomic runs never
    overlap one another, each one's timeout counts from its turn, and the plain ones run side
    by side."""
    text, atomic, plain = drain_turns(4, 0.3)
    assert re.search(r"^  concurrency +10 \(default", text, re.M), text
    assert (
        "atomic jobs     tests.backends.turns.ledger: one at a time (SQLite writes one "
        "transaction at a time); the other jobs keep every slot"
    ) in text
    assert "burst finished: done 8 · retried 0 · failed 0" in text, text
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in itertools.pairwise(atomic))
    assert max(start for start, _ in plain) < min(end for _, end in plain)  # all at once


def test_on_sqlite_atomic_runs_waiting_their_turn_hold_no_slot() -> None:
    """Four slots, and the first claim takes the four atomic jobs: one runs, three wait, and
    the three plain jobs behind them start at once in the slots the waiting ones leave."""
    text, atomic, plain = drain_turns(3, 0.15, "--concurrency", "4")
    assert re.search(r"^  concurrency +4 \(--concurrency\)$", text, re.M), text
    assert "burst finished: done 7 · retried 0 · failed 0" in text, text
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in itertools.pairwise(atomic))
    assert max(start for start, _ in plain) < min(end for _, end in plain)  # all at once
    assert max(start for start, _ in plain) < atomic[1][0]  # before the second atomic's turn
