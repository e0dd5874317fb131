"""``capture_jobs`` / the pytest fixtures: see what was enqueued, run it here, honestly."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from django.tasks import TaskResultStatus

from django_blamequeue import queue
from django_blamequeue.exceptions import QueueError
from django_blamequeue.testing import CapturedJobs, JobsDidNotSettle, capture_jobs
from tests.testing import jobs


@pytest.fixture(autouse=True)
def _calls() -> Iterator[None]:
    jobs.CALLS.clear()
    yield
    jobs.CALLS.clear()


# -- the fixtures, in a plain (transaction-wrapped) pytest-django test ------------------------
def test_jobs_enqueued_lists_what_the_code_under_test_enqueued(jobs_enqueued: Any) -> None:
    jobs.send_welcome.enqueue({"to": "a@example.com"})
    queue.enqueue("other", {"x": 1})
    [welcome] = jobs_enqueued(queue="emails")
    assert welcome.name == "tests.testing.send_welcome" and welcome.state == "pending"
    assert welcome.payload == {"to": "a@example.com"}
    assert [j.queue for j in jobs_enqueued()] == ["emails", "other"]
    assert jobs_enqueued(name="tests.testing.send_welcome") == [welcome]
    assert jobs.CALLS == []  # nothing runs until the test says so


def test_run_jobs_runs_them_in_this_thread_and_records_results(
    run_jobs: Any, jobs_enqueued: Any
) -> None:
    job_id = jobs.send_welcome.enqueue({"to": "b@example.com"}).job_id
    report = run_jobs()
    assert [a.job_id for a in report.done] == [job_id]
    assert jobs.CALLS == [("send_welcome", {"to": "b@example.com"})]
    [info] = jobs_enqueued(state="done")
    assert info.result == {"sent": "b@example.com"}
    assert run_jobs().attempts == []  # nothing left


def test_run_jobs_runs_async_handlers_and_resumes_them_from_their_checkpoint(
    run_jobs: Any, jobs_enqueued: Any
) -> None:
    job_id = jobs.resumable.enqueue({}).job_id
    report = run_jobs()
    assert [(a.job_id, a.state) for a in report.attempts] == [(job_id, "pending"), (job_id, "done")]
    assert jobs.CALLS == [("resumable", None), ("resumable", {"page": 2})]
    [info] = jobs_enqueued(state="done")
    # the async ORM ran on this test's connection: it saw attempt 1's failure audit row
    assert info.result == {"resumed_at": {"page": 2}, "audit_rows": 1}
    assert info.checkpoint == {"page": 2}


def test_a_job_enqueued_in_a_rolled_back_transaction_was_never_enqueued(
    jobs_enqueued: Any, run_jobs: Any
) -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        jobs.send_welcome.enqueue({"to": "c@example.com"})
        raise RuntimeError("the view failed")
    assert jobs_enqueued() == []
    assert run_jobs().attempts == [] and jobs.CALLS == []


def test_retries_follow_the_policy_with_backoff_recorded_not_slept(
    run_jobs: Any, settings: Any
) -> None:
    settings.BLAMEQUEUE = {**settings.BLAMEQUEUE, "BACKOFF_BASE": 30.0, "BACKOFF_MAX": 300.0}
    job_id = jobs.flaky.enqueue({"succeed_on": 3}).job_id
    report = run_jobs()
    assert [(a.attempt, a.state) for a in report.of(job_id)] == [
        (1, "pending"),
        (2, "pending"),
        (3, "done"),
    ]
    assert report.backoffs == [30.0, 60.0]
    assert report.clock_advanced == pytest.approx(90.0, abs=1.0)
    assert report.of(job_id)[0].error == "ConnectionError: attempt 1 failed"


def test_a_job_out_of_attempts_lands_in_the_dlq(run_jobs: Any) -> None:
    job_id = jobs.flaky.enqueue({"succeed_on": 99}).job_id
    report = run_jobs()
    assert [a.state for a in report.of(job_id)] == ["pending", "pending", "failed"]
    assert [a.job_id for a in report.dead_lettered] == [job_id]
    assert [j.job_id for j in queue.dlq_list("emails")] == [job_id]


def test_jobs_enqueued_by_jobs_run_in_the_same_call(run_jobs: Any) -> None:
    jobs.chain.enqueue({"n": 3})
    assert len(run_jobs().done) == 4
    assert jobs.CALLS == [("chain", 3), ("chain", 2), ("chain", 1), ("chain", 0)]


def test_delayed_jobs_wait_until_the_test_moves_time(run_jobs: Any, jobs_enqueued: Any) -> None:
    jobs.send_welcome.enqueue({"to": "later@example.com"}, delay=3600)
    assert run_jobs().attempts == []
    assert run_jobs(until=timedelta(minutes=30)).attempts == []
    report = run_jobs(until=timedelta(hours=2))
    assert len(report.done) == 1 and report.clock_advanced >= 3599


def test_run_jobs_of_one_queue_leaves_the_others(run_jobs: Any, jobs_enqueued: Any) -> None:
    jobs.send_welcome.enqueue({"to": "d@example.com"})
    jobs.step.enqueue({"name": "x"})
    assert len(run_jobs("reports").done) == 1
    assert [j.state for j in jobs_enqueued(queue="emails")] == ["pending"]


def test_a_consume_style_handler_runs_jobs_without_a_registered_name(run_jobs: Any) -> None:
    queue.enqueue("raw", {"n": 2})
    seen: list[Any] = []
    report = run_jobs("raw", handler=lambda job, ctx: seen.append((job.payload, ctx.attempt)))
    assert seen == [({"n": 2}, 1)] and len(report.done) == 1


def test_a_dag_flow_runs_in_dependency_order(run_jobs: Any, jobs_enqueued: Any) -> None:
    queue.enqueue_flow(
        "reports",
        [
            {"name": "extract", "job": "tests.testing.step", "payload": {"name": "extract"}},
            {
                "name": "load",
                "job": "tests.testing.step",
                "payload": {"name": "load"},
                "depends_on": ["transform"],
            },
            {
                "name": "transform",
                "job": "tests.testing.step",
                "payload": {"name": "transform"},
                "depends_on": ["extract"],
            },
        ],
    )
    assert [j.state for j in jobs_enqueued()] == ["pending", "blocked", "blocked"]
    run_jobs()
    assert [c[1] for c in jobs.CALLS] == ["extract", "transform", "load"]
    assert {j.state for j in jobs_enqueued()} == {"done"}


def test_a_parent_child_flow_fans_out_and_collects(run_jobs: Any, jobs_enqueued: Any) -> None:
    parent = jobs.Report.enqueue({"pages": 3})  # type: ignore[attr-defined]
    run_jobs()
    info = queue.get_job(parent.job_id)
    assert info is not None and info.state == "done"
    assert info.result == {"total": 30, "completed": 3}
    assert sorted(c[1] for c in jobs.CALLS) == [0, 1, 2]


def test_a_job_that_never_settles_is_reported(run_jobs: Any, settings: Any) -> None:
    jobs.chain.enqueue({"n": 50})
    with pytest.raises(JobsDidNotSettle):
        run_jobs(max_runs=10)


# -- the context manager, on every database, committed transactions --------------------------
@pytest.mark.django_db(transaction=True, databases="__all__")
def test_capture_jobs_on_each_local_backend(backend: str) -> None:
    with capture_jobs(backend) as captured:
        assert isinstance(captured, CapturedJobs)
        jobs.flaky.enqueue({"succeed_on": 2}, backend=backend)
        with pytest.raises(RuntimeError), transaction.atomic(using=backend):
            jobs.send_welcome.enqueue({"to": "x"}, backend=backend)
            raise RuntimeError
        report = captured.run_jobs()
    assert [a.state for a in report.attempts] == ["pending", "done"]
    assert [j.name for j in captured.jobs_enqueued()] == ["tests.testing.flaky"]


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_django_tasks_run_through_capture_jobs(backend: str, settings: Any) -> None:
    from tests.tasks.config import tasks_setting

    settings.TASKS = tasks_setting(backend)
    from tests.tasks import sample

    with capture_jobs(backend) as captured:
        result = sample.flaky.enqueue()
        captured.run_jobs()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.attempts == 2


def test_capture_jobs_refuses_a_backend_that_is_not_local(
    db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django_blamequeue import testing

    class Remote:
        alias, protocol = "fast", "redis"

    monkeypatch.setattr(testing, "get_backend", lambda alias=None: Remote())
    with pytest.raises(QueueError, match="local backend"):
        CapturedJobs()
