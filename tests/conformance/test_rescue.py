"""Crashes: the sweeper re-pends expired leases (stall + 1); a crash keeps the attempt;
past MAX_STALLED_COUNT the job fails as ``stalled``; the stale worker's late ack is LOCK_LOST."""

from __future__ import annotations

from django_blamequeue import queue
from django_blamequeue.audit import DLQ_WRITE, LOCK_LOST, STALLED
from django_blamequeue.backends.base import Backend
from django_blamequeue.conf import get_settings
from django_blamequeue.core.records import RescueReport
from django_blamequeue.sweeper.rescuer import Rescuer
from django_blamequeue.testing import capture_events

from .support import claim_one, later, row, succeed


def rescuer(engine: Backend) -> Rescuer:
    return Rescuer(engine, max_stalled=get_settings().max_stalled_count)


def test_the_default_max_stalled_count_is_one() -> None:
    assert get_settings().max_stalled_count == 1


def test_an_expired_lease_is_re_pended_with_stall_plus_one(backend: str, engine: Backend) -> None:
    job_id = queue.enqueue("crash", {}, max_attempts=3, backend=backend).job_id
    t = later(engine, 0)
    claim_one(engine, "crash", lease=30, now=t)
    with capture_events() as events:
        report = rescuer(engine).run_once(later(engine, 31, t))
    assert report == RescueReport(repended=1)
    r = row(engine, job_id)
    assert (r["state"], r["stalls"], r["lease_expires_at"], r["reason"]) == (
        "pending",
        1,
        None,
        "stalled",
    )
    assert [(e.action, e.job_id, e.data["to"]) for e in events.of(STALLED)] == [
        (STALLED, job_id, "pending")
    ]


def test_a_crash_does_not_give_the_attempt_back(backend: str, engine: Backend) -> None:
    job_id = queue.enqueue("crash", {}, max_attempts=3, backend=backend).job_id
    t = later(engine, 0)
    claim_one(engine, "crash", lease=30, now=t)
    rescuer(engine).run_once(later(engine, 31, t))
    assert row(engine, job_id)["attempts"] == 1
    again = claim_one(engine, "crash", now=later(engine, 32, t))
    assert again.attempt == 2


def test_a_crash_on_the_last_attempt_fails_the_job(backend: str, engine: Backend) -> None:
    job_id = queue.enqueue("crash", {}, max_attempts=1, backend=backend).job_id
    t = later(engine, 0)
    claim_one(engine, "crash", lease=30, now=t)
    assert rescuer(engine).run_once(later(engine, 31, t)) == RescueReport(failed=1)
    info = queue.get_job(job_id, backend=backend)
    assert info is not None and (info.state, info.reason, info.attempts) == ("failed", "stalled", 1)


def test_past_max_stalled_count_a_job_that_stalled_alone_fails_with_reason_stalled(
    backend: str, engine: Backend
) -> None:
    job_id = queue.enqueue("crash", {}, max_attempts=5, backend=backend).job_id
    t = later(engine, 0)
    claim_one(engine, "crash", lease=30, now=t)
    assert rescuer(engine).run_once(later(engine, 31, t)) == RescueReport(repended=1)
    again = claim_one(engine, "crash", lease=30, now=later(engine, 32, t))
    assert again.stalls == 1  # on probation: its worker runs it alone
    assert engine.run_alone(again.job_id, again.token)
    with capture_events() as events:
        assert rescuer(engine).run_once(later(engine, 63, t)) == RescueReport(failed=1)
    info = queue.get_job(job_id, backend=backend)
    assert info is not None
    assert (info.state, info.reason, info.stalls, info.attempts) == ("failed", "stalled", 2, 2)
    assert info.error and "lease expired" in info.error
    assert info.finished_at is not None
    assert [e.action for e in events.events] == [STALLED, DLQ_WRITE]
    assert queue.dlq_size("crash", backend=backend) == 1


def test_a_higher_max_stalled_count_tolerates_more_stalls(backend: str, engine: Backend) -> None:
    job_id = queue.enqueue("crash", {}, max_attempts=5, backend=backend).job_id
    t = later(engine, 0)
    for n in range(3):
        c = claim_one(engine, "crash", lease=30, now=later(engine, 100 * n, t))
        assert engine.run_alone(c.job_id, c.token)
        report = Rescuer(engine, max_stalled=3).run_once(later(engine, 100 * n + 31, t))
        assert report == RescueReport(repended=1)
    assert row(engine, job_id)["stalls"] == 3


