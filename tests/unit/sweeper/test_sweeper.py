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
