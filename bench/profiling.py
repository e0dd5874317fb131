"""Where a drain's time goes: py-spy on one worker process, ``pg_stat_statements`` on the server.

``--py-spy DIR`` (``bench/orm.py``, ``bench/ceiling.py``): ``py-spy record --nonblocking``
``--gil`` samples the first worker from its start-up banner to its exit, only the thread that
holds the GIL, so the samples measure the worker's Python time (not the kernel's, nor C code
that released the GIL: compare with the worker CPU the drain reports) into ``DIR/<tag>.txt``
(collapsed stacks: ``frame;frame;… count``), summarized here per job: µs of sampled time by
the function it was in (self), by every function on the stack (inclusive), and by area.
``--pg-stats N``: the N statements with the most execution time in the server, per job.
py-spy is not a dependency of the project: ``.venv/bin/pip install py-spy``.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

RATE = 250  # samples per second

_LINE = re.compile(r"\s*\(([^()]*?)(?::\d+)?\)$")


def _py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(found).exists():
        raise SystemExit("--py-spy needs py-spy: .venv/bin/pip install py-spy")
    return found


class Spy:
    """``py-spy record`` of one process into ``directory/<tag>.txt``, from ``start()`` until
    the process exits; does nothing without a ``directory``."""

    def __init__(self, directory: Path | None, tag: str) -> None:
        self.out = directory / f"{tag}.txt" if directory is not None else None
        self.proc: subprocess.Popen[bytes] | None = None
        self.done_at_start = 0

    def start(self, pid: int, done: int) -> None:
        if self.out is None or self.proc is not None:
            return
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.done_at_start = done
        command = [_py_spy(), "record", "--pid", str(pid), "--rate", str(RATE)]
        command += ["--format", "raw", "--nonblocking", "--gil", "--output", str(self.out)]
        self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self, interrupt: bool = False) -> Path | None:
        """Wait for py-spy (it stops once the process it records has exited, or on SIGINT with
        ``interrupt``, writing what it has); the file, if it recorded."""
        if self.proc is None:
            return None
        if interrupt:
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            self.proc.wait()
        return self.out


def _frame(raw: str) -> str:
    """``func (path/file.py:123)`` → ``path/file.py:func``."""
    m = _LINE.search(raw)
    if not m:
        return raw.strip()
    return f"{m.group(1)}:{raw[: m.start()].strip()}"


def area(frame: str) -> str:
    """The part of the stack a frame belongs to, for the per-area table."""
    path = frame.rsplit(":", 1)[0]
    if "django_blamequeue/" in path:
        rest = path.split("django_blamequeue/", 1)[1]
        return "django_blamequeue/" + rest.removesuffix(".py")
    for name in ("django/db", "django", "psycopg", "json", "threading", "logging", "uuid"):
        if f"{name}/" in path or path.startswith(f"{name}.py") or f"/{name}.py" in path:
            return name
    return "other: " + path.rsplit("/", 1)[-1]


def summarize(path: Path, jobs: int, top: int = 25) -> dict[str, Any]:
    """µs per job (samples / RATE / jobs) by self function, inclusive function and area."""
    self_: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    areas: Counter[str] = Counter()
    total = 0
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {"error": f"no py-spy output at {path}"}
    for line in lines:
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [_frame(f) for f in stack.split(";") if f]
        total += n
        self_[frames[-1]] += n
        areas[area(frames[-1])] += n
        for f in set(frames):
            inclusive[f] += n

    def per_job(c: Counter[str]) -> list[tuple[str, float, float]]:
        return [(k, 1e6 * v / RATE / jobs, 100 * v / max(total, 1)) for k, v in c.most_common(top)]

    return {
        "file": str(path),
        "samples": total,
        "sampled_cpu_us_per_job": 1e6 * total / RATE / max(jobs, 1),
        "self": per_job(self_),
        "inclusive": per_job(inclusive),
        "areas": per_job(areas),
    }


def statements(top: int, jobs: int) -> dict[str, Any]:
    """This database's costliest statements since the last ``pg_stat_statements_reset()``."""
    from bench.drain import sql

    where = "dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
    ((total_ms, plan_ms, calls),) = sql(
        "SELECT coalesce(sum(total_exec_time), 0), coalesce(sum(total_plan_time), 0), "
        f"coalesce(sum(calls), 0) FROM pg_stat_statements WHERE {where}"
    )
    rows = sql(
        f"SELECT total_exec_time, total_plan_time, calls, rows, query FROM pg_stat_statements "
        f"WHERE {where} ORDER BY total_exec_time + total_plan_time DESC LIMIT %s",
        [top],
    )
    return {
        "exec_us_per_job": 1000 * float(total_ms) / jobs,
        "plan_us_per_job": 1000 * float(plan_ms) / jobs,
        "calls_per_job": int(calls) / jobs,
        "top": [
            {
                "us_per_job": 1000 * float(ms) / jobs,
                "plan_us_per_job": 1000 * float(pms) / jobs,
                "calls_per_job": c / jobs,
                "rows": r,
                "mean_us": 1000 * float(ms) / max(c, 1),
                "mean_plan_us": 1000 * float(pms) / max(c, 1),
                "query": " ".join(q.split()),
            }
            for ms, pms, c, r, q in rows
        ],
    }


def print_profile(title: str, result: dict[str, Any], width: int = 110) -> None:
    """The py-spy and pg_stat_statements parts of one drain's result, as text."""
    spy = result.get("py_spy")
    if spy and "error" not in spy:
        print(
            f"\n{title}: py-spy on worker 0, {spy['samples']:,} samples = "
            f"{spy['sampled_cpu_us_per_job']:,.0f} µs of sampled CPU per job of this worker's "
            f"share ({spy['file']})"
        )
        for name in ("areas", "self", "inclusive"):
            print(f"  by {name} (µs/job, % of samples):")
            for frame, us, pct in spy[name]:
                print(f"    {us:8.1f} {pct:5.1f} %  {frame[: width - 20]}")
    stats = result.get("pg_statements")
    if stats:
        print(
            f"\n{title}: pg_stat_statements, {stats['exec_us_per_job']:,.0f} µs of statement "
            f"execution + {stats.get('plan_us_per_job', 0):,.0f} µs of planning and "
            f"{stats['calls_per_job']:.2f} statements per job; costliest:"
        )
        print("  exec µs/job  plan µs/job  calls/job  mean exec µs  mean plan µs  statement")
        for s in stats["top"]:
            print(
                f"  {s['us_per_job']:11.1f} {s.get('plan_us_per_job', 0):12.1f} "
                f"{s['calls_per_job']:10.3f} {s['mean_us']:13.1f} {s.get('mean_plan_us', 0):13.1f}"
                f"  {s['query'][:width]}"
            )
