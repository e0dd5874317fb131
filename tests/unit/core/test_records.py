"""``Backlog.finished``: when a burst worker may stop."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django_blamequeue.core.records import Backlog

T = datetime(2026, 1, 1, tzinfo=UTC)


def test_a_delayed_job_that_came_due_while_the_backlog_was_read_is_waited_for() -> None:
    """A settle or retry may commit between the count's clock reading and its snapshot: the
    job is counted delayed although it is due. ``finished`` reads the clock again, after."""
    reads: list[datetime] = []

    def clock() -> datetime:
        reads.append(T)
        return T

    assert not Backlog(delayed=1, next_due_at=T).finished(clock)
    assert Backlog(delayed=1, next_due_at=T + timedelta(microseconds=1)).finished(clock)
    assert len(reads) == 2


def test_due_work_or_waited_for_delayed_work_is_not_finished_without_reading_the_clock() -> None:
    def clock() -> datetime:
        raise AssertionError("the clock is read only when a delayed job might be due")

    assert not Backlog(due=1).finished(clock)
    later = Backlog(delayed=1, next_due_at=T + timedelta(seconds=60))
    assert not later.finished(clock, wait_delayed=True)
    assert Backlog().finished(clock)
