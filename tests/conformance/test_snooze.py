"""``Snooze(seconds)``: the job goes back to pending after that delay without
spending an attempt, audited, counted in ``JobInfo.snoozes``; past ``MAX_SNOOZES`` it fails."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from django_blamequeue import Snooze, queue
from django_blamequeue.audit import SNOOZE
from django_blamequeue.backends.base import Backend
from django_blamequeue.testing import capture_events, wait_until

from .support import row


def test_a_snoozed_job_runs_again_later_without_spending_an_attempt(
    backend: str, engine: Backend
) -> None:
    runs: list[int] = []

    def handler(job: Any, ctx: Any) -> str:
        runs.append(ctx.attempt)
        if len(runs) < 3:
            raise Snooze(0.05)
        return "ok"

    job_id = queue.enqueue("later", {}, max_attempts=1, backend=backend).job_id
    with capture_events() as events:
        queue.consume("later", handler, backend=backend, poll_interval=0.05)
        assert wait_until(lambda: row(engine, job_id)["state"] == "done", 20)
    r = row(engine, job_id)
    assert (r["attempts"], r["snoozes"], r["result"]) == (1, 2, "ok")
    assert runs == [1, 1, 1]  # every run was its first (and only) attempt
    snoozes = [e for e in events.events if e.action == SNOOZE]
    assert [(e.job_id, e.data["seconds"]) for e in snoozes] == [(job_id, 0.05)] * 2


def test_a_job_that_snoozes_past_max_snoozes_fails_saying_so(
    backend: str, engine: Backend, configure: Callable[..., None]
) -> None:
    configure(MAX_SNOOZES=2)
    job_id = queue.enqueue("later", {}, backend=backend).job_id

    def handler(job: Any, ctx: Any) -> None:
        raise Snooze(0)

    queue.consume("later", handler, backend=backend, poll_interval=0.05)
    assert wait_until(lambda: row(engine, job_id)["state"] == "failed", 20)
    r = row(engine, job_id)
    assert (r["reason"], r["snoozes"], r["attempts"]) == ("snoozed_too_often", 2, 1)
    assert (
        "snoozed 2 times, the most it may (2: @job(max_snoozes=), else MAX_SNOOZES)" in (r["error"])
    )


@pytest.mark.parametrize("seconds", [-1, float("nan"), "soon"])
def test_a_snooze_of_a_bad_length_is_an_error_of_the_handler(
    backend: str, engine: Backend, seconds: Any
) -> None:
    job_id = queue.enqueue("later", {}, max_attempts=1, backend=backend).job_id

    def handler(job: Any, ctx: Any) -> None:
        raise Snooze(seconds)

    queue.consume("later", handler, backend=backend, poll_interval=0.05)
    assert wait_until(lambda: row(engine, job_id)["state"] == "failed", 20)
    assert "Snooze seconds must be a number" in (row(engine, job_id)["error"] or "")
