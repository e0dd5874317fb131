"""The backend-agnostic checks of Django's tests/tasks and django-tasks-db's test suite, stated
for ``BlameQueueBackend`` (on every backend): what ``enqueue`` answers equals what
``get_result`` answers; one worker id per attempt and one ``TaskError`` per failed attempt;
``started_at`` is the first start and ``last_attempted_at`` the latest; Django's own logging
of the task signals.

The reference suites run queued tasks inline; here a worker (``queue.consume``) runs them.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.tasks import TaskResultStatus
from django.tasks.exceptions import TaskResultDoesNotExist

from django_blamequeue.worker.progress import worker_identity
from tests.tasks import sample
from tests.tasks.test_contract import run

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def test_get_result_equals_the_result_enqueue_answered(tasks_backend: Any) -> None:
    for task in (sample.noop, sample.add, sample.nightly):
        result = task.enqueue() if task is not sample.add else task.enqueue(1, 2)
        assert tasks_backend.get_result(result.id) == result
        assert async_to_sync(tasks_backend.aget_result)(result.id) == result
        assert tasks_backend.get_result(result.id).task == task


def test_a_task_without_job_options_comes_back_without_them(tasks_backend: Any) -> None:
    result = sample.noop.enqueue()
    got = tasks_backend.get_result(result.id).task
    assert (got.max_attempts, got.timeout, got.dedupe_key) == (None, None, None)
    options = sample.nightly.get_result(sample.nightly.enqueue().id).task
    assert (options.max_attempts, options.timeout, options.dedupe_key) == (4, 12.5, "nightly")


def test_refresh_reads_the_stored_run_again(tasks_backend: Any, backend: str) -> None:
    result = sample.add.enqueue(20, 22)
    assert result.status == TaskResultStatus.READY
    done = run(result, backend)
    assert done.status == TaskResultStatus.SUCCESSFUL and done.return_value == 42


def test_a_missing_result_does_not_exist(tasks_backend: Any) -> None:
    with pytest.raises(TaskResultDoesNotExist):
        tasks_backend.get_result("01NOTAJOB0000000000000000")
    with pytest.raises(TaskResultDoesNotExist):
        async_to_sync(tasks_backend.aget_result)("01NOTAJOB0000000000000000")


def test_each_attempt_records_the_worker_that_ran_it(tasks_backend: Any, backend: str) -> None:
    result = run(sample.flaky.enqueue(), backend)
    assert result.attempts == 2
    assert result.worker_ids == [worker_identity(), worker_identity()]


def test_each_failed_attempt_keeps_its_own_error(tasks_backend: Any, backend: str) -> None:
    result = run(sample.always_fails.enqueue(), backend)
    assert result.status == TaskResultStatus.FAILED and result.attempts == 2
    assert [e.exception_class for e in result.errors] == [ValueError, ValueError]
    flaky = run(sample.flaky.enqueue(), backend)
    assert [e.exception_class for e in flaky.errors] == [RuntimeError]


def test_started_at_is_the_first_start_and_last_attempted_at_the_latest(
    tasks_backend: Any, backend: str
) -> None:
    result = run(sample.flaky.enqueue(), backend)
    assert result.enqueued_at <= result.started_at < result.last_attempted_at
    assert result.last_attempted_at <= result.finished_at


def test_a_failed_attempts_traceback_ends_with_the_exception_line(
    tasks_backend: Any, backend: str
) -> None:
    result = run(sample.decline.enqueue(7), backend)
    [error] = result.errors
    assert error.traceback.endswith("PaymentError: declined 7\n")
    with pytest.raises(ValueError, match="failed"):
        _ = result.return_value


def test_a_task_that_raises_system_exit_fails_and_the_worker_goes_on(
    tasks_backend: Any, backend: str
) -> None:
    result = run(sample.exits.enqueue(), backend)
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class is SystemExit
    assert result.errors[0].traceback.endswith("SystemExit: This Task failed due to SystemExit\n")
    assert run(sample.add.enqueue(1, 1), backend).return_value == 2


def test_a_return_value_that_is_not_json_is_a_type_error(tasks_backend: Any, backend: str) -> None:
    result = run(sample.returns_object.enqueue(), backend)
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class is TypeError
    assert "Unsupported type" in result.errors[0].traceback


def test_a_context_taker_sees_its_own_result_id(tasks_backend: Any, backend: str) -> None:
    result = run(sample.own_id.enqueue(), backend)
    assert result.return_value == result.id


def test_django_logs_the_enqueue_the_start_and_the_end(
    tasks_backend: Any, backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="django.tasks"):
        result = run(sample.noop.enqueue(), backend)
    lines = [r.getMessage() for r in caplog.records if r.name == "django.tasks"]
    mine = [line for line in lines if result.id in line]
    assert any("enqueued" in line for line in mine)
    assert any("state=RUNNING" in line for line in mine)
    assert any("state=SUCCESSFUL" in line for line in mine)
    assert not any("NoneType" in line for line in mine)


def test_an_id_that_cannot_be_one_does_not_exist_either(tasks_backend: Any) -> None:
    for bad in ("", "x" * 300):
        with pytest.raises(TaskResultDoesNotExist):
            tasks_backend.get_result(bad)
