"""What long-running commands show: a start-up banner and a throttled progress line.

On a terminal the line is redrawn in place a few times a second; in a log (not a TTY) a full
line is written at most every ``log_interval`` seconds, and only when it says something new: an
idle worker writes its line once (at 0.0/s), not the same line every ten seconds.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Sequence
from typing import TextIO

from django_blamequeue.worker.counters import Counters


def banner(title: str, rows: Sequence[tuple[str, str]]) -> str:
    width = max(len(k) for k, _ in rows) if rows else 0
    lines = [title, "─" * max(len(title), 40)]
    lines += [f"  {k.ljust(width)}  {v}" for k, v in rows]
    return "\n".join(lines)


def worker_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def fmt_rate(n: float) -> str:
    return f"{n:,.0f}/s" if n >= 10 else f"{n:.1f}/s"


class ProgressLine:
    def __init__(
        self,
        out: TextIO,
        counters: Callable[[], Counters],
        in_flight: Callable[[], str],
        *,
        notes: Callable[[], list[str]] | None = None,
        tty: bool | None = None,
        tty_interval: float = 0.5,
        log_interval: float = 10.0,
    ) -> None:
        self.out = out
        self.counters = counters
        self.in_flight = in_flight
        self.notes = notes or (lambda: [])
        self.tty = out.isatty() if tty is None else tty
        self.interval = tty_interval if self.tty else log_interval
        self._last = time.monotonic()
        self._last_done = 0
        self._start = time.monotonic()
        self._drawn = False
        self._written = ""  # the last line written to a log, without its time

    def text(self, now: float, *, final: bool = False) -> str:
        c = self.counters()
        finished = c.done + c.failed + c.cancelled
        elapsed = max(now - self._start, 1e-9)
        window = max(now - self._last, 1e-9)
        rate = (finished - self._last_done) / window
        parts = [
            f"done {c.done:,}",
            f"retried {c.retried:,}",
            f"failed {c.failed:,}",
        ]
        if c.cancelled:
            parts.append(f"cancelled {c.cancelled:,}")
        if c.released:
            parts.append(f"released {c.released:,}")
        if c.lock_lost:
            parts.append(f"lock lost {c.lock_lost:,}")
        if c.timed_out:
            parts.append(f"timed out {c.timed_out:,}")
        if c.snoozed:
            parts.append(f"snoozed {c.snoozed:,}")
        if c.handed_back:
            parts.append(f"handed back {c.handed_back:,} (no handler here)")
        parts += self.notes()
        if final:
            parts.append(f"{fmt_rate(finished / elapsed)} over {elapsed:.1f} s")
        else:
            parts += [f"in flight {self.in_flight()}", fmt_rate(rate)]
        return " · ".join(parts)

    def tick(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < self.interval:
            return
        line = self.text(now)
        c = self.counters()
        self._last_done = c.done + c.failed + c.cancelled
        self._last = now
        if self.tty:
            self.out.write("\r\x1b[2K" + line)
            self._drawn = True
        elif line == self._written:
            return  # nothing moved since the last line: an idle worker does not repeat it
        else:
            self.out.write(time.strftime("%H:%M:%S ") + line + "\n")
            self._written = line
        self.out.flush()

    def close(self) -> str:
        summary = self.text(time.monotonic(), final=True)
        if self.tty and self._drawn:
            self.out.write("\r\x1b[2K")
        self.out.flush()
        return summary
