"""The management commands, through call_command with captured output (docs/commands.md)."""

from __future__ import annotations

import io
import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connections

from django_blamequeue import QueueError, Snooze, job, queue
from django_blamequeue.jobs import registry
from tests.conftest import need_server

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


@pytest.fixture
def jobs() -> Iterator[dict[str, Any]]:
    @job(queue="cmd", name="tests.cmd.ok")
    def ok(payload: Any) -> Any:
        return {"echo": payload}

    @job(queue="cmd", name="tests.cmd.boom", max_attempts=1)
    def boom(payload: Any) -> None:
        raise RuntimeError("boom")

    yield {"ok": ok, "boom": boom}
    registry.unregister("tests.cmd.ok")
    registry.unregister("tests.cmd.boom")


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_runworker_burst_prints_a_banner_and_drains_the_queue(jobs: dict[str, Any]) -> None:
    ids = [jobs["ok"].enqueue({"n": i}).job_id for i in range(20)]
    out = run("runworker", "cmd", "--burst", "--concurrency", "4", "--no-sweep")
    assert "runworker" in out and "queues" in out and "cmd" in out
    assert "burst finished: done 20" in out
    assert all(queue.get_job(i).state == "done" for i in ids)  # type: ignore[union-attr]


def test_runworker_burst_exits_when_nothing_is_due_and_says_what_is_delayed(
    jobs: dict[str, Any],
) -> None:
    """``--burst`` never waits on the future."""
    now = jobs["ok"].enqueue({"n": 1}).job_id
    later = jobs["ok"].enqueue({"n": 2}, delay=600).job_id
    out = run("runworker", "cmd", "--burst", "--no-sweep")
    assert "mode            burst (exit when nothing is due)" in out
    assert "burst finished: done 1" in out
    assert re.search(r"^1 delayed job\(s\) left; the next is due in 10 min \(", out, re.M), out
    assert "--wait-delayed waits for them" in out
    assert queue.get_job(now).state == "done"  # type: ignore[union-attr]
    assert queue.get_job(later).state == "pending"  # type: ignore[union-attr]


def test_runworker_burst_with_wait_delayed_waits_for_delayed_jobs(jobs: dict[str, Any]) -> None:
    soon = jobs["ok"].enqueue({"n": 1}, delay=0.3).job_id
    out = run("runworker", "cmd", "--burst", "--wait-delayed", "--no-sweep")
    assert "burst finished: done 1" in out and "left; the next is due" not in out
    assert queue.get_job(soon).state == "done"  # type: ignore[union-attr]


def test_runworker_warns_of_a_queue_nothing_uses_with_the_nearest_name(
    jobs: dict[str, Any],
) -> None:
    """``runworker cdm`` (a typo of ``cmd``) would wait on an empty queue for nothing."""
    out = run("runworker", "cdm", "--burst", "--no-sweep")
    assert (
        "warning         queue 'cdm' is used by no job, schedule or task of this project and "
        "holds no job: this worker will wait on it for nothing. Did you mean 'cmd'?"
    ) in out, out
    assert "(blamequeue.W041)" in out
    queue.enqueue("bulk", {"n": 1}, name="tests.cmd.ok")  # a job on another queue: in use
    out = run("runworker", "cmd", "bulk", "--burst", "--no-sweep")
    assert "W041" not in out, out


def test_a_job_that_snoozes_forever_fails_at_its_bound_and_the_burst_ends(
    jobs: dict[str, Any],
) -> None:
    """``--burst --wait-delayed`` waits for a snoozed job; ``max_snoozes`` bounds the wait."""

    @job(queue="cmd", name="tests.cmd.not_yet", max_snoozes=3)
    def not_yet(payload: Any) -> None:
        raise Snooze(0.01)

    try:
        job_id = not_yet.enqueue({}).job_id
        out = run("runworker", "cmd", "--burst", "--wait-delayed", "--no-sweep")
    finally:
        registry.unregister("tests.cmd.not_yet")
    assert "burst finished: done 0 · retried 0 · failed 1 · snoozed 3 ·" in out, out
    info = queue.get_job(job_id)
    assert info is not None and info.state == "failed" and info.snoozes == 3
    assert info.error == (
        "Snooze: the job snoozed 3 times, the most it may (3: @job(max_snoozes=), else "
        "MAX_SNOOZES); it fails instead of snoozing forever"
    )


