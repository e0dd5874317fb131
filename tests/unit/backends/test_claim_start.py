"""When a PostgreSQL worker's claims start after the last job it claimed, and after which."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django_blamequeue.backends.jobtable.claim_start import GAP_RATIO, MIN_GAP_S, ClaimStart
from django_blamequeue.core.payload import Encoded
from django_blamequeue.core.records import Claimed

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def claimed(job_id: str, queue: str = "q", priority: int = 0, at: int = 0) -> Claimed:
    return Claimed(
        job_id=job_id,
        queue=queue,
        name="n",
        payload=Encoded(content_type="application/json", content_encoding="utf-8", body=b"{}"),
        token="t",
        attempt=1,
        max_attempts=3,
        lease_expires_at=T0,
        priority=priority,
        available_at=T0 + timedelta(seconds=at),
    )


def test_claims_read_from_the_start_while_they_are_fast() -> None:
    start = ClaimStart(slow_ms=5)
    start.note([claimed("a")], 0.004, from_start=True, now=100.0)
    assert not start.onward
    assert start.points(["q"], now=100.0) is None


def test_a_slow_claim_from_the_start_makes_the_next_ones_start_after_the_last_job() -> None:
    start = ClaimStart(slow_ms=5)
    start.note([claimed("b", at=2), claimed("a", at=1)], 0.006, from_start=True, now=100.0)
    points = start.points(["q", "other"], now=100.5)
    assert points is not None
    assert points.prios == [0, None]  # a queue with no job claimed yet reads from the start
    assert points.times == [T0 + timedelta(seconds=2), None]
    assert points.ids == ["b", None]


def test_the_point_is_the_last_job_in_claim_order_priority_first() -> None:
    start = ClaimStart(slow_ms=0)
    batch = [claimed("urgent", priority=5, at=9), claimed("late", priority=0, at=1)]
    start.note(batch, 0.0, from_start=True, now=0.0)
    points = start.points(["q"], now=0.1)
    assert points is not None
    assert (points.prios, points.ids) == ([0], ["late"])


def test_the_next_claim_moves_the_point_even_back_to_a_higher_priority() -> None:
    start = ClaimStart(slow_ms=0)
    start.note([claimed("low", priority=0, at=5)], 0.0, from_start=True, now=0.0)
    start.note([claimed("urgent", priority=9, at=7)], 0.0, from_start=False, now=0.1)
    points = start.points(["q"], now=0.2)
    assert points is not None
    assert (points.prios, points.ids) == ([9], ["urgent"])


def test_a_claim_from_the_start_is_due_every_second_or_more_seldom_the_slower_it_is() -> None:
    start = ClaimStart(slow_ms=5)
    start.note([claimed("a")], 0.010, from_start=True, now=100.0)
    assert start.points(["q"], now=100.0 + MIN_GAP_S - 0.01) is not None
    assert start.points(["q"], now=100.0 + MIN_GAP_S) is None
    start.note([claimed("b")], 0.5, from_start=True, now=200.0)  # 0.5 s: 5 % of 10 s
    assert start.points(["q"], now=200.0 + GAP_RATIO * 0.5 - 0.01) is not None
    assert start.points(["q"], now=200.0 + GAP_RATIO * 0.5) is None


def test_a_fast_claim_from_the_start_turns_claiming_onward_off() -> None:
    start = ClaimStart(slow_ms=5)
    start.note([claimed("a")], 0.010, from_start=True, now=100.0)
    assert start.onward
    start.note([], 0.001, from_start=True, now=101.0)
    assert not start.onward
    assert start.points(["q"], now=101.1) is None


def test_none_never_claims_onward() -> None:
    start = ClaimStart(slow_ms=None)
    start.note([claimed("a")], 60.0, from_start=True, now=100.0)
    assert start.points(["q"], now=100.1) is None


# -- the sweeper's scout ----------------------------------------------------------------------


def test_the_scout_moves_a_point_back_before_a_job_of_its_priority_that_sorts_before_it() -> None:
    start = ClaimStart(slow_ms=5)
    start.note([claimed("b", at=5)], 0.010, from_start=True, now=100.0)
    assert start.scouted_queues() == ["q"]
    skipped = ("q", 0, T0 + timedelta(seconds=2), "a")
    assert start.scouted([skipped], 0.010, now=100.2) == 1
    points = start.points(["q"], now=100.3)
    assert points is not None  # still onward: the next claim starts just before the job
    assert (points.prios, points.times, points.ids) == ([0], [T0 + timedelta(seconds=2)], [""])


def test_the_scout_leaves_a_point_alone_before_later_or_other_priority_jobs() -> None:
    start = ClaimStart(slow_ms=5)
    start.note([claimed("b", at=5)], 0.010, from_start=True, now=100.0)
    firsts = [
        ("q", 0, T0 + timedelta(seconds=6), "c"),  # after the point: found onward anyway
        ("q", 3, T0, "urgent"),  # more urgent: read from the start by every onward claim
    ]
    assert start.scouted(firsts, 0.010, now=100.2) == 0
    points = start.points(["q"], now=100.3)
    assert points is not None and points.ids == ["b"]


def test_while_the_scout_keeps_up_the_round_never_claims_from_the_start() -> None:
    start = ClaimStart(slow_ms=5)
    start.note([claimed("a")], 0.5, from_start=True, now=100.0)  # due at 110 (5 % of the time)
    assert start.scouted([], 0.5, now=105.0) == 0  # due now at 105 + 2 × 10
    assert start.points(["q"], now=124.9) is not None
    assert start.points(["q"], now=125.0) is None  # the scout stopped: the round takes over


def test_a_fast_scout_read_turns_claiming_onward_off_and_an_idle_scout_reads_nothing() -> None:
    start = ClaimStart(slow_ms=5)
    start.note([claimed("a")], 0.010, from_start=True, now=100.0)
    start.scouted([], 0.001, now=100.5)
    assert not start.onward and start.scouted_queues() == []
