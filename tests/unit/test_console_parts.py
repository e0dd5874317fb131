"""The console's pure parts: attempt rounds, search parsing and suggestions, chart drawing and
totals, which attempts are kept, the worker's tally."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from django.contrib.admin.options import IncorrectLookupParameters

from django_blamequeue.admin import attempts as admin_attempts
from django_blamequeue.admin import charts, search, svg_chart
from django_blamequeue.core import attempts as core_attempts
from django_blamequeue.core.records import AttemptInfo, Transition
from django_blamequeue.core.states import State
from django_blamequeue.core.timeseries import SLOTS, Point, Sample
from django_blamequeue.models.charts import TimeBucket
from django_blamequeue.worker import tally

T0 = datetime(2026, 12, 5, 3, 0, tzinfo=UTC)


def attempt(seq: int, number: int, outcome: str = "retried") -> AttemptInfo:
    return AttemptInfo(
        job_id="J", seq=seq, attempt=number, outcome=outcome, started_at=T0, finished_at=T0
    )


def test_a_dlq_retry_starts_a_new_round_where_the_attempt_count_falls_back() -> None:
    rounds = admin_attempts.rounds(
        [attempt(1, 1), attempt(2, 2), attempt(3, 3, "failed"), attempt(4, 1), attempt(5, 2)]
    )
    assert [[a.attempt for a, *_ in r.attempts] for r in rounds] == [[1, 2, 3], [1, 2]]
    assert [r.anchor for r in rounds] == ["bq-round-1", "bq-round-2"]
    assert admin_attempts.rounds([]) == []


def test_an_argument_is_a_dotted_path_and_a_value() -> None:
    assert search.parse_argument("customer_id=1234") == (("customer_id",), "1234")
    assert search.parse_argument("order.lines.0.sku = A=1") == (
        ("order", "lines", "0", "sku"),
        "A=1",
    )
    for bad in ("customer_id", "=1", "a..b=1", "a'--=1", "a b=1", "0=1", "a." * 9 + "a=1"):
        with pytest.raises(IncorrectLookupParameters):
            search.parse_argument(bad)


def test_suggestions_are_the_commonest_top_level_scalars() -> None:
    payloads: list[Any] = [
        {"customer_id": 1234, "note": "x" * 200, "items": [1]},
        {"customer_id": 1234, "paid": True},
        {"customer_id": 7},
        ["not", "a", "dict"],
    ]
    assert search.argument_suggestions(payloads) == [
        "customer_id=1234",
        "customer_id=7",
        "paid=true",
    ]


def test_a_date_alone_means_its_whole_day_and_times_are_utc_unless_they_say() -> None:
    assert search.parse_when("2026-12-05", end=False) == T0.replace(hour=0)
    assert search.parse_when("2026-12-05", end=True).hour == 23
    assert search.parse_when("2026-12-05T03:00", end=False) == T0
    assert search.parse_when("2026-12-05T04:00+01:00", end=False) == T0
    with pytest.raises(IncorrectLookupParameters):
        search.parse_when("yesterday", end=False)


def test_a_chart_escapes_its_labels_and_says_when_it_is_empty() -> None:
    series = (svg_chart.Series("done", "<b>done</b>", "#000"),)
    drawn = svg_chart.bars("x", "<script>", series, [svg_chart.Column(T0, (None,))], fmt=str)
    assert "<script>" not in drawn and "&lt;script&gt;" in drawn
    assert "&lt;b&gt;done&lt;/b&gt;" in drawn
    assert "No data in this range." in drawn


def test_totals_add_the_counts_and_read_p95_from_the_summed_histograms() -> None:
    fast = tuple([10] + [0] * (SLOTS - 1))
    slow = tuple([0] * (SLOTS - 1) + [1])
    points = [
        Point(start=T0, done=3, failed=1, wait=fast, run=fast),
        Point(start=T0 + timedelta(minutes=1), done=2, retried=4, wait=slow, run=fast),
    ]
    found = charts.totals(points)
    assert (found["done"], found["failed"], found["retried"]) == (5, 1, 4)
    assert found["run_p95"] == svg_chart.seconds(0.0095)
    assert found["wait_p95"] != found["run_p95"]


def test_the_history_keeps_failures_by_default_all_or_none() -> None:
    failed = core_attempts.outcome_of("failed", Transition(state=State.FAILED))
    done = core_attempts.outcome_of("done", Transition(state=State.DONE))
    given_back = core_attempts.outcome_of(
        "pending", Transition(state=State.PENDING, give_back_attempt=True)
    )
    assert (failed, done, given_back) == ("failed", "done", None)
    assert core_attempts.kept("failed", "failures") and not core_attempts.kept("done", "failures")
    assert core_attempts.kept("done", "all") and not core_attempts.kept("failed", "off")
    assert not core_attempts.kept(None, "all")


def test_a_bucket_names_its_queue_name_and_time() -> None:
    bucket = TimeBucket(backend="b", queue="emails", name="", step=60, start=T0)
    assert str(bucket) == "emails/* 60s at 2026-12-05 03:00"


class FlakyEngine:
    """A backend seam: refuses the first flush, then keeps what it is sent."""

    def __init__(self) -> None:
        self.sent: list[Sample] = []
        self.refuse = True
        self.resilience = SimpleNamespace(call=lambda f, **kw: f())
        self.alias = "flaky"

    def record_samples(self, samples: list[Sample]) -> None:
        if self.refuse:
            self.refuse = False
            raise ConnectionError("engine away")
        self.sent.extend(samples)


def test_a_refused_flush_is_sent_again_with_the_next_one() -> None:
    engine = FlakyEngine()
    counts = tally.Tally(engine, lease=30.0)  # type: ignore[arg-type]
    now = datetime.now(UTC)
    run = SimpleNamespace(
        claimed=SimpleNamespace(
            queue="q", name="n", available_at=now, lease_expires_at=now + timedelta(seconds=30)
        ),
        started=0.0,
    )
    transition = Transition(state=State.DONE)
    for _ in range(3):
        counts.add(run, transition, SimpleNamespace(ok=True, state=State.DONE))  # type: ignore[arg-type]
    counts.flush_due(0.0, force=True)
    assert engine.sent == []
    counts.add(run, transition, SimpleNamespace(ok=False, state=None))  # type: ignore[arg-type]
    counts.add(run, transition, SimpleNamespace(ok=True, state=State.FAILED))  # type: ignore[arg-type]
    counts.flush_due(0.0, force=True)
    [sample] = engine.sent
    assert (sample.queue, sample.name, sample.done, sample.failed) == ("q", "n", 3, 1)
    assert sum(sample.run) == 4 and sum(sample.wait) == 4