def test_max_snoozes_is_refused_unless_a_count() -> None:
    for bad in (-1, True, 1.5):
        with pytest.raises(QueueError, match="max_snoozes must be an int from 0"):
            job(queue="cmd", name="tests.cmd.bad", max_snoozes=bad)


def test_runworker_says_it_runs_an_event_loop_for_async_jobs(jobs: dict[str, Any]) -> None:
    @job(queue="cmd", name="tests.cmd.fetch")
    async def fetch(payload: Any) -> Any:
        return payload

    try:
        job_id = fetch.enqueue("x").job_id
        out = run("runworker", "cmd", "--burst", "--concurrency", "50", "--no-sweep")
    finally:
        registry.unregister("tests.cmd.fetch")
    assert "1 async def job (tests.cmd.fetch) run on one event loop, sharing the 50 slots" in out
    assert queue.get_job(job_id).result == "x"  # type: ignore[union-attr]


def test_runworker_without_concurrency_runs_the_default_slots_and_bounds_its_connections(
    jobs: dict[str, Any],
) -> None:
    """The default is not 1; the banner says it and the connection bound."""
    out = run("runworker", "cmd", "--burst", "--no-sweep")
    assert re.search(r"^  concurrency +10 \(default; --concurrency N to change\)$", out, re.M), out
    row = re.search(r"^  db connections +≤ (\d+) per database \(10 slots \+ (.+)\)$", out, re.M)
    assert row is not None, out
    threads = row.group(2).split(", ")
    assert {"consumer", "registry"} <= set(threads) and "sweeper" not in threads
    assert int(row.group(1)) == 10 + len(threads)
    ahead = r"^  claim ahead +up to 5 beyond the free slots, while runs average under 0.1 s$"
    assert re.search(ahead, out, re.M), out
    out = run("runworker", "cmd", "--burst", "--concurrency", "3")
    assert re.search(r"^  concurrency +3 \(--concurrency\)$", out, re.M), out
    assert re.search(r"^  claim ahead +up to 1 beyond", out, re.M), out
    assert "(3 slots + consumer, registry, outbox relay, sweeper)" in out


def test_runworker_refuses_a_bad_rate_limit() -> None:
    with pytest.raises(CommandError, match="rate"):
        call_command("runworker", "cmd", "--rate-limit", "0/1")


def test_runworker_refuses_a_non_positive_concurrency() -> None:
    with pytest.raises(CommandError):
        call_command("runworker", "cmd", "--concurrency", "0")


def test_enqueue_command_enqueues_a_registered_job_with_its_payload(jobs: dict[str, Any]) -> None:
    out = run("blamequeue", "enqueue", "tests.cmd.ok", "--payload", json.dumps({"a": 1}))
    job_id = out.split()[1]
    info = queue.get_job(job_id)
    assert info is not None and info.payload == {"a": 1} and info.queue == "cmd"


def test_enqueue_command_refuses_bad_json_and_unknown_names(jobs: dict[str, Any]) -> None:
    with pytest.raises(CommandError, match="JSON"):
        call_command("blamequeue", "enqueue", "tests.cmd.ok", "--payload", "{nope")
    with pytest.raises(CommandError, match="registered"):
        call_command("blamequeue", "enqueue", "tests.cmd.nope")
    assert queue.size("cmd") == 0


