"""liveness: how a worker backs off while its engine fails (never longer than a poll), what it
logs of an outage (its start, a reminder, its end: not every failed call), and when its
registry row says ``stalled``."""

from __future__ import annotations

import logging
import threading

import pytest

from django_blamequeue.exceptions import ErrorCode, QueueError
from django_blamequeue.worker import liveness
from django_blamequeue.worker.liveness import Liveness

DOWN = QueueError(ErrorCode.BACKEND_UNAVAILABLE, "backend 'x' is unavailable")


def test_the_back_off_doubles_from_a_tenth_and_never_exceeds_the_poll_interval() -> None:
    live = Liveness("x", poll_interval=0.5, stalled_after=60)
    delays = [live.backoff("claim", DOWN, unavailable=True) for _ in range(5)]
    assert delays == [0.1, 0.2, 0.4, 0.5, 0.5]


def test_a_slow_poll_still_retries_a_failing_engine_every_five_seconds() -> None:
    live = Liveness("x", poll_interval=60, stalled_after=60)
    assert [live.backoff("claim", DOWN, unavailable=True) for _ in range(8)][-1] == 5.0


def test_an_outage_is_logged_when_it_starts_and_ends_not_at_every_failed_call(
    caplog: pytest.LogCaptureFixture,
) -> None:
    live = Liveness("x", poll_interval=1, stalled_after=60)
    with caplog.at_level(logging.WARNING, "django_blamequeue.worker"):
        for _ in range(20):
            live.backoff("claim", DOWN, unavailable=True)
        live.progressed()
        live.progressed()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert (
        lines[0]
        == "backend 'x': [BACKEND_UNAVAILABLE] backend 'x' is unavailable; retrying in 0.1 s"
    )
    assert "answers again after" in lines[1] and "(20 failed call(s))" in lines[1]
    assert live.delay == 0.0


def test_a_failure_that_is_not_an_outage_is_logged_with_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    live = Liveness("x", poll_interval=1, stalled_after=60)
    with caplog.at_level(logging.ERROR, "django_blamequeue.worker"):
        live.backoff("ack", ValueError("bad value"), unavailable=False)
    [record] = caplog.records
    assert record.getMessage() == "ack failed on backend 'x'; retrying in 0.1 s"
    assert record.exc_info is not None


def never_asked() -> int:
    raise AssertionError("the backlog is asked only once the loop has been quiet too long")


def test_a_loop_that_got_an_answer_lately_is_running_without_asking_the_engine() -> None:
    live = Liveness("x", poll_interval=1, stalled_after=60)
    assert live.state(running=0, due=never_asked, describe=str) == "running"


def test_a_quiet_loop_with_a_handler_running_is_waiting_for_it_not_stalled() -> None:
    live = Liveness("x", poll_interval=1, stalled_after=0)
    assert live.state(running=1, due=never_asked, describe=str) == "running"


def test_a_quiet_idle_loop_is_stalled_while_jobs_are_due_and_running_again_once_it_claims(
    caplog: pytest.LogCaptureFixture,
) -> None:
    live = Liveness("x", poll_interval=1, stalled_after=0)
    assert live.state(running=0, due=lambda: 0, describe=str) == "running"  # nothing due
    with caplog.at_level(logging.WARNING, "django_blamequeue.worker"):
        assert live.state(running=0, due=lambda: 3, describe=lambda: "in flight 0/8") == "stalled"
        assert live.state(running=0, due=lambda: 3, describe=str) == "stalled"  # logged once
        live.stalled_after = 60
        live.progressed()
        assert live.state(running=0, due=never_asked, describe=str) == "running"
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert "3 job(s) are due and no handler runs here (in flight 0/8)" in lines[0]
    assert lines[1].startswith("worker loop claims again after being stalled")


def test_a_paused_queue_or_a_closed_rate_window_keeps_an_idle_loop_from_looking_stalled() -> None:
    live = Liveness("x", poll_interval=1, stalled_after=0.5)
    live._answered_at -= 10  # quiet for ten seconds
    live.idle()
    assert live.state(running=0, due=never_asked, describe=str) == "running"


def test_an_engine_that_hangs_gives_no_verdict_and_never_holds_the_heartbeat(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(liveness, "ASK_TIMEOUT", 0.05)
    live = Liveness("x", poll_interval=1, stalled_after=0)
    hang = threading.Event()
    try:
        assert live.state(running=0, due=lambda: int(hang.wait(30)), describe=str) == "running"
        # the first question still hangs: no second one is asked meanwhile
        assert live.state(running=0, due=never_asked, describe=str) == "running"
    finally:
        hang.set()
