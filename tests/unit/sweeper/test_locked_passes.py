"""The sweeper meets SQLite's write lock, held a moment by a worker's claim or ack: it tries
the pass again, quietly, instead of logging "scheduler failed: database is locked"."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.db.utils import OperationalError

from django_blamequeue.backends.resilience import is_locked
from django_blamequeue.exceptions import ErrorCode, QueueError
from django_blamequeue.sweeper import LOCK_RETRIES, Sweeper


class Flaky:
    """A service whose first ``failures`` passes meet ``error``."""

    name = "scheduler"
    period = 5.0

    def __init__(self, failures: int, error: Exception) -> None:
        self.failures = failures
        self.error = error
        self.passes = 0

    def run_once(self) -> Any:
        self.passes += 1
        if self.passes <= self.failures:
            raise self.error
        return "fired 1"


def locked_error() -> Exception:
    try:
        try:
            raise OperationalError("database is locked")
        except OperationalError as exc:
            raise QueueError(ErrorCode.BACKEND_UNAVAILABLE, "backend 'default': locked") from exc
    except QueueError as exc:
        return exc


def test_a_locked_database_is_retried_without_a_word(caplog: pytest.LogCaptureFixture) -> None:
    service = Flaky(2, OperationalError("database is locked"))
    with caplog.at_level(logging.INFO, logger="django_blamequeue"):
        report = Sweeper([service]).run_once()
    assert report.results == {"scheduler": "fired 1"} and report.errors == {}
    assert service.passes == 3
    assert caplog.records == []


def test_a_lock_that_outlasts_the_retries_is_one_line_without_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    service = Flaky(99, locked_error())
    with caplog.at_level(logging.INFO, logger="django_blamequeue"):
        report = Sweeper([service]).run_once()
    assert service.passes == LOCK_RETRIES + 1
    assert list(report.errors) == ["scheduler"]
    (record,) = caplog.records
    assert record.levelno == logging.INFO and record.exc_info is None
    assert record.getMessage() == (
        "sweeper service scheduler: the database stayed locked; next pass in 5 s"
    )


def test_other_failures_are_still_errors_with_their_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    service = Flaky(1, OperationalError("no such table: blamequeue_schedule"))
    with caplog.at_level(logging.INFO, logger="django_blamequeue"):
        Sweeper([service]).run_once()
    assert service.passes == 1 and not is_locked(service.error)
    (record,) = caplog.records
    assert record.levelno == logging.ERROR and record.exc_info is not None
