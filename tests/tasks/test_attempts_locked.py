"""A task's attempt record on SQLite under load: it meets the write lock (held a moment by the
worker's own claims, acks and sweeper) and waits for it, so ``worker_ids`` and ``errors``
stay complete instead of reading ``["unrecorded", w, w]``."""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.db import connections
from django.tasks.base import TaskError
from django.utils import timezone

from django_blamequeue.tasks import attempts

pytestmark = pytest.mark.django_db(transaction=True)


@contextmanager
def short_busy_timeout() -> Iterator[None]:
    """This thread's connection gives up on a held lock after 50 ms, as a default 5-s busy
    timeout does under a longer lock."""
    connection = connections["default"]
    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA busy_timeout = 50")
    try:
        yield
    finally:
        connection.close()  # the next connection gets the settings' timeout back


def hold_write_lock(seconds: float) -> None:
    """Another connection takes SQLite's write lock now and lets go after ``seconds``."""
    other = sqlite3.connect(connections["default"].settings_dict["NAME"], check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    timer = threading.Timer(seconds, lambda: (other.rollback(), other.close()))
    timer.daemon = True
    timer.start()


def test_attempt_records_that_meet_the_write_lock_wait_for_it_and_are_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    if connections["default"].vendor != "sqlite":
        pytest.skip("SQLite's write lock")
    job_id = "01TASKATTEMPTLOCKED0000001"
    with short_busy_timeout(), caplog.at_level(logging.WARNING, logger="django_blamequeue"):
        for attempt in (1, 2):
            hold_write_lock(0.3)
            attempts.started("default", job_id, attempt, f"host:{attempt}", timezone.now())
            hold_write_lock(0.3)
            error = (
                TaskError(exception_class_path="builtins.ValueError", traceback="Traceback …")
                if attempt == 1
                else None
            )
            attempts.ended("default", job_id, attempt, error)
    recorded = attempts.of("default", job_id)
    assert [a.worker_id for a in recorded] == ["host:1", "host:2"]
    assert [a.exception_class_path for a in recorded] == ["builtins.ValueError", None]
    assert all(a.finished_at is not None for a in recorded)
    assert caplog.records == []  # nothing "failed", nothing dropped
