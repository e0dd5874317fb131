"""A worker whose lease was taken over cannot ack (LOCK_LOST) and changes nothing.

First through the backend verbs, 100 times over, moving the database's time forward instead of
waiting for it; then with a real worker process frozen (SIGSTOP) past its lease while another
worker takes the job over, and thawed (SIGCONT) to try its late ack.
"""

from __future__ import annotations

import signal
import time
from datetime import timedelta
from typing import Any

import pytest

from django_blamequeue import audit, queue
from django_blamequeue.backends import get_backend
from django_blamequeue.core.records import Ack, Transition
from django_blamequeue.core.states import State
from django_blamequeue.models import AuditEvent, Job
from tests.procapp.jobs import QUEUE
from tests.procapp.models import SideEffect

from .conftest import Processes, Report, engine, redeliveries, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, databases="__all__")]

RUNS = 100


def row(db: str, job_id: str) -> dict[str, Any]:
    return dict(Job.objects.using(db).filter(id=job_id).values().get())


def test_a_stale_token_is_refused_by_every_verb_and_changes_nothing(
    backend: str, report: Report
) -> None:
    b = get_backend(backend)
    done = Transition(state=State.DONE)
    refused = 0
    start = time.monotonic()
    for i in range(RUNS):
        job_id = queue.enqueue(QUEUE, {"i": i}, name="procapp.effect", backend=backend).job_id
        now = b.now()
        [first] = b.claim([QUEUE], 1, 30, now=now)
        later = now + timedelta(seconds=31)  # past the first lease
        assert b.rescue_expired(now=later, max_stalled=5).repended == 1
        [second] = b.claim([QUEUE], 1, 30, now=later)
        assert (second.job_id, second.attempt) == (job_id, 2) and second.token != first.token
        before = row(backend, job_id)

        [ack] = b.apply_many([Ack(job_id=job_id, token=first.token, transition=done)], now=later)
        extended = b.extend_lease(job_id, first.token, 60, now=later)
        lost = b.renew_leases([(job_id, first.token)], 60, now=later)
        progressed = b.set_progress(job_id, first.token, 50)
        signals = b.lease_signals([(job_id, first.token)])

        if (
            not ack.ok
            and not extended
            and lost == {job_id}
            and not progressed
            and signals.lost == {job_id}
            and row(backend, job_id) == before
        ):
            refused += 1
        [fresh] = b.apply_many([Ack(job_id=job_id, token=second.token, transition=done)], now=later)
        assert fresh.ok and fresh.state == State.DONE
    lock_lost = AuditEvent.objects.using(backend).filter(action=audit.LOCK_LOST).count()
    report(
        f"stale-ack[{engine(backend)}]",
        refused=f"{refused} of {RUNS}",
        lock_lost_audited=lock_lost,
        s=time.monotonic() - start,
    )
    assert refused == RUNS
    assert lock_lost == RUNS


def test_a_frozen_worker_thawed_after_a_takeover_changes_nothing(
    backend: str, processes: Processes, report: Report
) -> None:
    b = get_backend(backend)
    args = ("--concurrency", "1", "--lease", "2", "--no-sweep", "--poll", "0.2")
    stale = processes.worker(backend, *args)
    stale.wait_started()
    job_id = queue.enqueue(
        QUEUE, {"sleep": 1.0}, name="procapp.effect", backend=backend, max_attempts=5
    ).job_id
    wait_for(lambda: row(backend, job_id)["state"] == "inflight", 30, "the first worker's claim")
    stale.signal(signal.SIGSTOP)
    frozen_at = time.monotonic()
    expires = row(backend, job_id)["lease_expires_at"]
    wait_for(lambda: b.now() > expires, 10, "the frozen worker's lease to expire")
    wait_for(lambda: b.rescue_expired(max_stalled=5).repended == 1, 10, "the rescue")

    taker = processes.worker(backend, *args)
    wait_for(lambda: row(backend, job_id)["state"] == "done", 30, "the takeover")
    before = row(backend, job_id)
    stale.signal(signal.SIGCONT)
    frozen_for = time.monotonic() - frozen_at
    wait_for(
        lambda: "ack refused" in stale.stderr() or "lost the lease" in stale.stderr(),
        15,
        "the thawed worker to notice its lease is gone",
    )
    after = row(backend, job_id)
    effect = SideEffect.objects.using(backend).get(job_id=job_id)
    how = "ack refused" if "ack refused" in stale.stderr() else "run abandoned"
    report(
        f"frozen-worker[{engine(backend)}]",
        frozen=f"{frozen_for:.1f} s (lease 2 s)",
        taken_over_by="another worker",
        stale_worker=how,
        job="unchanged",
    )
    assert after == before
    assert (after["state"], after["attempts"]) == ("done", 2)
    assert effect.pid == taker.pid and redeliveries(backend) == []
    assert stale.alive() and taker.alive()
    assert stale.stop() == 0 and taker.stop() == 0
