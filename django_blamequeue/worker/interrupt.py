"""Interrupting a handler thread: raise a ``JobInterrupted`` inside it, and only inside it.

CPython delivers an async exception at the target thread's next bytecode boundary, so pure
Python handlers stop promptly; a handler blocked inside a C call (a socket read, ``time.sleep``
in C) sees it when the call returns. The worker never waits on that: it acks and frees the
slot at once (docs/lifecycle.md).

``Guard`` makes the window exact: the worker injects only while the thread is in the handler,
and the thread, on leaving, clears anything still pending under the same lock.
"""

from __future__ import annotations

import ctypes
import threading

from django_blamequeue.exceptions import JobInterrupted

_set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc  # (unsigned long, PyObject*)


class Guard:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tid: int | None = None
        self._sent = False  # an interrupt was injected: leave() must clear what may remain

    def enter(self) -> None:
        with self._lock:
            self._tid = threading.get_ident()

    def leave(self) -> None:
        """Leave the handler; swallow an interrupt that raced with its return."""
        while True:
            try:
                with self._lock:
                    tid, self._tid = self._tid, None
                    if tid is not None and self._sent:
                        _clear(tid)
                return
            except JobInterrupted:
                continue

    def interrupt(self, exc_type: type[JobInterrupted]) -> bool:
        """Raise ``exc_type`` in the thread if it is still inside the handler."""
        with self._lock:
            if self._tid is None:
                return False
            self._sent = True
            return bool(_set_async_exc(ctypes.c_ulong(self._tid), ctypes.py_object(exc_type)))


def _clear(tid: int) -> None:
    _set_async_exc(ctypes.c_ulong(tid), None)  # NULL clears a pending async exception
