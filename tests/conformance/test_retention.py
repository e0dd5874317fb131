"""Retention: done/cancelled jobs and audit rows are pruned after configurable ages;
failed jobs (the DLQ) are kept unless configured."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from django_blamequeue import queue
from django_blamequeue.backends import all_backends
from django_blamequeue.backends.base import Backend
from django_blamequeue.conf import get_settings
from django_blamequeue.models import FlowDependency
from django_blamequeue.relay.outbox import database_of
from django_blamequeue.sweeper.pruner import Pruner

from .support import audit_db, audit_rows, claim_one, later, succeed, to_dlq

DAY = 86400.0


def pruner(engine: Backend) -> Pruner:
    return Pruner(engine, settings=get_settings())


def exists(backend: str, job_id: str) -> bool:
    return queue.get_job(job_id, backend=backend) is not None


def terminal_jobs(engine: Backend, backend: str) -> dict[str, str]:
    done = queue.enqueue("old", {}, backend=backend).job_id
    succeed(engine, claim_one(engine, "old"))
    cancelled = queue.enqueue("old", {}, backend=backend).job_id
    queue.cancel(cancelled, backend=backend)
    failed = to_dlq(engine, "old")
    return {"done": done, "cancelled": cancelled, "failed": failed}


def test_the_default_ages_are_a_week_for_jobs_a_month_for_audit_and_failed_kept() -> None:
    s = get_settings()
    assert (s.retention_done, s.retention_cancelled, s.retention_failed, s.retention_audit) == (
        7 * DAY,
        7 * DAY,
        None,
        30 * DAY,
    )


def test_old_done_and_cancelled_jobs_are_pruned_and_failed_ones_kept(
    backend: str, engine: Backend
) -> None:
    ids = terminal_jobs(engine, backend)
    report = pruner(engine).run_once(later(engine, 7 * DAY + 60))
    assert report.jobs == 2
    assert {k: exists(backend, v) for k, v in ids.items()} == {
        "done": False,
        "cancelled": False,
        "failed": True,
    }


def test_jobs_younger_than_their_retention_are_kept(backend: str, engine: Backend) -> None:
    ids = terminal_jobs(engine, backend)
    assert pruner(engine).run_once(later(engine, 7 * DAY - 60)).jobs == 0
    assert all(exists(backend, v) for v in ids.values())


def test_waiting_and_running_jobs_are_never_pruned(
    backend: str, engine: Backend, configure: Callable[..., None]
) -> None:
    configure(RETENTION={"DONE": 1, "CANCELLED": 1, "FAILED": 1, "AUDIT": 1})
    pending = queue.enqueue("old", {}, backend=backend).job_id
    running = queue.enqueue("old", {}, backend=backend).job_id
    claim_one(engine, "old")
    assert pruner(engine).run_once(later(engine, 365 * DAY)).jobs == 0
    assert exists(backend, pending) and exists(backend, running)


def test_failed_jobs_are_pruned_once_a_failed_retention_is_configured(
    backend: str, engine: Backend, configure: Callable[..., None]
) -> None:
    configure(RETENTION={"FAILED": DAY})
    ids = terminal_jobs(engine, backend)
    pruner(engine).run_once(later(engine, DAY + 60))
    assert not exists(backend, ids["failed"])
    assert exists(backend, ids["done"])  # DONE still has its default week


def test_a_pruned_flow_job_takes_its_dependency_rows(backend: str, engine: Backend) -> None:
    made = queue.enqueue_flow(
        "old", [{"name": "a"}, {"name": "b", "depends_on": ["a"]}], backend=backend
    )
    succeed(engine, claim_one(engine, "old"))
    succeed(engine, claim_one(engine, "old"))
    assert sorted(len(j.depends_on) for j in engine.flow_jobs(made["flow_id"])) == [0, 1]
    assert pruner(engine).run_once(later(engine, 8 * DAY)).jobs == 2
    assert engine.flow_jobs(made["flow_id"]) == []
    if engine.database is not None:  # no orphaned edge left in the database either
        assert not FlowDependency.objects.using(engine.database).exists()


def prune_audit(engine: Backend, now: datetime) -> int:
    """Run the pruners of every backend that keeps its audit rows where ``engine`` does (one
    of them owns that table's retention)."""
    sharing = [b for b in all_backends() if database_of(b) == audit_db(engine)]
    return sum(pruner(b).run_once(now).audit for b in sharing)


def test_old_audit_rows_are_pruned(backend: str, engine: Backend) -> None:
    terminal_jobs(engine, backend)
    count = audit_rows(engine).count()
    assert count > 0
    assert pruner(engine).run_once(later(engine, 29 * DAY)).jobs == 2
    assert prune_audit(engine, later(engine, 29 * DAY)) == 0
    assert audit_rows(engine).count() == count
    assert prune_audit(engine, later(engine, 30 * DAY + 60)) == count
    assert audit_rows(engine).count() == 0


def test_pruning_works_through_in_batches(backend: str, engine: Backend) -> None:
    queue.enqueue_many("old", range(25), backend=backend)
    for c in engine.claim(["old"], 25, 30):
        succeed(engine, c)
    small = Pruner(engine, settings=get_settings(), batch=10)
    assert small.run_once(later(engine, 8 * DAY)).jobs == 25
    assert queue.size("old", backend=backend) == 0