def test_dlq_list_and_retry_commands(jobs: dict[str, Any]) -> None:
    failed = jobs["boom"].enqueue({}).job_id
    run("runworker", "cmd", "--burst", "--no-sweep")
    listing = run("blamequeue", "dlq", "list", "cmd")
    assert (
        "1 job(s) in the DLQ" in listing and failed in listing and "RuntimeError: boom" in listing
    )
    assert f"retried {failed}" in run("blamequeue", "dlq", "retry", failed)
    assert queue.get_job(failed).state == "pending"  # type: ignore[union-attr]
    with pytest.raises(CommandError, match="not in the DLQ"):
        call_command("blamequeue", "dlq", "retry", failed)


def test_dlq_retry_all_states_the_count(jobs: dict[str, Any]) -> None:
    for _ in range(3):
        jobs["boom"].enqueue({})
    run("runworker", "cmd", "--burst", "--no-sweep")
    assert "retried 3 job(s)" in run("blamequeue", "dlq", "retry", "--all", "cmd")
    assert queue.dlq_size("cmd") == 0


def test_purge_command_states_the_count(jobs: dict[str, Any]) -> None:
    for i in range(4):
        jobs["ok"].enqueue({"n": i})
    assert "purged 4 waiting job(s)" in run("blamequeue", "purge", "cmd", "--yes")
    assert queue.size("cmd") == 0


def test_cancel_command(jobs: dict[str, Any]) -> None:
    job_id = jobs["ok"].enqueue({}).job_id
    assert "cancelled" in run("blamequeue", "cancel", job_id)
    with pytest.raises(CommandError, match="not cancellable"):
        call_command("blamequeue", "cancel", job_id)
    with pytest.raises(CommandError, match="no job"):
        call_command("blamequeue", "cancel", "01NOPE")


def test_stats_command_shows_counts_and_breaker(jobs: dict[str, Any]) -> None:
    jobs["ok"].enqueue({})
    out = run("blamequeue", "stats")
    assert "cmd" in out and "breaker closed" in out


def test_flow_show_prints_each_node_with_its_state_and_dependencies(jobs: dict[str, Any]) -> None:
    flow = queue.enqueue_flow(
        "cmd",
        [
            {"name": "a", "job": "tests.cmd.ok", "payload": 1},
            {"name": "b", "job": "tests.cmd.ok", "payload": 2, "depends_on": ["a"]},
        ],
    )
    out = run("blamequeue", "flow", "show", flow["flow_id"])
    assert "2 job(s)" in out
    assert "a (tests.cmd.ok) [pending]" in out
    assert "b (tests.cmd.ok) [blocked]" in out and "← a (tests.cmd.ok)" in out


def test_runsweeper_once_reports_each_service() -> None:
    out = run("runsweeper", "--once")
    assert "rescuer[default]" in out and "pruner[default]" in out


def test_an_in_process_burst_worker_closes_its_database_connections_when_it_returns(
    jobs: dict[str, Any],
) -> None:
    """``call_command("runworker", burst=True)`` in a test leaves no session behind, so the
    test database can be dropped at teardown (pytest-django warns otherwise)."""
    need_server("postgres")
    with connections["postgres"].cursor() as cur:  # this thread's own connection stays
        cur.execute("SELECT pg_backend_pid()")
        (mine,) = cur.fetchone()
    ids = [
        queue.enqueue("cmd", {"n": i}, name="tests.cmd.ok", backend="postgres") for i in range(30)
    ]
    out = run("runworker", "cmd", "--burst", "--backend", "postgres", "--concurrency", "8")
    assert "burst finished: done 30" in out and all(i.job_id for i in ids)

    def others() -> tuple[int, str | None]:
        with connections["postgres"].cursor() as cur:
            cur.execute(
                "SELECT count(*), string_agg(query || ' / ' || state, '; ') "
                "FROM pg_stat_activity WHERE datname = current_database() AND pid <> %s",
                [mine],
            )
            return cur.fetchone()  # type: ignore[return-value]

    # A closed session's server process may take a moment to leave pg_stat_activity; a
    # connection left open stays there for good.
    deadline = time.monotonic() + 5
    while (left := others())[0] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert left[0] == 0, left[1]
