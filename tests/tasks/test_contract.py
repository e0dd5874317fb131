"""The ``django.tasks`` backend contract (django/tasks/backends/base.py), on every database.

Django's own ``tests/tasks`` pins its Dummy/Immediate backends, so this states the contract
again for ``BlameQueueBackend``: JSON-only arguments, the ``supports_*`` flags, every
``TaskResult`` field, validation errors, the status mapping of docs/django-tasks.md, the signals.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import transaction
from django.tasks import TaskResultStatus, task_backends
from django.tasks.base import Task
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist, TaskResultMismatch
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.utils import timezone

from django_blamequeue import queue
from django_blamequeue.exceptions import JobCancelled, JobTimeout
from django_blamequeue.models import Job
from django_blamequeue.tasks import BlameQueueBackend, BlameQueueTask
from django_blamequeue.testing import wait_until
from tests.tasks import sample

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def db_of(backend: str) -> str:
    return "default" if backend == "default" else backend


@contextmanager
def worker(backend: str, queues: tuple[str, ...] = ("tasks",), **kw: Any) -> Iterator[Any]:
    consumer = queue.consume(list(queues), None, backend=backend, poll_interval=0.05, **kw)
    try:
        yield consumer
    finally:
        consumer.cancel(grace=5)
        consumer.join(10)


def run(result: Any, backend: str, **kw: Any) -> Any:
    """Run a worker until ``result`` is finished; answer the refreshed result."""
    with worker(backend, **kw):
        assert wait_until(lambda: result.task.get_result(result.id).is_finished, timeout=15)
    result.refresh()
    return result


# -- capabilities -----------------------------------------------------------------------------
def test_backend_declares_every_capability_and_its_task_class(tasks_backend: Any) -> None:
    assert isinstance(tasks_backend, BlameQueueBackend)
    assert tasks_backend.supports_defer is True
    assert tasks_backend.supports_async_task is True
    assert tasks_backend.supports_get_result is True
    assert tasks_backend.supports_priority is True
    assert tasks_backend.task_class is BlameQueueTask
    assert isinstance(sample.add, BlameQueueTask)


# -- enqueue and TaskResult fields ------------------------------------------------------------
def test_enqueue_answers_a_ready_result_with_every_field(tasks_backend: Any, backend: str) -> None:
    before = timezone.now()
    result = sample.echo.enqueue(1, (2, 3), key={"nested": (4,)})
    assert isinstance(result.id, str) and result.id
    assert result.status == TaskResultStatus.READY
    assert result.task is sample.echo or result.task.func is sample.echo.func
    assert result.enqueued_at is not None and result.enqueued_at >= before - timedelta(seconds=1)
    assert result.started_at is None and result.finished_at is None
    assert result.last_attempted_at is None
    assert result.args == [1, [2, 3]] and result.kwargs == {"key": {"nested": [4]}}
    assert result.backend == "blamequeue"
    assert result.errors == [] and result.worker_ids == [] and result.attempts == 0
    assert result.is_finished is False
    with pytest.raises(ValueError, match="not finished"):
        _ = result.return_value
    info = queue.get_job(result.id, backend=backend)
    assert info is not None and info.name == "tests.tasks.sample.echo" and info.queue == "tasks"


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (object(), TypeError),
        ({1, 2}, TypeError),
        (timezone.now(), TypeError),
        (b"\xff\xfe", ValueError),
    ],
    ids=["object", "set", "datetime", "non-utf8-bytes"],
)
def test_arguments_must_be_json_and_nothing_is_stored_otherwise(
    tasks_backend: Any, backend: str, value: object, error: type[Exception]
) -> None:
    with pytest.raises(error):
        sample.echo.enqueue(value)
    with pytest.raises(error):
        sample.echo.enqueue(x=value)
    assert Job.objects.using(db_of(backend)).count() == 0


def test_get_result_answers_the_stored_run_and_the_task_as_enqueued(
    tasks_backend: Any, backend: str
) -> None:
    when = timezone.now() + timedelta(hours=1)
    result = sample.add.using(priority=50, queue_name="other", run_after=when).enqueue(1, 2)
    got = tasks_backend.get_result(result.id)
    assert got.id == result.id and got.status == TaskResultStatus.READY
    assert got.args == [1, 2] and got.kwargs == {}
    assert got.task.func is sample.add.func
    assert (got.task.priority, got.task.queue_name, got.task.run_after) == (50, "other", when)
    assert got.task.backend == "blamequeue"
    assert sample.add.get_result(result.id).id == result.id
    with pytest.raises(TaskResultMismatch):
        sample.echo.get_result(result.id)
    assert async_to_sync(tasks_backend.aget_result)(result.id).id == result.id


def test_get_result_of_an_unknown_id_or_a_plain_job_does_not_exist(
    tasks_backend: Any, backend: str
) -> None:
    with pytest.raises(TaskResultDoesNotExist):
        tasks_backend.get_result("01NOTAJOB0000000000000000")
    plain = queue.enqueue("tasks", {"x": 1}, backend=backend)
    with pytest.raises(TaskResultDoesNotExist, match="not a task"):
        tasks_backend.get_result(plain.job_id)


def test_aenqueue_stores_the_run_like_enqueue(tasks_backend: Any, backend: str) -> None:
    result = async_to_sync(sample.add.aenqueue)(5, 6)
    assert result.status == TaskResultStatus.READY
    assert queue.get_job(result.id, backend=backend) is not None


# -- validation -------------------------------------------------------------------------------
def test_priority_outside_the_django_range_is_refused(tasks_backend: Any) -> None:
    for bad in (101, -101):
        with pytest.raises(InvalidTask, match="priority"):
            sample.add.using(priority=bad)
    with pytest.raises(InvalidTask, match="whole number"):
        sample.add.using(priority=1.5)  # type: ignore[arg-type]


def test_a_queue_not_in_queues_is_refused(tasks_backend: Any) -> None:
    with pytest.raises(InvalidTask, match="Queue 'nowhere' is not valid"):
        sample.add.using(queue_name="nowhere")


def test_run_after_must_be_aware(tasks_backend: Any) -> None:
    with pytest.raises(InvalidTask, match="aware"):
        sample.add.using(run_after=timezone.now().replace(tzinfo=None))


def test_functions_must_be_module_level_and_context_takers_name_it(tasks_backend: Any) -> None:
    def local() -> None: ...

    with pytest.raises(InvalidTask, match="module level"):
        BlameQueueTask(func=local, backend="blamequeue", queue_name="tasks")
    with pytest.raises(InvalidTask, match="context"):
        BlameQueueTask(
            func=sample.plain_function, backend="blamequeue", queue_name="tasks", takes_context=True
        )


@pytest.mark.parametrize(
    "options",
    [
        {"max_attempts": 0},
        {"max_attempts": True},
        {"timeout": -1},
        {"timeout": float("inf")},
        {"dedupe_key": ""},
        {"dedupe_key": "k" * 256},
    ],
)
def test_job_options_are_validated(tasks_backend: Any, options: dict[str, Any]) -> None:
    with pytest.raises(InvalidTask):
        BlameQueueTask(
            func=sample.plain_function, backend="blamequeue", queue_name="tasks", **options
        )


def test_options_the_backend_does_not_know_are_refused(settings: Any) -> None:
    entry = {"BACKEND": "django_blamequeue.tasks.BlameQueueBackend"}
    settings.TASKS = {
        "bad": {**entry, "OPTIONS": {"QUEUES": ["a"]}},
        "typo": {**entry, "OPTIONS": {"BLAMEQUEUE_BACKNED": "x"}},
    }
    with pytest.raises(ImproperlyConfigured, match="QUEUES next to BACKEND"):
        task_backends["bad"]
    with pytest.raises(ImproperlyConfigured, match="BLAMEQUEUE_BACKNED"):
        task_backends["typo"]


def test_check_reports_a_blamequeue_backend_that_does_not_exist(settings: Any) -> None:
    settings.TASKS = {
        "x": {
            "BACKEND": "django_blamequeue.tasks.BlameQueueBackend",
            "OPTIONS": {"BLAMEQUEUE_BACKEND": "missing"},
        }
    }
    errors = task_backends["x"].check()
    assert [e.id for e in errors] == ["blamequeue.E030"] and "missing" in errors[0].msg


def test_check_reports_a_settings_error_once_when_tasks_use_the_backend(settings: Any) -> None:
    """The settings' own check names the problem; E030 does not repeat it."""
    settings.TASKS = {"x": {"BACKEND": "django_blamequeue.tasks.BlameQueueBackend"}}
    settings.BLAMEQUEUE = {**settings.BLAMEQUEUE, "RETRIES": 3}
    out = io.StringIO()
    with pytest.raises(SystemCheckError) as caught:
        call_command("check", stdout=out, stderr=out)
    text = str(caught.value)
    assert text.count('BLAMEQUEUE["RETRIES"] is not a known key') == 1, text
    assert "(blamequeue.E001)" in text and "E030" not in text


