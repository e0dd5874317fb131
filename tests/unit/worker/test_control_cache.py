"""control_cache.ControlView: the consumer's cached view of its queues' control state — when it
is read again (a control message, a change made in this process, the poll interval, not more
often), what a failed read keeps, and what the claim is told (paused queues left out, limited
ones named with the settings' defaults, unlimited ones costing nothing)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from types import SimpleNamespace
from typing import cast

import pytest

from django_blamequeue.backends import wakeup
from django_blamequeue.backends.base import Backend
from django_blamequeue.backends.resilience import Resilience
from django_blamequeue.core.controls import ControlState
from django_blamequeue.core.limits import QueueLimits
from django_blamequeue.worker.control_cache import LISTENING_REFRESH, ControlView

HOUR = 3600.0
WAIT = 10.0
#: Settings' defaults (``BLAMEQUEUE["QUEUES"]``); "elsewhere" is not served by this worker.
DEFAULTS = {"mail": QueueLimits(concurrency=4), "elsewhere": QueueLimits(concurrency=1)}


class Engine:
    """A backend's ``controls`` verb, answering ``states``; counts the reads."""

    alias = "stand-in"
    unavailable_errors: tuple[type[BaseException], ...] = (ConnectionError,)

    def __init__(self) -> None:
        self.resilience = Resilience(cast(Backend, self), retries=0)
        self.states: dict[str, ControlState] = {}
        self.reads = 0
        self.down = False

    def controls(self, queues: Sequence[str] | None = None) -> dict[str, ControlState]:
        if self.down:
            raise ConnectionError("engine down")
        self.reads += 1
        return {q: s for q, s in self.states.items() if queues is None or q in queues}

    def on_unavailable(self) -> None:
        pass


@pytest.fixture
def engine() -> Engine:
    return Engine()


def view_of(engine: Engine, poll_interval: float = HOUR) -> ControlView:
    queues = ["mail", "reports", "images"]
    return ControlView(cast(Backend, engine), queues, DEFAULTS, poll_interval)


def paused(queue: str, reason: str = "") -> ControlState:
    return ControlState(queue=queue, paused=True, reason=reason)


def limited(queue: str, limits: QueueLimits) -> ControlState:
    return ControlState(queue=queue, live=limits)


# -- when the view is read -------------------------------------------------------------------
def test_the_first_refresh_reads_and_the_next_waits_for_the_poll_interval(engine: Engine) -> None:
    view = view_of(engine)
    assert view.refresh() is True
    assert view.refresh() is False and engine.reads == 1
    assert view.refresh(force=True) is True and engine.reads == 2


def test_the_view_is_read_again_once_the_poll_interval_has_passed(engine: Engine) -> None:
    view = view_of(engine, poll_interval=0.05)
    assert view.refresh()
    deadline = time.monotonic() + WAIT
    while not view.refresh():
        assert time.monotonic() < deadline
        time.sleep(0.005)
    assert engine.reads == 2


def test_a_control_message_heard_by_the_listener_forces_a_read_and_is_consumed(
    engine: Engine,
) -> None:
    view = view_of(engine)
    listener = SimpleNamespace(listening=True, control_seen=False)
    view.refresh(listener)
    engine.states = {"mail": paused("mail")}
    listener.control_seen = True
    assert view.refresh(listener) is True and view.paused() == ["mail"]
    assert listener.control_seen is False
    assert view.refresh(listener) is False  # heard once, read once


def test_a_change_made_in_this_process_is_read_at_the_next_refresh(engine: Engine) -> None:
    view = view_of(engine)
    view.refresh()
    engine.states = {"reports": paused("reports")}
    wakeup.control_changed(["reports"])
    assert view.refresh() is True and view.paused() == ["reports"]
    assert view.refresh() is False


def test_while_a_listener_is_connected_the_view_is_read_only_every_listening_refresh(
    engine: Engine,
) -> None:
    assert LISTENING_REFRESH > 0.05
    view = view_of(engine, poll_interval=0.0)  # without a listener: every refresh reads
    view.refresh()
    assert view.refresh() is True
    listener = SimpleNamespace(listening=True, control_seen=False)
    view.refresh(listener, force=True)
    assert view.refresh(listener) is False  # the listener will say when something changes