def test_past_max_stalled_count_a_stall_in_company_puts_the_job_back_to_pending(
    backend: str, engine: Backend
) -> None:
    """A worker running several jobs died: nobody can tell which one killed it, so none of
    them is dead-lettered for it; each will run alone next (``core.lifecycle.on_probation``)."""
    job_id = queue.enqueue("crash", {}, max_attempts=5, backend=backend).job_id
    t = later(engine, 0)
    for n in range(3):
        claim_one(engine, "crash", lease=30, now=later(engine, 100 * n, t))
        assert rescuer(engine).run_once(later(engine, 100 * n + 31, t)) == RescueReport(repended=1)
    r = row(engine, job_id)
    assert (r["state"], r["stalls"], r["attempts"]) == ("pending", 3, 3)


def test_a_lease_marked_alone_earlier_does_not_count_for_a_later_lease(
    backend: str, engine: Backend
) -> None:
    job_id = queue.enqueue("crash", {}, max_attempts=5, backend=backend).job_id
    t = later(engine, 0)
    first = claim_one(engine, "crash", lease=30, now=t)
    assert engine.run_alone(first.job_id, first.token)
    assert rescuer(engine).run_once(later(engine, 31, t)) == RescueReport(repended=1)
    claim_one(engine, "crash", lease=30, now=later(engine, 32, t))  # in company this time
    assert rescuer(engine).run_once(later(engine, 63, t)) == RescueReport(repended=1)
    assert row(engine, job_id)["state"] == "pending"


def test_marking_a_lease_alone_is_fenced_by_its_token(backend: str, engine: Backend) -> None:
    job_id = queue.enqueue("crash", {}, backend=backend).job_id
    c = claim_one(engine, "crash")
    before = row(engine, job_id)
    assert not engine.run_alone(job_id, "0" * 32)
    assert not engine.run_alone("01NOSUCHJOB0000000000000000"[:26], c.token)
    assert row(engine, job_id) == before
    assert engine.run_alone(job_id, c.token)
    assert succeed(engine, c).state == "done"
    assert not engine.run_alone(job_id, c.token)  # no longer held


def test_rescue_leaves_a_live_lease_alone(backend: str, engine: Backend) -> None:
    job_id = queue.enqueue("crash", {}, backend=backend).job_id
    t = later(engine, 0)
    claim_one(engine, "crash", lease=30, now=t)
    before = row(engine, job_id)
    with capture_events() as events:
        assert rescuer(engine).run_once(later(engine, 29, t)) == RescueReport()
        assert rescuer(engine).run_once() == RescueReport()  # the engine's own clock
    assert row(engine, job_id) == before
    assert events.events == []


def test_rescue_ignores_jobs_that_are_not_inflight(backend: str, engine: Backend) -> None:
    done_id = queue.enqueue("crash", {}, backend=backend).job_id
    succeed(engine, claim_one(engine, "crash"))
    pending_id = queue.enqueue("crash", {}, backend=backend).job_id
    before = [row(engine, done_id), row(engine, pending_id)]
    assert rescuer(engine).run_once(later(engine, 3600)) == RescueReport()
    assert [row(engine, done_id), row(engine, pending_id)] == before


def test_the_stale_workers_ack_after_a_rescue_and_reclaim_is_lock_lost(
    backend: str, engine: Backend
) -> None:
    job_id = queue.enqueue("crash", {}, max_attempts=3, backend=backend).job_id
    t = later(engine, 0)
    stale = claim_one(engine, "crash", lease=30, now=t)
    rescuer(engine).run_once(later(engine, 31, t))
    fresh = claim_one(engine, "crash", lease=30, now=later(engine, 32, t))
    assert fresh.token != stale.token
    before = row(engine, job_id)
    with capture_events() as events:
        late = succeed(engine, stale, now=later(engine, 33, t))
    assert (late.ok, late.state) == (False, None)
    assert row(engine, job_id) == before
    assert [e.action for e in events.events] == [LOCK_LOST]
    assert succeed(engine, fresh, now=later(engine, 34, t)).state == "done"


def test_a_cancel_requested_job_whose_worker_crashed_is_cancelled(
    backend: str, engine: Backend
) -> None:
    job_id = queue.enqueue("crash", {}, backend=backend).job_id
    t = later(engine, 0)
    claim_one(engine, "crash", lease=30, now=t)
    assert queue.cancel(job_id, backend=backend)
    assert rescuer(engine).run_once(later(engine, 31, t)) == RescueReport(cancelled=1)
    assert row(engine, job_id)["state"] == "cancelled"