# -- task options reach the job ---------------------------------------------------------------
def test_task_keyword_arguments_reach_the_job(tasks_backend: Any, backend: str) -> None:
    first = sample.nightly.enqueue()
    info = queue.get_job(first.id, backend=backend)
    assert info is not None
    assert (info.max_attempts, info.timeout, info.dedupe_key) == (4, 12.5, "nightly")
    again = sample.nightly.enqueue()
    assert again.id == first.id  # the dedupe key holds one unfinished run
    other = sample.nightly.using(dedupe_key="weekly", max_attempts=2).enqueue()
    info = queue.get_job(other.id, backend=backend)
    assert info is not None and (info.max_attempts, info.dedupe_key) == (2, "weekly")


def test_priority_and_run_after_map_to_the_job(tasks_backend: Any, backend: str) -> None:
    when = timezone.now() + timedelta(minutes=5)
    result = sample.add.using(priority=-30, run_after=when).enqueue(1, 1)
    info = queue.get_job(result.id, backend=backend)
    assert info is not None and info.priority == -30 and info.available_at == when


def test_higher_priority_runs_first(tasks_backend: Any, backend: str) -> None:
    low = sample.add.using(priority=-100).enqueue(0, 0)
    high = sample.add.using(priority=100).enqueue(0, 1)
    run(low, backend)
    high.refresh()
    assert high.started_at is not None and low.started_at is not None
    assert high.started_at <= low.started_at