def test_a_failed_read_keeps_the_last_view_and_waits_a_poll_interval(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    engine.states = {"mail": paused("mail")}
    view = view_of(engine)
    view.refresh()
    engine.down = True
    with caplog.at_level(logging.INFO, logger="django_blamequeue.worker"):
        assert view.refresh(force=True) is False
    assert view.paused() == ["mail"]
    assert "could not read the queues' control state" in caplog.text
    engine.down = False
    assert view.refresh() is False  # not hammering a failing engine
    assert view.refresh(force=True) is True


# -- what it answers -------------------------------------------------------------------------
def test_unlimited_queues_are_claimed_without_limits(engine: Engine) -> None:
    view = ControlView(cast(Backend, engine), ["reports", "images"], DEFAULTS, HOUR)
    view.refresh()
    assert view.claim_args() == (["reports", "images"], None)
    assert view.rate_wait() == float("inf")
    assert view.describe() == []


def test_paused_queues_are_left_out_of_the_claim(engine: Engine) -> None:
    engine.states = {"reports": paused("reports"), "images": ControlState(queue="images")}
    view = view_of(engine)
    view.refresh()
    queues, _ = view.claim_args()
    assert queues == ["mail", "images"] and view.paused() == ["reports"]
    engine.states = {q: paused(q) for q in ("mail", "reports", "images")}
    view.refresh(force=True)
    assert view.claim_args() == ([], None)


def test_limited_queues_are_named_with_the_settings_defaults_for_the_engine_to_count(
    engine: Engine,
) -> None:
    live = QueueLimits(concurrency=2, rate_limit=(10, 1.0))
    engine.states = {"reports": limited("reports", live)}
    view = view_of(engine)
    view.refresh()
    queues, limits = view.claim_args()
    assert queues == ["mail", "reports", "images"]
    # The engine reads a queue's live limits itself; the view passes the defaults.
    assert limits == {"mail": DEFAULTS["mail"], "reports": QueueLimits()}
    assert view.limits("reports") == live  # the live limits replace the defaults whole
    assert view.limits("mail") == DEFAULTS["mail"]
    assert view.limits("images").empty


def test_a_paused_queue_with_limits_is_not_claimed_under_them(engine: Engine) -> None:
    engine.states = {"mail": paused("mail")}
    view = view_of(engine)
    view.refresh()
    assert view.claim_args() == (["reports", "images"], None)


def test_the_soonest_rate_window_spacing_is_the_wait_after_a_short_claim(engine: Engine) -> None:
    engine.states = {
        "reports": limited("reports", QueueLimits(rate_limit=(10, 5.0))),
        "images": limited("images", QueueLimits(key_rate_limit=(2, 1.0))),
    }
    view = view_of(engine)
    view.refresh()
    assert view.rate_wait() == pytest.approx(0.5)  # images: 2 per key per second


def test_the_banner_rows_name_paused_queues_and_where_the_limits_come_from(
    engine: Engine,
) -> None:
    engine.states = {
        "reports": paused("reports", "maintenance"),
        "images": limited("images", QueueLimits(concurrency=3)),
    }
    view = view_of(engine)
    view.refresh()
    assert view.describe() == [
        ("limits", "mail: concurrency 4 (settings)"),
        ("paused", "reports (maintenance)"),
        ("limits", "images: concurrency 3 (live)"),
    ]


def test_changes_after_the_first_read_are_logged_and_the_first_read_is_not(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    view = view_of(engine)
    engine.states = {"images": paused("images")}
    with caplog.at_level(logging.WARNING, logger="django_blamequeue.worker"):
        view.refresh()
        assert caplog.messages == []  # the banner shows the first read
        engine.states = {
            "mail": paused("mail", "deploy"),
            "reports": limited("reports", QueueLimits(concurrency=1)),
        }
        view.refresh(force=True)
    assert sorted(caplog.messages) == [
        "queue 'images' was resumed",
        "queue 'mail' is paused (deploy): not claiming from it",
        "queue 'reports' limits now: concurrency 1",
    ]
