"""SIGKILL a worker in the middle of a 30-step job and of a 10,000-item batch job: the next
attempt resumes from the last checkpoint, so every step and item is done, and at most
the one in flight at the kill is done twice.

Both jobs run at once in one worker (concurrency 2) and log each step or item when it is done
(``procapp.steps``, ``procapp.batch``), by pid. The step job starts once the batch is under
way, and the worker is killed a third into the step job, so both are in the middle of their
work; a second worker's sweeper rescues the expired leases and resumes them.

Figures: *done twice* = steps or items logged by two attempts (the allowed one is the last
the killed worker logged before its checkpoint was stored); *resumed at* = where the second
attempt started (the checkpoint it read).
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from django_blamequeue import queue

from .conftest import Processes, Report, engine, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, databases="__all__")]

STEPS, STEP_SECONDS = 30, 0.3
ITEMS = 10_000
OVERRIDES = {"SWEEP_INTERVAL": 0.5, "MAX_STALLED_COUNT": 10}


def logged(log: Path, kind: str) -> list[tuple[int, int]]:
    """(step or item, pid) of each line of ``kind`` (a last line cut by the kill is ignored)."""
    found = []
    for line in log.read_text().splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[0] == kind:
            found.append((int(parts[2]), int(parts[3])))
    return found


@pytest.mark.parametrize(
    "backend", ["default", "postgres"], ids=["sqlite", "postgres"], indirect=True
)
def test_a_killed_worker_s_long_jobs_resume_from_their_checkpoints(
    backend: str, processes: Processes, report: Report, tmp_path: Path
) -> None:
    log = tmp_path / "done.log"
    log.touch()
    batch_job = queue.enqueue(
        "proc", {"log": str(log), "items": ITEMS}, name="procapp.batch", backend=backend
    ).job_id
    start = time.monotonic()
    first = processes.worker(
        backend, "--concurrency", "2", "--lease", "2", "--poll", "0.2", overrides=OVERRIDES
    )
    first.wait_started()
    # The step job starts once the batch is under way, and the kill comes a third into it:
    # however fast or slow the batch runs on this machine, both are in the middle then.
    wait_for(lambda: len(logged(log, "batch")) >= ITEMS // 10, 120, "the batch under way")
    step_job = queue.enqueue(
        "proc",
        {"log": str(log), "steps": STEPS, "sleep": STEP_SECONDS},
        name="procapp.steps",
        backend=backend,
    ).job_id
    wait_for(lambda: len(logged(log, "steps")) >= STEPS // 3, 120, "the step job a third done")
    first.kill()
    killed_steps = logged(log, "steps")
    killed_items = logged(log, "batch")
    second = processes.worker(
        backend, "--concurrency", "2", "--lease", "2", "--poll", "0.2", overrides=OVERRIDES
    )
    second.wait_started()

    def done(job_id: str) -> bool:
        info = queue.get_job(job_id, backend=backend)
        assert info is not None and info.state not in ("failed", "cancelled"), info
        return info.state == "done"

    # About 10 s on an idle machine; the bound is for a loaded one (a waited checkpoint per
    # item costs the worker a round trip each: ~1 ms idle, ~10 ms with every core busy).
    wait_for(lambda: done(step_job) and done(batch_job), 300, "both jobs done after the kill")
    elapsed = time.monotonic() - start
    second.stop()

    figures: dict[str, object] = {}
    for kind, job_id, total, at_kill in (
        ("steps", step_job, STEPS, killed_steps),
        ("batch", batch_job, ITEMS, killed_items),
    ):
        entries = logged(log, kind)
        counts = Counter(n for n, _ in entries)
        twice = sorted(n for n, c in counts.items() if c > 1)
        info = queue.get_job(job_id, backend=backend)
        assert info is not None
        resumed_at = info.result["resumed_from"]
        label = "steps" if kind == "steps" else "items"
        figures[f"{label}"] = total
        figures[f"{label}_done_before_the_kill"] = len(at_kill)
        figures[f"{label}_resumed_at"] = resumed_at
        figures[f"{label}_done_twice"] = len(twice)
        assert sorted(counts) == list(range(total)), f"{kind}: some never done"
        assert len(twice) <= 1, f"{kind}: done twice: {twice}"
        if twice:  # the one in flight: the killed worker's last, its checkpoint not yet stored
            assert twice == [at_kill[-1][0]] and resumed_at == at_kill[-1][0]
        assert info.attempts == 2 and info.checkpoint == total
        assert 0 < resumed_at < total
    report(f"checkpoint resume[{engine(backend)}]", **figures, s=elapsed)
