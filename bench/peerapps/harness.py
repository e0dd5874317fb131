"""What every contender of the peer benchmark shares: the workload and how it is measured.

A contender (one ``Contender`` subclass per library) knows how to enqueue a no-op job one at a
time and in bulk, which command starts one of its worker processes, and how to read back when
its jobs started and finished. ``run()`` drives the same phases for every one of them:

1. start-up CPU: one worker on an empty queue (burst mode, or until it reports itself ready),
   subtracted from the drain's worker CPU so that CPU per job counts the jobs, not imports;
2. single enqueues, one call after the other from one thread;
3. bulk enqueues (where the library has a bulk call), then the drain of those N jobs by the
   variant's worker processes, timed from the first start to the last finish;
4. enqueue→start latency with the variant's workers idle: jobs enqueued one at a time at a
   steady pace.

Every worker is a separate OS process started here and stopped by its pid. This module imports
only the standard library: it runs under the project's .venv and the peers' venv alike.
"""

from __future__ import annotations

import abc
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def log(message: str) -> None:
    print(f"[peers {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------ CPU accounting
def proc_cpu(pid: int, *, reaped: bool) -> float:
    """utime+stime of ``pid`` (plus its reaped children's if ``reaped``), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    if reaped:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK")


def server_cpu(pid: int) -> float:
    """CPU of one server: the process with what it reaped, plus its live children (the
    backends of a PostgreSQL postmaster; a Redis server's threads are in its own figure)."""
    total = proc_cpu(pid, reaped=True)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid == pid:
                total += proc_cpu(int(entry), reaped=False)
        except (OSError, ValueError, IndexError):
            continue
    return total


def servers_cpu() -> dict[str, float]:
    """CPU seconds so far of the benchmark's PostgreSQL and Redis servers (pids from the env)."""
    out = {}
    for name in ("PG", "REDIS"):
        pid = int(os.environ.get(f"BENCH_{name}_PID") or 0)
        if pid:
            out[name.lower()] = server_cpu(pid)
    return out


def children_cpu() -> float:
    """CPU of every reaped descendant of this process: the worker processes (and, for RQ, the
    work horses they forked and reaped)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def wait_for(check: Callable[[], bool], timeout: float, what: str, every: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


# ------------------------------------------------------------------------ shapes
@dataclass(frozen=True)
class Variant:
    """One way of running a library's workers: ``procs`` processes with ``options``."""

    key: str
    label: str
    procs: int = 2
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Window:
    """Done jobs and the first start / last finish (epoch seconds) the library recorded."""

    jobs: int
    first: float
    last: float

    @property
    def rate(self) -> float:
        seconds = self.last - self.first
        return self.jobs / seconds if seconds > 0 else float("inf")


class Workers:
    """Worker processes started together, each stopped by its own pid (never by name)."""

    def __init__(
        self, commands: Sequence[Sequence[str]], env: dict[str, str], logdir: Path, tag: str
    ):
        self.commands = [list(c) for c in commands]
        self.env = env
        self.logdir = logdir
        self.tag = tag
        self.procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> Workers:
        for i, command in enumerate(self.commands):
            out = (self.logdir / f"{self.tag}-{i}.log").open("wb")
            self.procs.append(
                subprocess.Popen(
                    command, stdout=out, stderr=subprocess.STDOUT, env=self.env, cwd=ROOT
                )
            )
            out.close()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop(timeout=60 if exc is None else 10)

    def wait(self, timeout: float) -> None:
        """Burst mode: every process exits by itself once the queue is empty, with status 0."""
        deadline = time.monotonic() + timeout
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise RuntimeError(
                    f"{self.tag}: worker {p.pid} still running; see {self.logdir}"
                ) from None
        bad = [p.returncode for p in self.procs if p.returncode != 0]
        if bad:
            raise RuntimeError(f"{self.tag}: workers exited with {bad}; see {self.logdir}")

    def stop(self, timeout: float = 60) -> None:
        """SIGTERM (each library's graceful stop) to every live worker, SIGKILL past ``timeout``."""
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        killed = []
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                killed.append(p.pid)
        if killed:
            raise RuntimeError(f"{self.tag}: workers {killed} ignored SIGTERM; see {self.logdir}")


class Contender(abc.ABC):
    """One queue library as the benchmark drives it; the class attributes describe the method."""

    key: str
    label: str
    storage: str  # "PostgreSQL" or "Redis"
    single_api: str
    bulk_api: str | None  # None: the library has no bulk enqueue
    drain_method: str
    latency_method: str
    burst = True  # its worker can exit by itself once the queue is empty
    variants: Sequence[Variant] = (Variant("2", "2 worker processes"),)
    #: Worker setups of the ORM workload (``bench/ormapp``: read one row, write one row through
    #: the Django ORM, Django's default ``CONN_MAX_AGE=0``); empty: the library sits it out.
    #: ``options["env"]`` is added to those workers' environment.
    orm_variants: Sequence[Variant] = ()
    orm_method = ""  # how the ORM job runs in this library's worker

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg

    @abc.abstractmethod
    def reset(self) -> None:
        """Delete every job (and record) of the previous phase."""

    @abc.abstractmethod
    def enqueue_one(self, i: int) -> str:
        """Enqueue the no-op job with argument ``i``; answer its id."""

    def enqueue_bulk(self, start: int, stop: int) -> list[str]:
        raise NotImplementedError

    def prepare_drain(self) -> None:
        """Before the workers start on a full queue: what autovacuum would have done by then
        (``ANALYZE``) on PostgreSQL, so that every claim is planned from real statistics."""

    @abc.abstractmethod
    def worker_command(self, variant: Variant, index: int, *, burst: bool) -> list[str]: ...

    @abc.abstractmethod
    def done_count(self, ids: Sequence[str]) -> int:
        """How many jobs are done: of ``ids``, or of all, where the library counts all."""

    @abc.abstractmethod
    def window(self, ids: Sequence[str]) -> Window: ...

    @abc.abstractmethod
    def latencies(self, ids: Sequence[str], sent: dict[str, float]) -> list[float]:
        """Enqueue→start of ``ids`` in ms (``sent``: epoch seconds just before each enqueue)."""

    def enqueue_stamped(self, phase: int, count: int) -> None:
        """Enqueue ``count`` probe jobs (``bench/peerapps/probe.py``) carrying ``time.time()``
        now and ``phase``, in one call where the library has a bulk enqueue."""
        raise NotImplementedError

    def prepare_orm(self) -> None:
        """Before an ORM drain: the accounts seeded, the entries of the previous one deleted."""
        raise NotImplementedError

    def enqueue_orm_bulk(self, start: int, stop: int) -> list[str]:
        """Enqueue the ORM job with arguments ``start`` .. ``stop - 1``; answer their ids."""
        raise NotImplementedError

    def orm_entries(self) -> int:
        """``Entry`` rows written so far (one per ORM job done)."""
        raise NotImplementedError

    def ready_count(self) -> int:
        """Workers that said they are ready (only for libraries without a burst mode)."""
        raise NotImplementedError

    @abc.abstractmethod
    def versions(self) -> dict[str, str]: ...

    def describe(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "label": self.label,
            "storage": self.storage,
            "single_api": self.single_api,
            "bulk_api": self.bulk_api,
            "drain_method": self.drain_method,
            "latency_method": self.latency_method,
            "orm_method": self.orm_method,
            "versions": self.versions(),
        }
