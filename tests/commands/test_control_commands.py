"""``blamequeue pause | resume | limits | workers`` and what ``stats`` adds for the control
plane: paused queues and limits, jobs waiting for a handler no live worker has, queues with
waiting jobs that no live worker serves (issues 12, 14 and 17)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from pytest_django import Settings as SettingsWrapper

from django_blamequeue import QueueLimits, job, queue
from django_blamequeue.jobs import registry
from django_blamequeue.models import AuditEvent
from django_blamequeue.testing import wait_until
from django_blamequeue.worker import fleet

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


@pytest.fixture
def mailer() -> Iterator[Any]:
    @job(queue="ctl-mail", name="tests.ctl.send")
    def send(payload: Any) -> None:
        return None

    yield send
    registry.unregister("tests.ctl.send")


def test_pause_and_resume_from_the_command_line_are_audited(mailer: Any) -> None:
    out = run("blamequeue", "pause", "ctl-mail", "--reason", "smtp down")
    assert "paused 'ctl-mail' on backend default" in out
    assert queue.is_paused("ctl-mail")
    stats = run("blamequeue", "--backend", "default", "stats")
    assert "paused  'ctl-mail' on backend default" in stats and "smtp down" in stats
    assert "resumed 'ctl-mail'" in run("blamequeue", "resume", "ctl-mail")
    assert not queue.is_paused("ctl-mail")
    users = set(AuditEvent.objects.filter(queue="ctl-mail").values_list("user", flat=True))
    assert len(users) == 1 and next(iter(users)).startswith("cli")


def test_limits_prints_the_limits_in_force_and_changes_only_those_given(
    mailer: Any, settings: SettingsWrapper
) -> None:
    settings.BLAMEQUEUE = {**settings.BLAMEQUEUE, "QUEUES": {"ctl-mail": {"RATE_LIMIT": (5, 1)}}}
    out = run("blamequeue", "limits", "ctl-mail")
    assert "rate limit       5/1 s" in out and 'BLAMEQUEUE["QUEUES"]' in out
    out = run("blamequeue", "limits", "ctl-mail", "--concurrency", "3", "--key-rate-limit", "2/10")
    assert "concurrency      3" in out and "live (set_limits)" in out
    assert queue.get_limits("ctl-mail") == QueueLimits(
        concurrency=3, rate_limit=(5, 1.0), key_rate_limit=(2, 10.0)
    )
    run("blamequeue", "limits", "ctl-mail", "--rate-limit", "none")
    assert queue.get_limits("ctl-mail").rate_limit is None
    stats = run("blamequeue", "stats")
    assert (
        "limits  'ctl-mail' on backend default: concurrency 3 · rate per key 2/10 s (live)" in stats
    )
    out = run("blamequeue", "limits", "ctl-mail", "--clear")
    assert queue.get_limits("ctl-mail") == QueueLimits(rate_limit=(5, 1.0))


@pytest.mark.parametrize(
    "args",
    [
        ["--concurrency", "0"],
        ["--concurrency", "x"],
        ["--rate-limit", "5"],
        ["--rate-limit", "0/1"],
        ["--key-weight", "enterprise:*"],
        ["--key-weight", "enterprise:*=0"],
        ["--key-weight", "=5"],
    ],
)
def test_limits_refuses_bad_values_and_changes_nothing(mailer: Any, args: list[str]) -> None:
    with pytest.raises(CommandError):
        call_command("blamequeue", "limits", "ctl-mail", *args, stderr=io.StringIO())
    assert queue.control("ctl-mail").version == 0


def test_limits_sets_key_weights_keeping_the_other_limits_and_none_removes_them(
    mailer: Any,
) -> None:
    run("blamequeue", "limits", "ctl-mail", "--concurrency", "8")
    out = run(
        "blamequeue", "limits", "ctl-mail", "--key-weight", "vip:*=5", "--key-weight", "team:*=2"
    )
    assert "key weights      vip:*=5, team:*=2 (others 1)" in out
    assert queue.get_limits("ctl-mail") == QueueLimits(
        concurrency=8, key_weights=(("vip:*", 5), ("team:*", 2))
    )
    run("blamequeue", "limits", "ctl-mail", "--key-weight", "none")
    assert queue.get_limits("ctl-mail") == QueueLimits(concurrency=8)


def test_limits_clear_goes_alone(mailer: Any) -> None:
    with pytest.raises(CommandError, match="give it alone"):
        call_command("blamequeue", "limits", "ctl-mail", "--clear", "--concurrency", "2")


def test_workers_lists_live_and_stopped_workers_with_what_they_run(
    mailer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fleet, "HEARTBEAT", 0.1)
    assert "no worker has registered" in run("blamequeue", "workers")
    consumer = queue.consume("ctl-mail", None, poll_interval=0.05)
    assert wait_until(lambda: len(queue.workers()) == 1, 10)
    out = run("blamequeue", "workers")
    assert "running" in out and "queues ctl-mail" in out and "running 0/1" in out
    consumer.cancel()
    assert consumer.join(10)
    assert "stopped" in run("blamequeue", "workers")


def test_stats_marks_queues_with_waiting_jobs_that_no_live_worker_serves(mailer: Any) -> None:
    mailer.enqueue({})
    queue.enqueue("ctl-orphan", {})
    stats = run("blamequeue", "--backend", "default", "stats")
    assert "unserved  'ctl-mail' on backend default: 1 waiting job(s)" in stats
    consumer = queue.consume("ctl-mail", None, poll_interval=0.05, burst=True)
    assert consumer.join(20)
    stats = run("blamequeue", "--backend", "default", "stats")
    assert "unserved  'ctl-orphan' on backend default" in stats
    assert "unserved  'ctl-mail'" not in stats


def test_stats_counts_jobs_waiting_for_a_handler_no_running_worker_has(mailer: Any) -> None:
    for _ in range(3):
        queue.enqueue("ctl-mail", {}, name=None)  # named after the queue: no @job has it
    consumer = queue.consume("ctl-mail", None, poll_interval=0.05)
    assert wait_until(lambda: sum(consumer.no_handler.values()) == 3, 10)
    # The worker publishes what it handed back with its heartbeat: poll until the
    # registry row has all three, then read the line once more as a user would.
    line = (
        "3 job(s) wait for a handler no running worker has on backend default: "
        "3 × 'ctl-mail' on 'ctl-mail'"
    )
    assert wait_until(lambda: line in run("blamequeue", "--backend", "default", "stats"), 10)
    assert line in run("blamequeue", "--backend", "default", "stats")
    consumer.cancel()
    assert consumer.join(10)


def test_runworker_shows_paused_queues_limits_and_jobs_it_cannot_run(
    mailer: Any, settings: SettingsWrapper
) -> None:
    """The banner names paused and limited queues and the jobs no running worker has a
    handler for; a burst still exits when only those are left, and says it handed them back."""
    settings.BLAMEQUEUE = {**settings.BLAMEQUEUE, "QUEUES": {"ctl-mail": {"CONCURRENCY": 2}}}
    queue.enqueue("ctl-mail", {}, name=None)  # no @job answers "ctl-mail"
    mailer.enqueue({})
    queue.pause("ctl-other", reason="vendor outage")
    out = run("runworker", "ctl-mail", "ctl-other", "--burst", "--no-sweep")
    assert "limits          ctl-mail: concurrency 2 (settings)" in out
    assert "paused          ctl-other (vendor outage)" in out
    assert "burst finished: done 1" in out and "handed back 1 (no handler here)" in out
    banner = run("runworker", "ctl-mail", "--burst", "--no-sweep")
    assert "1 job(s) wait for a handler no running worker has: ctl-mail (1)" in banner
