"""sweeper.Sweeper: it owns only timing — every service runs on its own period, one that
fails is logged and reported while the others still run, and ``run_once`` runs them all
whatever their period. Services are stand-ins: what they do is their own tests' business."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from django_blamequeue.sweeper import Sweeper, SweepReport

WAIT = 10.0


class Service:
    def __init__(self, name: str, period: float, fails: bool = False) -> None:
        self.name = name
        self.period = period
        self.fails = fails
        self.runs = 0

    def run_once(self) -> Any:
        self.runs += 1
        if self.fails:
            raise RuntimeError("engine down")
        return {"run": self.runs}


def test_a_failing_service_is_reported_and_the_others_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    before, broken, after = (
        Service("rescuer", 5),
        Service("pruner", 5, fails=True),
        Service("relay", 5),
    )
    with caplog.at_level(logging.ERROR, logger="django_blamequeue.sweeper"):
        report = Sweeper([before, broken, after]).run_once()
    assert report.results == {"rescuer": {"run": 1}, "relay": {"run": 1}}
    assert report.errors == {"pruner": "RuntimeError: engine down"}
    assert "sweeper service pruner failed" in caplog.text


def test_a_tick_runs_only_the_services_that_are_due() -> None:
    often, seldom = Service("often", 0.0), Service("seldom", 3600.0)
    sweeper = Sweeper([often, seldom])
    assert set(sweeper.tick().results) == {"often", "seldom"}  # at first every one is due
    assert set(sweeper.tick().results) == {"often"}
    assert (often.runs, seldom.runs) == (2, 1)


def test_run_once_runs_every_service_whatever_its_period() -> None:
    seldom = Service("seldom", 3600.0)
    sweeper = Sweeper([seldom])
    sweeper.tick()
    assert sweeper.tick() == SweepReport()
    assert sweeper.run_once().results == {"seldom": {"run": 2}}


def test_a_started_sweeper_reports_each_round_that_did_something_until_stopped() -> None:
    service = Service("often", 0.0)
    reported = threading.Event()
    reports: list[SweepReport] = []

    def on_report(report: SweepReport) -> None:
        reports.append(report)
        if len(reports) >= 2:
            reported.set()

    def sweeper_threads() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name == "blamequeue-sweeper"}

    before = sweeper_threads()
    sweeper = Sweeper([service])
    sweeper.start(on_report)
    try:
        assert reported.wait(WAIT)
    finally:
        sweeper.stop()
    assert all(r.results == {"often": {"run": n}} for n, r in enumerate(reports[:2], 1))
    assert sweeper_threads() <= before  # stop() returns once its thread has ended


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Slow(Service):
    """A pass that takes ``took`` seconds on ``clock``."""

    def __init__(self, name: str, clock: Clock, took: float, paced: bool) -> None:
        super().__init__(name, period=5.0)
        self.clock, self.took, self.paced = clock, took, paced

    def run_once(self) -> Any:
        self.clock.now += self.took
        return super().run_once()


def test_a_paced_service_whose_pass_was_slow_waits_a_multiple_of_it_before_the_next() -> None:
    """A 2 s pass of a paced service (a rescuer reading an index full of dead entries while
    the xmin horizon is pinned): the next waits 19 × 2 s after it ended, not its 5 s period;
    an unpaced service as slow keeps its period, and a quick paced one too."""
    clock = Clock()
    paced, unpaced = Slow("rescuer", clock, 2.0, True), Slow("relay", clock, 2.0, False)
    quick = Slow("expirer", clock, 0.01, True)
    sweeper = Sweeper([paced, unpaced, quick], clock=clock)
    start = clock.now
    sweeper.tick()  # every one runs at first: rescuer 1000–1002, relay 1002–1004, expirer
    clock.now = start + 10.0
    assert set(sweeper.tick().results) == {"relay", "expirer"}
    clock.now = start + 2.0 + 19 * 2.0 - 0.01  # a moment before the rescuer is due
    assert set(sweeper.tick().results) == {"relay", "expirer"}  # the relay's 2 s pass
    assert clock.now >= start + 2.0 + 19 * 2.0
    assert set(sweeper.tick().results) == {"rescuer"}
    assert (paced.runs, unpaced.runs, quick.runs) == (2, 3, 3)
