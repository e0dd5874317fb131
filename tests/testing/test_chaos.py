"""``run_jobs(chaos=...)`` and the ``blamequeue_chaos`` fixture: the delivery faults of an
at-least-once queue, played in the test's thread, so a handler's double effect shows in the
test's own assertions (docs/effects.md)."""

from __future__ import annotations

from typing import Any

import pytest

from django_blamequeue import ErrorCode, QueueError
from django_blamequeue.models import AuditEvent
from tests.procapp.models import Write
from tests.testing import jobs

pytestmark = pytest.mark.django_db


def writes(job_id: str) -> int:
    n: int = Write.objects.filter(job_id=job_id).count()
    return n


def test_a_naive_handler_shows_its_double_effect_under_every_fault(
    blamequeue_chaos: str, run_jobs: Any, jobs_enqueued: Any
) -> None:
    job_id = jobs.naive_charge.enqueue({"order": 1}).job_id
    report = run_jobs(chaos=blamequeue_chaos)
    assert writes(job_id) == 2
    [info] = jobs_enqueued(queue="chaos")
    assert info.state == "done"
    assert [a.chaos for a in report.of(job_id)].count(blamequeue_chaos) == 1


def test_an_atomic_handler_writes_once_under_every_fault(
    blamequeue_chaos: str, run_jobs: Any, jobs_enqueued: Any
) -> None:
    job_id = jobs.atomic_charge.enqueue({"order": 1}).job_id
    run_jobs(chaos=blamequeue_chaos)
    assert writes(job_id) == 1
    [info] = jobs_enqueued(queue="chaos")
    assert info.state == "done"


def test_an_idempotent_handler_writes_once_under_every_fault(
    blamequeue_chaos: str, run_jobs: Any
) -> None:
    job_id = jobs.idempotent_charge.enqueue({"order": 1}).job_id
    run_jobs(chaos=blamequeue_chaos)
    assert writes(job_id) == 1


def test_duplicate_delivers_each_job_twice_and_refuses_the_second_ack(run_jobs: Any) -> None:
    job_id = jobs.naive_charge.enqueue({}).job_id
    report = run_jobs(chaos="duplicate")
    assert [(a.attempt, a.state, a.chaos) for a in report.of(job_id)] == [
        (1, "done", None),
        (1, "lock_lost", "duplicate"),
    ]


def test_takeover_refuses_the_first_runs_ack_and_runs_the_job_again(run_jobs: Any) -> None:
    job_id = jobs.atomic_charge.enqueue({}).job_id
    report = run_jobs(chaos="takeover")
    assert [(a.attempt, a.state, a.chaos) for a in report.of(job_id)] == [
        (1, "lock_lost", "takeover"),
        (2, "done", None),
    ]
    lost = AuditEvent.objects.get(action="system.queue.lock_lost", job_id=job_id)
    assert lost.data == {"wanted": "done", "atomic": True, "rolled_back": True, "at": "commit"}
    assert list(Write.objects.filter(job_id=job_id).values_list("attempt", flat=True)) == [2]


def test_crash_before_ack_loses_the_ack_and_runs_the_job_again(run_jobs: Any) -> None:
    job_id = jobs.naive_charge.enqueue({}).job_id
    report = run_jobs(chaos="crash_before_ack")
    assert [(a.attempt, a.state, a.chaos) for a in report.of(job_id)] == [
        (1, "crashed", "crash_before_ack"),
        (2, "done", None),
    ]


def test_a_job_on_its_last_attempt_that_crashes_before_its_ack_fails_as_stalled(
    run_jobs: Any, jobs_enqueued: Any
) -> None:
    jobs.atomic_charge.enqueue({}, max_attempts=1)
    run_jobs(chaos="crash_before_ack")
    [info] = jobs_enqueued(queue="chaos")
    assert (info.state, info.reason) == ("failed", "stalled")
    assert Write.objects.count() == 0


def test_chaos_takes_only_the_three_faults(run_jobs: Any) -> None:
    with pytest.raises(QueueError) as caught:
        run_jobs(chaos="meteor")
    assert caught.value.code == ErrorCode.BAD_ARGUMENT


@pytest.mark.django_db(databases=["default", "postgres"])
def test_chaos_runs_on_postgresql_inside_the_tests_transaction(
    blamequeue_chaos: str,
) -> None:
    from tests.conftest import need_server

    need_server("postgres")
    from django_blamequeue.testing import capture_jobs

    with capture_jobs("postgres") as captured:
        naive = jobs.naive_charge.enqueue({}, backend="postgres").job_id
        atomic = jobs.atomic_charge.enqueue({}, backend="postgres").job_id
        captured.run_jobs(chaos=blamequeue_chaos)
    counts = {j: Write.objects.using("postgres").filter(job_id=j).count() for j in (naive, atomic)}
    assert counts == {naive: 2, atomic: 1}


def test_an_atomic_handler_that_dooms_its_transaction_fails_instead_of_completing(
    run_jobs: Any, jobs_enqueued: Any
) -> None:
    from django.db import transaction

    from django_blamequeue import job
    from django_blamequeue.jobs import registry

    @job(queue="doomed", name="tests.testing.doomed", atomic=True, max_attempts=1)
    def doomed(payload: Any) -> None:
        transaction.set_rollback(True)

    try:
        doomed.enqueue({})
        run_jobs()
    finally:
        registry.unregister("tests.testing.doomed")
    [info] = jobs_enqueued(queue="doomed")
    assert info.state == "failed"
    assert info.error == "RuntimeError: the handler marked the run's transaction for rollback"


def test_a_hook_runs_once_per_transition_even_when_a_delivery_repeats(
    blamequeue_chaos: str, run_jobs: Any
) -> None:
    jobs.HOOKED.clear()
    done = jobs.hooked.enqueue({}).job_id
    failed = jobs.hooked_fail.enqueue({}).job_id
    run_jobs(chaos=blamequeue_chaos)
    # the refused ack of a duplicate or of a taken-over run notifies nothing, and a crash
    # before the ack skips its run's: one hook for each job's one end
    assert [kind for kind, job_id, _ in jobs.HOOKED if job_id == done] == ["success"]
    assert [(kind, n) for kind, job_id, n in jobs.HOOKED if job_id == failed] == [("failure", 2)]
