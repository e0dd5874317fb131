"""``blamequeue`` for the operator at 3 a.m.: show a job, list every DLQ, see schedules and
delayed jobs, and never purge or enqueue by accident."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from pytest_django import Settings as SettingsWrapper

from django_blamequeue import Child, flow, job, queue
from django_blamequeue.backends import get_backend
from django_blamequeue.jobs import registry
from django_blamequeue.models import Schedule
from django_blamequeue.testing import capture_jobs

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

ID = re.compile(r"\b01[0-9A-HJKMNP-TV-Z]{24}\b")
UTC_TIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC")


@pytest.fixture
def jobs() -> Iterator[dict[str, Any]]:
    @job(queue="op", name="tests.op.ok")
    def ok(payload: Any) -> Any:
        return {"echo": payload}

    @job(queue="op", name="tests.op.boom", max_attempts=2)
    def boom(payload: Any) -> None:
        raise RuntimeError(f"boom {payload['n']}")

    @job(queue="op-mail", name="tests.op.mail", max_attempts=1)
    def mail(payload: Any) -> None:
        raise ConnectionError("smtp down")

    @job(queue="op-pages", name="tests.op.page")
    def page(payload: Any) -> Any:
        return payload

    @flow(queue="op-reports", name="tests.op.Report", on_child_failure="continue")
    class Report:
        def fan_out(self, payload: Any) -> list[Child]:
            return [Child(page, {"n": i}, key=f"p{i}") for i in range(payload["pages"])]

        def collect(self, payload: Any, state: Any) -> Any:
            return state.completed

    yield {"ok": ok, "boom": boom, "mail": mail, "Report": Report}
    for name in ("ok", "boom", "mail", "page", "Report"):
        registry.unregister(f"tests.op.{name}")


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def drain(*args: str) -> None:
    run("runworker", *args, "--burst", "--no-sweep")


# -- enqueue ---------------------------------------------------------------------------------
def test_enqueue_without_a_payload_is_refused_with_an_example_and_enqueues_nothing(
    jobs: dict[str, Any],
) -> None:
    with pytest.raises(
        CommandError, match=r"takes a payload: give --payload JSON \(e\.g\. --payload '\{\}'"
    ):
        call_command("blamequeue", "enqueue", "tests.op.ok")
    assert queue.size("op") == 0

    job_id = run("blamequeue", "enqueue", "tests.op.ok", "--payload", "null").split()[1]
    assert queue.get_job(job_id).payload is None  # type: ignore[union-attr]  # asked for


# -- show ------------------------------------------------------------------------------------
def test_show_prints_a_failed_jobs_state_attempts_error_and_traceback(
    jobs: dict[str, Any],
) -> None:
    job_id = jobs["boom"].enqueue({"n": 7}).job_id
    drain("op", "--wait-delayed")  # and the retry, once its backoff is due

    out = run("blamequeue", "show", job_id)

    assert out.startswith(f"job {job_id}\n")
    assert re.search(r"^  state +failed \(error\)$", out, re.M)
    assert re.search(r"^  attempts +2/2$", out, re.M)
    assert re.search(r"^  queue +op \(backend default\)$", out, re.M)
    assert '"n": 7' in out
    assert "\nerror (builtins.RuntimeError)\n  RuntimeError: boom 7\n" in out
    traceback = out.split("\ntraceback\n", 1)[1]
    assert traceback.startswith("  Traceback (most recent call last):")
    assert "RuntimeError: boom 7" in traceback


def test_show_of_a_unique_job_names_its_key_and_the_calls_it_absorbed(
    jobs: dict[str, Any],
) -> None:
    holder = queue.enqueue("op", {"n": 1}, unique={"key": "sync-7"}).job_id
    for n in (2, 3, 4):
        queue.enqueue("op", {"n": n}, unique={"key": "sync-7"})

    out = run("blamequeue", "show", holder)

    assert re.search(r"^  unique key +sync-7, absorbed 3 calls$", out, re.M)


def test_show_of_a_flow_step_names_its_flow_key_and_dependencies(jobs: dict[str, Any]) -> None:
    flow_ = queue.enqueue_flow(
        "op",
        [
            {"name": "extract", "job": "tests.op.ok", "payload": 1},
            {"name": "load", "job": "tests.op.ok", "payload": 2, "depends_on": ["extract"]},
        ],
    )
    extract, load = (j["job_id"] for j in flow_["jobs"])

    out = run("blamequeue", "show", load)

    assert re.search(rf"^  flow +{flow_['flow_id']} \(blamequeue flow show ", out, re.M)
    assert re.search(r"^  flow key +load$", out, re.M)
    assert re.search(rf"^  depends on +{extract}$", out, re.M)
    assert re.search(r"^  state +blocked$", out, re.M)


def test_show_of_an_unknown_job_is_refused() -> None:
    with pytest.raises(CommandError, match="no job 01NOPE"):
        call_command("blamequeue", "show", "01NOPE")


# -- dlq list --------------------------------------------------------------------------------
def test_dlq_list_without_a_queue_lists_the_dlq_of_every_queue_that_has_one(
    jobs: dict[str, Any],
) -> None:
    mail = jobs["mail"].enqueue({}).job_id
    jobs["ok"].enqueue({})
    drain("op-mail", "op")

    out = run("blamequeue", "dlq", "list")

    assert "1 job(s) in the DLQ of 'op-mail'" in out and mail in out
    assert "ConnectionError: smtp down" in out
    assert "'op'" not in out  # a queue with nothing failed is not listed


def test_dlq_list_without_a_queue_says_when_every_dlq_is_empty(jobs: dict[str, Any]) -> None:
    jobs["ok"].enqueue({})
    assert run("blamequeue", "dlq", "list") == "every DLQ is empty\n"


# -- purge -----------------------------------------------------------------------------------
class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_purge_without_yes_off_a_terminal_is_refused_and_deletes_nothing(
    jobs: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(3):
        jobs["ok"].enqueue({"n": i})
    monkeypatch.setattr("sys.stdin", io.StringIO("op\n"))  # a pipe, as in cron or CI

    with pytest.raises(CommandError, match=r"stdin is not a terminal.*--yes"):
        call_command("blamequeue", "purge", "op")
    assert queue.size("op") == 3


def test_purge_on_a_terminal_asks_for_the_queue_name_and_purges_only_when_it_is_typed(
    jobs: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(3):
        jobs["ok"].enqueue({"n": i})
    monkeypatch.setattr("sys.stdin", Terminal())
    answers = iter(["yes", "op"])
    monkeypatch.setattr("builtins.input", lambda prompt: next(answers))

    with pytest.raises(CommandError, match="not confirmed; nothing deleted"):
        call_command("blamequeue", "purge", "op")
    assert queue.size("op") == 3
    assert "purged 3 waiting job(s) from 'op'" in run("blamequeue", "purge", "op")


# -- stats -----------------------------------------------------------------------------------
def test_stats_counts_delayed_jobs_apart_from_due_ones_and_says_when_the_next_is_due(
    jobs: dict[str, Any],
) -> None:
    jobs["ok"].enqueue({"n": 1})
    jobs["ok"].enqueue({"n": 2})
    jobs["ok"].enqueue({"n": 3}, delay=3600)

    lines = run("blamequeue", "--backend", "default", "stats").splitlines()

    header = lines[0].split()
    [row] = [line.split() for line in lines if line.startswith("default") and " op " in line]
    counts = dict(zip(header[2:10], row[2:10], strict=True))
    assert (counts["due"], counts["delayed"]) == ("2", "1")
    assert lines[0].endswith("oldest due  next delayed")
    assert row[-3:] == ["in", "60", "min"]


def test_stats_shows_no_oldest_due_age_when_every_pending_job_is_delayed(
    jobs: dict[str, Any],
) -> None:
    jobs["ok"].enqueue({}, delay=600)
    [row] = [line for line in run("blamequeue", "stats").splitlines() if " op " in line]
    assert row.split()[2:4] == ["0", "1"]
    assert row.split()[-4:] == ["-", "in", "10", "min"]


# -- flow show -------------------------------------------------------------------------------
def test_flow_show_lists_a_parents_children_in_key_order(jobs: dict[str, Any]) -> None:
    parent = jobs["Report"].enqueue({"pages": 12}).job_id
    with capture_jobs() as captured:
        captured.run_jobs("op-reports")  # the fan-out; the pages stay pending

    out = run("blamequeue", "flow", "show", parent)

    keys = re.findall(r"^   · (p\d+) \(tests\.op\.page\)", out, re.M)
    assert keys == [f"p{i}" for i in range(12)]
    assert out.splitlines()[1].startswith("⋯ tests.op.Report [waiting_children]")


# -- schedules -------------------------------------------------------------------------------
def test_schedules_lists_settings_and_admin_schedules_with_their_next_fire_times(
    jobs: dict[str, Any], settings: SettingsWrapper
) -> None:
    settings.BLAMEQUEUE = {
        **settings.BLAMEQUEUE,
        "SCHEDULES": {"nightly": {"job": "tests.op.ok", "cron": "0 3 * * *"}},
    }
    now = get_backend(None).now()
    last = (now - timedelta(seconds=90)).replace(microsecond=0)  # shown to the second
    Schedule.objects.create(name="poll", job="tests.op.ok", interval=60, last_fired_at=last)

    out = run("blamequeue", "schedules")

    nightly, poll = _blocks(out)
    assert nightly.splitlines()[0] == "nightly (settings): tests.op.ok on 'op'"
    assert "  rule        0 3 * * * (UTC)" in nightly and "  last fired  never" in nightly
    fires = [_utc(t) for t in UTC_TIME.findall(nightly.split("next", 1)[1])]
    assert len(fires) == 3 and all(f.hour == 3 and f.minute == 0 for f in fires)
    assert now < fires[0] <= now + timedelta(days=1)
    assert fires[1] - fires[0] == fires[2] - fires[1] == timedelta(days=1)

    assert poll.splitlines()[0] == "poll (admin): tests.op.ok on 'op'"
    assert f"  last fired  {last:%Y-%m-%d %H:%M:%S} UTC" in poll
    poll_fires = [_utc(t) for t in UTC_TIME.findall(poll.split("next", 1)[1])]
    assert [f - last for f in poll_fires] == [timedelta(seconds=s) for s in (120, 180, 240)]


def test_schedules_shows_a_cron_rules_fire_times_in_its_own_timezone_too(
    jobs: dict[str, Any], settings: SettingsWrapper
) -> None:
    rule = {"job": "tests.op.ok", "cron": "30 2 * * *", "timezone": "Europe/Berlin"}
    settings.BLAMEQUEUE = {**settings.BLAMEQUEUE, "SCHEDULES": {"berlin": rule}}
    [block] = _blocks(run("blamequeue", "schedules"))
    assert "  rule        30 2 * * * (Europe/Berlin)" in block
    assert len(re.findall(r"\d\d:\d\d:00 UTC \(02:30 CES?T\)", block)) == 3


def test_schedules_marks_a_disabled_schedule_and_a_job_this_process_does_not_know(
    jobs: dict[str, Any], settings: SettingsWrapper
) -> None:
    settings.BLAMEQUEUE = {
        **settings.BLAMEQUEUE,
        "SCHEDULES": {
            "off": {"job": "tests.op.ok", "interval": 60, "enabled": False},
            "stray": {"job": "gone.jobs.old", "interval": 60},
        },
    }
    out = run("blamequeue", "schedules", "--count", "1")
    off, stray = _blocks(out)
    assert off.splitlines()[-1] == "  next        disabled"
    assert stray.splitlines()[0] == (
        "stray (settings): gone.jobs.old (not registered here: the scheduler skips it)"
    )
    assert len(UTC_TIME.findall(stray)) == 1


def test_schedules_lists_rows_whose_time_zone_this_host_lacks_and_the_others(
    jobs: dict[str, Any],
) -> None:
    Schedule.objects.create(name="cron", job="tests.op.ok", cron="0 3 * * *", timezone="Mars/X")
    Schedule.objects.create(name="every", job="tests.op.ok", interval=60, timezone="Mars/X")
    Schedule.objects.create(name="fine", job="tests.op.ok", interval=60)
    cron, every, fine = _blocks(run("blamequeue", "schedules", "--count", "1"))
    assert "  next        cannot tell: ZoneInfoNotFoundError" in cron
    assert "(unknown time zone 'Mars/X')" in every
    assert len(UTC_TIME.findall(fine)) == 1


def _blocks(out: str) -> list[str]:
    """The output split into one block per schedule (each starts at column 0)."""
    blocks: list[str] = []
    for line in out.splitlines():
        if not line.startswith(" "):
            blocks.append("")
        blocks[-1] += line + "\n"
    return blocks


def _utc(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S UTC").replace(tzinfo=UTC)


def test_show_of_a_job_retried_from_the_dlq_calls_the_reason_its_last_attempts(
    jobs: dict[str, Any],
) -> None:
    """Pending again, not "pending (error)": the reason was the failed attempt's."""
    job_id = jobs["boom"].enqueue({"n": 7}).job_id
    drain("op", "--wait-delayed")
    assert queue.dlq_retry(job_id)

    out = run("blamequeue", "show", job_id)

    assert re.search(r"^  state +pending \(last attempt: error\)$", out, re.M), out
