"""The paced latency benchmark's probe: a job's handler reports when it started, the driver
counts it (``bench/latency.py``). Standard library only: every contender's workers import it.

A stamped job carries ``t`` (``time.time()`` in the producer just before the enqueue call) and
``p`` (the phase). Its handler's first act is ``started(t, p)``: one datagram of the phase and
``time.time() - t`` in ms to the driver's Unix socket (``BENCH_LATENCY_SOCKET``). Both clocks
are this machine's wall clock, and the handler's start is exactly the moment the issue's
"enqueue → start" ends, for every library alike, whatever timestamps it keeps. A Unix datagram
socket on Linux does not drop: a sender blocks while the driver's queue is full, so a sample
is never lost (the driver reads continuously; blocking would show as latency, not vanish).
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import struct
import threading
import time
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

from bench.hdr import Histogram

PACKET = struct.Struct("<Hd")
_sock: socket.socket | None = None


def started(t: float, phase: int) -> None:
    """In a handler: report that the job stamped ``t`` in ``phase`` starts now."""
    global _sock
    latency_ms = (time.time() - t) * 1000
    if _sock is None:
        _sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    _sock.sendto(PACKET.pack(phase, latency_ms), os.environ["BENCH_LATENCY_SOCKET"])


class Receiver:
    """The driver's end, in a process of its own: the producer keeps the driver's GIL busy, and
    a reader that waited for it would block the handlers (the socket does not drop). Counts
    per phase are shared memory; a phase's ``Histogram`` crosses a pipe when asked."""

    PHASES = 64

    def __init__(self, path: Path) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.path = path
        path.unlink(missing_ok=True)
        self.counts = ctx.Array("q", self.PHASES, lock=False)
        self.pipe, theirs = ctx.Pipe()
        ready = ctx.Event()
        self.proc = ctx.Process(
            target=_serve, args=(str(path), self.counts, theirs, ready), daemon=True
        )
        self.proc.start()
        if not ready.wait(60):
            raise RuntimeError("the latency receiver did not start")

    def count(self, phase: int) -> int:
        return int(self.counts[phase])

    def histogram(self, phase: int) -> Histogram:
        self.pipe.send(phase)
        return Histogram.from_json(self.pipe.recv())

    def close(self) -> None:
        self.pipe.send(None)
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
        self.path.unlink(missing_ok=True)


def _serve(path: str, counts: Any, pipe: Connection, ready: Event) -> None:
    """The receiver process: datagrams into histograms; a phase's histogram when asked."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.bind(path)
    phases: dict[int, Histogram] = {}
    lock = threading.Lock()

    def answer() -> None:
        while (phase := pipe.recv()) is not None:
            with lock:
                pipe.send((phases.get(phase) or Histogram()).to_json())
        sock.close()

    threading.Thread(target=answer, daemon=True).start()
    ready.set()
    while True:
        try:
            data = sock.recv(64)
        except OSError:
            return
        phase, ms = PACKET.unpack(data)
        with lock:
            phases.setdefault(phase, Histogram()).record(ms)
        counts[phase] += 1
