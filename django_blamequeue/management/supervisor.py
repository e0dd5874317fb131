"""``runworker --processes N``: a parent that keeps N worker processes running.

The parent leases nothing and holds no database connection. It starts each worker as it was
started itself (``manage.py runworker …``, the same arguments without ``--processes``),
replaces one that exits — killed, crashed, or recycled after ``--max-jobs-per-process`` /
``--max-memory-per-process`` (docs/operations.md, "Several worker processes") — and passes
SIGTERM/SIGINT on to every worker as SIGTERM, the usual graceful stop (a worker still starting
up, before its handler is installed, just exits: it holds no job yet); a second signal is
passed on too (stop now). Workers run in a session of their own, so a terminal's Ctrl-C
reaches each of them once, through the parent, never twice. A worker whose parent
disappeared (kill -9) stops gracefully by itself: it watches its parent's pid
(``PARENT_ENV``).

A worker that exits within ``QUICK_EXIT`` seconds of its start for any reason but recycling,
again and again, is restarted at once the first time, then after a growing pause (1, 2, 4 …
30 s), so a broken setting is reported every few seconds instead of forking in a tight loop.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import TextIO

#: The exit status of a worker that recycled itself (EX_TEMPFAIL): start a new one.
EXIT_RECYCLE = 75
#: Set in each worker's environment: the supervisor's pid, which the worker watches.
PARENT_ENV = "BLAMEQUEUE_SUPERVISOR_PID"
#: A worker that exits sooner than this after its start (not recycling) is restarted later.
QUICK_EXIT = 5.0
MAX_PAUSE = 30.0


@dataclass(eq=False)
class Slot:
    """One of the N places a worker process runs in, and its current process."""

    number: int
    popen: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    restart_at: float = 0.0  # monotonic; 0: at once
    quick_exits: int = 0  # exits in a row within QUICK_EXIT of the start
    restarts: int = 0
    finished: bool = False  # a burst worker that exited 0: not replaced


@dataclass(eq=False)
class Supervisor:
    """Runs ``command`` (``runworker`` and its arguments) in ``processes`` worker processes."""

    command: Sequence[str]
    processes: int
    out: TextIO
    burst: bool = False
    poll: float = 0.2
    slots: list[Slot] = field(default_factory=list)
    _signals: int = 0
    _received: list[int] = field(default_factory=list)  # signals not yet forwarded
    _wake: threading.Event = field(default_factory=threading.Event)

    def run(self) -> int:
        """Start the workers and keep them running until signalled (or, with ``--burst``,
        until each has finished); answer the exit status."""
        self.slots = [Slot(n) for n in range(1, self.processes + 1)]
        handlers = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            while True:
                self._forward()
                self._reap()
                if self._signals == 0:
                    self._start_due()
                if all(s.popen is None for s in self.slots) and (
                    self._signals or all(s.finished for s in self.slots)
                ):
                    break
                self._wake.wait(self.poll)
                self._wake.clear()
        finally:
            for s, handler in handlers.items():
                signal.signal(s, handler)
        restarts = sum(s.restarts for s in self.slots)
        self._say(f"supervisor stopped: {self.processes} worker process(es), {restarts} restart(s)")
        return 0

    # -- signals ----------------------------------------------------------------------------
    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._received.append(signum)  # forwarded by the loop: no output from a handler
        self._wake.set()

    def _forward(self) -> None:
        while self._received:
            signum = self._received.pop(0)
            self._signals += 1
            alive = [s.popen for s in self.slots if s.popen is not None]
            if self._signals == 1:
                self._say(
                    f"{signal.Signals(signum).name}: stopping {len(alive)} worker process(es) "
                    "(each lets its jobs finish within its grace); signal again to stop now"
                )
            else:
                self._say(f"{signal.Signals(signum).name}: stopping now")
            for popen in alive:  # as SIGTERM: a worker still starting dies quietly of it
                _send(popen, signal.SIGTERM)

    # -- processes --------------------------------------------------------------------------
    def _start_due(self) -> None:
        now = time.monotonic()
        for slot in self.slots:
            if slot.popen is None and not slot.finished and now >= slot.restart_at:
                self._start(slot)

    def _start(self, slot: Slot) -> None:
        slot.popen = subprocess.Popen(
            [*_python(), *self.command],
            env=dict(os.environ, **{PARENT_ENV: str(os.getpid())}),
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        slot.started = time.monotonic()
        self._say(f"worker process {slot.number} started (pid {slot.popen.pid})")

    def _reap(self) -> None:
        now = time.monotonic()
        for slot in self.slots:
            if slot.popen is None or (code := slot.popen.poll()) is None:
                continue
            pid, slot.popen = slot.popen.pid, None
            how = _exit_text(code)
            if self._signals:
                self._say(f"worker process {slot.number} (pid {pid}) stopped: {how}")
                continue
            if code == 0 and self.burst:
                slot.finished = True
                self._say(f"worker process {slot.number} (pid {pid}) finished its burst")
                continue
            slot.restarts += 1
            quick = code != EXIT_RECYCLE and now - slot.started < QUICK_EXIT
            slot.quick_exits = slot.quick_exits + 1 if quick else 0
            pause = min(MAX_PAUSE, 2.0 ** (slot.quick_exits - 2)) if slot.quick_exits > 1 else 0
            slot.restart_at = now + pause
            when = f" in {pause:g} s ({slot.quick_exits} quick exits in a row)" if pause else ""
            self._say(f"worker process {slot.number} (pid {pid}) {how}: starting a new one{when}")

    def _say(self, text: str) -> None:
        self.out.write(f"[supervisor] {text}\n")
        self.out.flush()


def _python() -> list[str]:
    """How this process was started, to start the workers the same way: ``manage.py`` (its
    directory on ``sys.path``, so the settings import), else ``python -m django``."""
    script = sys.argv[0] if sys.argv else ""
    if script.endswith(".py") and os.path.basename(script) != "__main__.py":
        return [sys.executable, script]
    return [sys.executable, "-m", "django"]


def _send(popen: subprocess.Popen[bytes], signum: int) -> None:
    if popen.poll() is None:
        with contextlib.suppress(ProcessLookupError):  # exited since the poll
            popen.send_signal(signum)


def _exit_text(code: int) -> str:
    if code == EXIT_RECYCLE:
        return "recycled"
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return "exited" if code == 0 else f"died (exit status {code})"


def parent_gone() -> bool:
    """In a worker started by a supervisor: has that supervisor gone (we were re-parented)?"""
    expected = os.environ.get(PARENT_ENV)
    return expected is not None and os.getppid() != int(expected)


@dataclass(frozen=True, slots=True)
class RecycleBounds:
    """When a worker stops leasing, lets its jobs finish and exits with ``EXIT_RECYCLE``:
    after ``max_jobs`` claimed jobs, or once its resident memory passes ``max_memory_mb``."""

    max_jobs: int | None = None
    max_memory_mb: int | None = None

    def __bool__(self) -> bool:
        return self.max_jobs is not None or self.max_memory_mb is not None

    def crossed(self, claimed: int) -> str | None:
        """Why this worker must recycle now, or None."""
        if self.max_jobs is not None and claimed >= self.max_jobs:
            return f"{claimed:,} jobs claimed (--max-jobs-per-process {self.max_jobs:,})"
        if self.max_memory_mb is not None:
            rss = resident_mb()
            if rss > self.max_memory_mb:
                return f"{rss:,.0f} MB resident (--max-memory-per-process {self.max_memory_mb:,})"
        return None


def resident_mb() -> float:
    """This process's resident memory now, in MB (Linux: /proc; elsewhere the peak so far)."""
    try:
        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / (2**20 if sys.platform == "darwin" else 2**10)
