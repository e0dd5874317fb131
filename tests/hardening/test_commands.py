"""The commands: bad input is a ``CommandError`` (exit status ≠ 0) with
nothing written, on SQLite and PostgreSQL."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from django_blamequeue import job, queue
from django_blamequeue.core.validation import MAX_SECONDS
from django_blamequeue.jobs import registry

from .conftest import tables

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

ROOT = Path(__file__).resolve().parents[2]
NAME = "tests.hardening.cmd"


@pytest.fixture(autouse=True)
def registered() -> Iterator[None]:
    @job(queue="cmd", name=NAME)
    def ok(payload: object) -> object:
        return payload

    yield
    registry.unregister(NAME)


def refused_command(backend: str, *args: str) -> str:
    """Run ``args``; it must raise ``CommandError`` and write nothing. Answers the message."""
    before = tables(backend)
    shown = f"{' '.join(args)[:80]!r}"
    try:
        call_command(*args, stdout=io.StringIO(), stderr=io.StringIO())
    except CommandError as exc:
        assert tables(backend) == before, f"{shown} wrote, then failed"
        return str(exc)
    pytest.fail(f"{shown} succeeded")


def test_stats_of_an_unknown_backend_fails() -> None:
    message = refused_command("default", "blamequeue", "--backend", "nope", "stats")
    assert "no backend 'nope'" in message


def test_stats_of_an_unknown_backend_exits_non_zero_from_the_command_line() -> None:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    done = subprocess.run(
        # --skip-checks: this settings module's own SQLite file is never migrated, and E040
        # would speak first; the test is about the answer to an unknown backend.
        [
            sys.executable,
            "-m",
            "django",
            "blamequeue",
            "--skip-checks",
            "--backend",
            "nope",
            "stats",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert "UNKNOWN_BACKEND" in done.stderr and "no backend 'nope'" in done.stderr


def test_stats_of_a_named_backend_shows_only_that_backend(backend: str) -> None:
    queue.enqueue("only-here", 1, backend=backend)
    out = io.StringIO()
    call_command("blamequeue", "--backend", backend, "stats", stdout=out)
    lines = out.getvalue().splitlines()
    rows = [line for line in lines if "only-here" in line and not line.startswith("unserved")]
    assert len(rows) == 1 and rows[0].startswith(backend)
    # the note under the table (no live worker serves it) names the same backend only
    assert all(f"on backend {backend}:" in line for line in lines if line.startswith("unserved"))


ENQUEUE_REFUSALS = [
    ["--delay", "1e300"],
    ["--delay", str(MAX_SECONDS + 1)],
    ["--delay", "nan"],
    ["--priority", str(2**40)],
    ["--payload", "NaN"],
    ["--payload", '{"x": [Infinity]}'],
    ["--payload", "[" * 30_000 + "]" * 30_000],
    ["--payload", "[" * 101 + "]" * 101],
    ["--payload", "9" * 5000],
    ["--payload", "{not json"],
    ["--queue", "q\x00"],
    ["--dedupe-key", "k\x00"],
]


def test_enqueue_refuses_bad_options_with_a_command_error(backend: str) -> None:
    for args in ENQUEUE_REFUSALS:
        refused_command(backend, "blamequeue", "--backend", backend, "enqueue", NAME, *args)


def test_enqueue_accepts_the_longest_delay(backend: str) -> None:
    out = io.StringIO()
    call_command(
        "blamequeue", "--backend", backend, "enqueue", NAME, "--payload", json.dumps([1]),
        "--delay", str(MAX_SECONDS), stdout=out,
    )  # fmt: skip
    job_id = out.getvalue().split()[1]
    assert queue.get_job(job_id, backend=backend).state == "pending"  # type: ignore[union-attr]


OPERATOR_REFUSALS = [
    ["dlq", "list", "q", "--limit", str(10**20)],
    ["dlq", "list", "q", "--offset", str(10**20)],
    ["dlq", "list", "q", "--limit", "1e20"],
    ["dlq", "list", "q", "--limit", "0"],
    ["dlq", "retry", ""],
    ["dlq", "retry", "a\x00"],
    ["cancel", ""],
    ["cancel", "x" * 300],
    ["flow", "show", ""],
    ["flow", "show", "f\x00"],
    ["purge", "q\x00", "--yes"],
]


def test_operator_commands_refuse_bad_ids_names_and_ints(backend: str) -> None:
    queue.enqueue("q", 1, backend=backend)
    for args in OPERATOR_REFUSALS:
        refused_command(backend, "blamequeue", "--backend", backend, *args)


RUNWORKER_REFUSALS = [
    ["--concurrency", "100000"],
    ["--lease", "1e300"],
    ["--poll", "1e12"],
    ["--grace", "inf"],
    ["--rate-limit", "1/1e12"],
]


def test_runworker_refuses_options_past_the_bound_and_starts_no_thread(backend: str) -> None:
    threads = threading.active_count()
    for args in RUNWORKER_REFUSALS:
        refused_command(backend, "runworker", "cmd", "--backend", backend, "--no-sweep", *args)
        assert threading.active_count() == threads, args
