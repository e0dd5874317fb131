"""Handlers that end in every hostile way a handler can (tests/processes/test_worker_fuzz.py),
and one that fails plainly (test_worker_logs.py). Each hostile kind fails its own job; the
worker must go on."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from django_blamequeue import job
from django_blamequeue.exceptions import JobTimeout, LeaseLost

HOSTILE_QUEUE = "hostile"
FAILING_QUEUE = "logs"


class StrRaises(Exception):
    def __str__(self) -> str:
        raise RuntimeError("__str__ is broken")


class StrExits(Exception):
    def __str__(self) -> str:
        raise SystemExit(3)


class BothRaise(Exception):
    def __str__(self) -> str:
        raise RuntimeError("__str__ is broken")

    def __repr__(self) -> str:
        raise RuntimeError("__repr__ is broken too")


class HugeStr(Exception):
    def __str__(self) -> str:
        return "z" * 10_000_000


class Fatal(BaseException):
    """A BaseException of the handler's own."""


def _cyclic() -> BaseException:
    exc = ValueError("its own cause")
    exc.__cause__ = exc
    return exc


def _deep_chain(depth: int) -> BaseException:
    exc: BaseException = ValueError("the root")
    for i in range(depth):
        nxt = ValueError(f"link {i}")
        nxt.__context__ = exc
        exc = nxt
    return exc


def _bad_notes() -> BaseException:
    exc = ValueError("with odd notes")
    exc.__notes__ = ["a note with NUL \x00", 42]  # type: ignore[list-item]
    return exc


#: kind → what the handler does (raise it, or return it when it is a result).
KINDS: dict[str, Any] = {
    "str-raises": lambda: StrRaises("boom"),
    "str-exits": lambda: StrExits(),
    "str-and-repr-raise": lambda: BothRaise(),
    "nul": lambda: ValueError("a\x00b"),
    "lone-surrogate": lambda: ValueError("half a pair: \udc80"),
    "ten-megabyte-message": lambda: ValueError("y" * 10_000_000),
    "ten-megabyte-str": lambda: HugeStr(),
    "system-exit": lambda: SystemExit(2),
    "keyboard-interrupt": lambda: KeyboardInterrupt(),
    "generator-exit": lambda: GeneratorExit(),
    "base-exception": lambda: Fatal("a BaseException subclass"),
    "cyclic-cause": _cyclic,
    "deep-chain": lambda: _deep_chain(500),
    "odd-notes": _bad_notes,
    "impostor-timeout": lambda: JobTimeout(),  # the worker's own interrupts, raised by hand
    "impostor-lease-lost": lambda: LeaseLost(),
    "unencodable-result": lambda: object(),
    "nan-result": lambda: float("nan"),
}
RESULTS = frozenset({"unencodable-result", "nan-result"})


@job(queue=HOSTILE_QUEUE, name="procapp.hostile", max_attempts=1)
def hostile(payload: dict[str, Any]) -> Any:
    kind = payload.get("kind")
    if kind is None:
        return {"n": payload["n"]}
    made = KINDS[kind]()
    if kind in RESULTS:
        return made
    raise made


@job(queue=FAILING_QUEUE, name="procapp.fail", backoff_base=0.01)
def fail(payload: dict[str, Any]) -> None:
    raise ValueError(f"boom {payload['n']}")


CRASH_QUEUE = "crashy"


@job(queue=CRASH_QUEUE, name="procapp.crash")
def crash(payload: dict[str, Any]) -> dict[str, int]:
    """``{"crash": true}`` kills its whole worker process (as a segfault in a C extension
    would), a moment after the jobs claimed with it started; the others work half a second."""
    if payload.get("crash"):
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.5)
    return {"pid": os.getpid()}
