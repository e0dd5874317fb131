"""The supervisor's parts that need no process: the arguments each worker process gets, the
recycling bounds, and how an exit reads."""

from __future__ import annotations

import signal
from typing import Any

import pytest

from django_blamequeue.management import supervisor
from django_blamequeue.management.commands.runworker import Command, _worker_command

#: runworker options a worker process does not take from its supervisor.
SUPERVISOR_ONLY = {"processes", "metrics_port", "metrics_address"}


def parsed(*argv: str) -> dict[str, Any]:
    options = vars(Command().create_parser("manage.py", "runworker").parse_args(argv))
    return {
        k: v
        for k, v in options.items()
        if k
        not in (
            "verbosity",
            "settings",
            "pythonpath",
            "traceback",
            "no_color",
            "force_color",
            "skip_checks",
        )
    }


def test_each_worker_process_gets_every_option_of_its_supervisor_but_processes() -> None:
    given = parsed(
        "emails",
        "sms",
        "--backend",
        "pg",
        "--backend",
        "reports",
        "--concurrency",
        "4",
        "--lease",
        "45",
        "--poll",
        "2",
        "--fast-poll",
        "0.1",
        "--rate-limit",
        "10/60",
        "--burst",
        "--wait-delayed",
        "--no-sweep",
        "--grace",
        "12",
        "--progress-interval",
        "30",
        "--processes",
        "3",
        "--max-jobs-per-process",
        "500",
        "--max-memory-per-process",
        "256",
    )
    command = _worker_command(given)
    assert command[0] == "runworker"
    again = parsed(*command[1:])
    assert {k: v for k, v in again.items() if k not in SUPERVISOR_ONLY} == {
        k: v for k, v in given.items() if k not in SUPERVISOR_ONLY
    }
    assert again["processes"] is None and "--processes" not in command


def test_defaults_stay_defaults_in_a_worker_process() -> None:
    given = parsed("--processes", "2")
    assert parsed(*_worker_command(given)[1:]) == {**given, "processes": None}


def test_recycling_bounds_say_why_once_crossed() -> None:
    assert not supervisor.RecycleBounds()
    assert supervisor.RecycleBounds(max_jobs=3).crossed(claimed=2) is None
    assert supervisor.RecycleBounds(max_jobs=3).crossed(claimed=3) == (
        "3 jobs claimed (--max-jobs-per-process 3)"
    )
    huge = supervisor.RecycleBounds(max_memory_mb=1_000_000)
    assert huge.crossed(claimed=0) is None
    tiny = supervisor.RecycleBounds(max_memory_mb=1)  # any Python process is past 1 MB
    assert "MB resident (--max-memory-per-process 1)" in (tiny.crossed(claimed=0) or "")


def test_resident_memory_is_read_in_megabytes() -> None:
    held = bytearray(b"\x01" * 64 * 2**20)
    assert 64 < supervisor.resident_mb() < 64 * 2**10
    del held


@pytest.mark.parametrize(
    ("code", "text"),
    [
        (supervisor.EXIT_RECYCLE, "recycled"),
        (-signal.SIGKILL, "was killed by SIGKILL"),
        (0, "exited"),
        (70, "died (exit status 70)"),
    ],
)
def test_an_exit_reads_as_what_happened(code: int, text: str) -> None:
    assert supervisor._exit_text(code) == text


def test_a_worker_without_a_supervisor_never_thinks_its_parent_gone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(supervisor.PARENT_ENV, raising=False)
    assert not supervisor.parent_gone()
    monkeypatch.setenv(supervisor.PARENT_ENV, "1")  # init: never our parent under pytest
    assert supervisor.parent_gone()