# -- running ----------------------------------------------------------------------------------
def test_a_successful_run_fills_every_field(tasks_backend: Any, backend: str) -> None:
    result = run(sample.add.enqueue(2, 3), backend)
    assert result.status == TaskResultStatus.SUCCESSFUL and result.is_finished
    assert result.return_value == 5
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert result.last_attempted_at == result.started_at
    assert result.attempts == 1 and len(result.worker_ids) == 1
    assert result.errors == []


def test_a_failed_run_names_the_exception_class_and_keeps_the_traceback(
    tasks_backend: Any, backend: str
) -> None:
    result = run(sample.decline.enqueue(42), backend)
    assert result.status == TaskResultStatus.FAILED
    with pytest.raises(ValueError, match="failed"):
        _ = result.return_value
    [error] = result.errors
    assert error.exception_class_path == "tests.tasks.sample.PaymentError"
    assert error.exception_class is sample.PaymentError
    assert "Traceback" in error.traceback and "declined 42" in error.traceback
    assert result.finished_at is not None


def test_a_failure_is_retried_per_max_attempts_then_fails(tasks_backend: Any, backend: str) -> None:
    result = run(sample.always_fails.enqueue(), backend)
    assert result.status == TaskResultStatus.FAILED and result.attempts == 2
    assert result.errors[0].exception_class_path == "builtins.ValueError"
    info = queue.get_job(result.id, backend=backend)
    assert info is not None and info.state == "failed"  # the DLQ


def test_a_retried_failure_then_success_is_successful(tasks_backend: Any, backend: str) -> None:
    result = run(sample.flaky.enqueue(), backend)
    assert result.status == TaskResultStatus.SUCCESSFUL and result.attempts == 2
    assert result.return_value == "second attempt"
    assert [e.exception_class_path for e in result.errors] == ["builtins.RuntimeError"]


