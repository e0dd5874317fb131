"""Lease: a claim leases with a token; only that token acks; leases renew, never shrink."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest

from django_blamequeue import Unrecoverable, queue
from django_blamequeue.audit import LEASE_EXTENDED, LOCK_LOST, STALLED
from django_blamequeue.backends.base import Backend
from django_blamequeue.core import lifecycle
from django_blamequeue.core.records import Ack
from django_blamequeue.testing import capture_events, wait_until

from .support import ack, claim_one, later, outcome, row


def test_a_claim_sets_inflight_a_fresh_token_and_the_lease_expiry(
    backend: str, engine: Backend
) -> None:
    job_id = queue.enqueue("lease", {}, backend=backend).job_id
    t = later(engine, 0)
    c = claim_one(engine, "lease", lease=30, now=t)
    assert c.job_id == job_id and len(c.token) == 32
    assert c.lease_expires_at == t + timedelta(seconds=30)
    r = row(engine, job_id)
    assert (r["state"], r["lease_expires_at"]) == ("inflight", t + timedelta(seconds=30))
    assert r["started_at"] == t


def test_the_default_lease_is_30_seconds(backend: str, engine: Backend) -> None:
    from django_blamequeue.conf import get_settings

    assert get_settings().default_lease == 30.0


def test_each_claim_gets_a_different_token(backend: str, engine: Backend) -> None:
    queue.enqueue_many("lease", range(20), backend=backend)
    tokens = {c.token for c in engine.claim(["lease"], 20, 30)}
    assert len(tokens) == 20


def test_attempts_count_at_claim(backend: str, engine: Backend) -> None:
    job_id = queue.enqueue("lease", {}, backend=backend).job_id
    c = claim_one(engine, "lease")
    assert c.attempt == 1
    assert queue.get_job(job_id, backend=backend).attempts == 1  # type: ignore[union-attr]


def test_a_claim_takes_each_job_once(backend: str, engine: Backend) -> None:
    queue.enqueue_many("lease", range(5), backend=backend)
    first = engine.claim(["lease"], 3, 30)
    second = engine.claim(["lease"], 10, 30)
    assert len(first) == 3 and len(second) == 2
    assert not {c.job_id for c in first} & {c.job_id for c in second}
    assert engine.claim(["lease"], 10, 30) == []


ACKS: dict[str, lifecycle.Outcome] = {
    "complete": lifecycle.Succeeded(None),
    "retry": lifecycle.Raised(ValueError("x")),
    "fail": lifecycle.Raised(Unrecoverable("x")),
    "release": lifecycle.Released(),
    "cancel": lifecycle.Cancelled(),
}


@pytest.mark.parametrize("kind", list(ACKS))
def test_an_ack_with_a_stale_token_is_refused_and_changes_nothing(
    backend: str, engine: Backend, kind: str
) -> None:
    job_id = queue.enqueue("lease", {"n": 1}, backend=backend).job_id
    c = claim_one(engine, "lease")
    before = row(engine, job_id)
    with capture_events() as events:
        result = ack(engine, c, outcome(c, ACKS[kind]), token="0" * 32)
    assert (result.ok, result.state) == (False, None)
    assert row(engine, job_id) == before
    assert [e.action for e in events.events] == [LOCK_LOST]


def test_a_stale_ack_in_a_batch_does_not_stop_the_others(backend: str, engine: Backend) -> None:
    queue.enqueue_many("lease", range(3), backend=backend)
    a, b, c = sorted(engine.claim(["lease"], 3, 30), key=lambda x: x.job_id)
    done = outcome(a, lifecycle.Succeeded(None))
    results = engine.apply_many(
        [
            Ack(job_id=a.job_id, token=a.token, transition=done),
            Ack(job_id=b.job_id, token="stale", transition=done),
            Ack(job_id=c.job_id, token=c.token, transition=done),
        ]
    )
    assert [(r.job_id, r.ok) for r in results] == [
        (a.job_id, True),
        (b.job_id, False),
        (c.job_id, True),
    ]
    assert row(engine, b.job_id)["state"] == "inflight"


def test_an_ack_after_the_job_left_inflight_is_refused(backend: str, engine: Backend) -> None:
    job_id = queue.enqueue("lease", {}, backend=backend).job_id
    c = claim_one(engine, "lease")
    assert ack(engine, c, outcome(c, lifecycle.Succeeded(None))).ok
    before = row(engine, job_id)
    assert not ack(engine, c, outcome(c, lifecycle.Raised(ValueError()))).ok
    assert row(engine, job_id) == before


def test_renewal_never_shortens_a_lease(backend: str, engine: Backend) -> None:
    queue.enqueue("lease", {}, backend=backend)
    t = later(engine, 0)
    c = claim_one(engine, "lease", lease=600, now=t)
    assert engine.renew_leases([(c.job_id, c.token)], 1, now=t) == frozenset()
    assert row(engine, c.job_id)["lease_expires_at"] == t + timedelta(seconds=600)
    assert engine.renew_leases([(c.job_id, c.token)], 1200, now=t) == frozenset()
    assert row(engine, c.job_id)["lease_expires_at"] == t + timedelta(seconds=1200)


def test_renewal_with_a_stale_token_reports_the_lease_lost(backend: str, engine: Backend) -> None:
    queue.enqueue("lease", {}, backend=backend)
    c = claim_one(engine, "lease", lease=30)
    before = row(engine, c.job_id)
    assert engine.renew_leases([(c.job_id, "stale")], 300) == frozenset({c.job_id})
    assert not engine.extend_lease(c.job_id, "stale", 300)
    assert row(engine, c.job_id) == before


def test_extend_lease_pushes_the_expiry_to_now_plus_seconds(backend: str, engine: Backend) -> None:
    queue.enqueue("lease", {}, backend=backend)
    t = later(engine, 0)
    c = claim_one(engine, "lease", lease=30, now=t)
    assert engine.extend_lease(c.job_id, c.token, 900, now=t)
    assert row(engine, c.job_id)["lease_expires_at"] == t + timedelta(seconds=900)


def test_a_handler_extends_its_lease_through_the_context(backend: str, engine: Backend) -> None:
    answers: list[bool] = []
    may_finish = threading.Event()

    def handler(job: Any, ctx: Any) -> None:
        answers.append(ctx.extend_lease(600))
        may_finish.wait(10)

    job_id = queue.enqueue("lease", {}, backend=backend).job_id
    with capture_events() as events:
        queue.consume("lease", handler, backend=backend, lease=30, poll_interval=0.05)
        assert events.wait_for_action(LEASE_EXTENDED, job_id=job_id, timeout=10)
        expires = row(engine, job_id)["lease_expires_at"]
        assert wait_until(lambda: answers == [True], 5)  # the signal precedes the return
        assert expires >= engine.now() + timedelta(seconds=590)
        may_finish.set()
        assert wait_until(lambda: row(engine, job_id)["state"] == "done", 10)


def test_automatic_renewal_keeps_a_long_handler_alive_past_its_lease(
    backend: str, engine: Backend
) -> None:
    """Lease 1 s, a 2.5 s handler, and a rescuer pass every 50 ms on the engine's clock: the
    job is never rescued, because the worker renews at half the lease."""
    running = threading.Event()
    attempts: list[int] = []

    def handler(job: Any, ctx: Any) -> str:
        attempts.append(ctx.attempt)
        running.set()
        time.sleep(2.5)  # the workload itself: longer than two leases
        return "finished"

    job_id = queue.enqueue("lease", {}, backend=backend).job_id
    with capture_events() as events:
        queue.consume("lease", handler, backend=backend, lease=1, poll_interval=0.05)
        assert running.wait(10)
        rescues = 0
        while row(engine, job_id)["state"] == "inflight":
            report = engine.rescue_expired()
            assert (report.repended, report.failed) == (0, 0), "a renewed lease was rescued"
            rescues += 1
            time.sleep(0.05)  # pacing the rescuer, not waiting for a result
    info = queue.get_job(job_id, backend=backend)
    assert info is not None and (info.state, info.attempts, info.result) == ("done", 1, "finished")
    assert attempts == [1]
    assert rescues > 20
    assert not events.of(STALLED) and not events.of(LOCK_LOST)


def test_the_worker_renews_the_lease_it_holds(backend: str, engine: Backend) -> None:
    running = threading.Event()
    may_finish = threading.Event()

    def handler(job: Any, ctx: Any) -> None:
        running.set()
        may_finish.wait(10)

    job_id = queue.enqueue("lease", {}, backend=backend).job_id
    queue.consume("lease", handler, backend=backend, lease=1, poll_interval=0.05)
    assert running.wait(10)
    first = row(engine, job_id)["lease_expires_at"]
    assert wait_until(lambda: row(engine, job_id)["lease_expires_at"] > first, 5)
    may_finish.set()