def test_a_return_value_that_is_not_json_fails_the_run(tasks_backend: Any, backend: str) -> None:
    result = run(sample.returns_object.enqueue(), backend)
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class_path == "builtins.TypeError"


def test_a_timed_out_run_fails_with_job_timeout(tasks_backend: Any, backend: str) -> None:
    result = run(sample.too_slow.enqueue(), backend)
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class is JobTimeout


def test_the_context_carries_the_result_and_the_attempt(tasks_backend: Any, backend: str) -> None:
    result = run(sample.with_context.enqueue(7), backend)
    assert result.return_value == {"attempt": 1, "id": result.id, "x": 7}


def test_a_coroutine_task_runs(tasks_backend: Any, backend: str) -> None:
    assert run(sample.async_add.enqueue(2, 40), backend).return_value == 42


def test_a_cancelled_run_is_failed_and_the_error_says_cancelled(
    tasks_backend: Any, backend: str
) -> None:
    result = sample.add.enqueue(1, 2)
    assert queue.cancel(result.id, backend=backend)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    [error] = result.errors
    assert error.exception_class is JobCancelled and error.traceback.startswith("cancelled")


@pytest.mark.parametrize(
    ("state", "status"),
    [
        ("pending", "READY"),
        ("blocked", "READY"),
        ("inflight", "RUNNING"),
        ("waiting_children", "RUNNING"),
        ("done", "SUCCESSFUL"),
        ("failed", "FAILED"),
        ("cancelled", "FAILED"),
    ],
)
def test_status_mapping_of_every_job_state(
    tasks_backend: Any, backend: str, state: str, status: str
) -> None:
    result = sample.add.enqueue(1, 2)
    Job.objects.using(db_of(backend)).filter(id=result.id).update(
        state=state, finished_at=timezone.now(), error="Exception: x" if state == "failed" else None
    )
    got = tasks_backend.get_result(result.id)
    assert got.status == status
    if status == "FAILED":
        assert got.errors, "a failed result always says why"


# -- signals ----------------------------------------------------------------------------------
@contextmanager
def received(signal: Any) -> Iterator[list[tuple[type, Any]]]:
    seen: list[tuple[type, Any]] = []

    def receiver(sender: type, task_result: Any, **kwargs: Any) -> None:
        seen.append((sender, task_result.status))

    signal.connect(receiver, weak=False)
    try:
        yield seen
    finally:
        signal.disconnect(receiver)


def test_task_enqueued_is_sent_after_commit_and_not_on_rollback(
    tasks_backend: Any, backend: str
) -> None:
    with received(task_enqueued) as seen:
        with transaction.atomic(using=db_of(backend)):
            sample.add.enqueue(1, 2)
            assert seen == []
        assert seen == [(BlameQueueBackend, TaskResultStatus.READY)]
        with pytest.raises(RuntimeError), transaction.atomic(using=db_of(backend)):
            sample.add.enqueue(3, 4)
            raise RuntimeError("roll back")
        assert len(seen) == 1
    assert Job.objects.using(db_of(backend)).count() == 1


def test_task_started_and_finished_are_sent_around_each_run(
    tasks_backend: Any, backend: str
) -> None:
    with received(task_started) as started, received(task_finished) as finished:
        run(sample.flaky.enqueue(), backend)
    assert started == [(BlameQueueBackend, "RUNNING")] * 2
    assert finished == [(BlameQueueBackend, "READY"), (BlameQueueBackend, "SUCCESSFUL")]


def test_task_finished_says_failed_when_no_attempt_is_left(
    tasks_backend: Any, backend: str
) -> None:
    with received(task_finished) as finished:
        run(sample.decline.enqueue(1), backend)
    assert finished == [(BlameQueueBackend, TaskResultStatus.FAILED)]


def test_a_task_is_a_registered_job_a_worker_can_run(tasks_backend: Any) -> None:
    from django_blamequeue.jobs import registry

    definition = registry.get("tests.tasks.sample.nightly")
    assert definition is not None
    assert (definition.queue, definition.options.max_attempts, definition.options.timeout) == (
        "tasks",
        4,
        12.5,
    )
    assert isinstance(sample.add, Task)
