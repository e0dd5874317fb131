"""The control plane's part of the ``queue`` facade: pause and resume, limits, the worker
registry (docs/control.md). Every argument is checked before a backend is called: a
``QueueError`` (``BAD_LIMIT`` for a limit) means nothing was written."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from . import fleet, validation
from .backends import all_backends, get_backend
from .backends.base import Backend
from .conf import get_settings
from .controls import ControlState, QueueControl, QueueLimits, WorkerInfo

T = TypeVar("T")

MAX_REASON = 1000


def _call[T](backend: Backend, fn: Callable[[], T], *, idempotent: bool = False) -> T:
    return backend.resilience.call(fn, idempotent=idempotent)


def _user(user: object) -> str | None:
    return validation.optional_text(user, "user", 150)


def view(backend: Backend, queue: str, state: ControlState | None) -> QueueControl:
    """A queue's control state as the API answers it: the limits in force and their source."""
    state = state or ControlState(queue=queue)
    defaults = get_settings().queues.get(queue)
    return QueueControl(
        backend=backend.alias,
        queue=queue,
        paused=state.paused,
        reason=state.reason,
        paused_at=state.paused_at,
        paused_by=state.paused_by,
        limits=state.in_force(defaults),
        source=state.source(defaults),
        version=state.version,
    )


class ControlPlane:
    """Mixed into ``api.Queue``."""

    def pause(
        self,
        queue_name: str,
        *,
        backend: str | None = None,
        reason: str = "",
        user: str | None = None,
    ) -> None:
        """No worker claims from ``queue_name`` once this returns (in-flight jobs finish);
        listening workers hear it at once, polling ones within a poll interval."""
        b = get_backend(backend)
        q = validation.queue_name(queue_name)
        why = validation.optional_text(reason or None, "reason", MAX_REASON) or ""
        by = _user(user)
        _call(b, lambda: b.pause(q, reason=why, by=by))

    def resume(
        self, queue_name: str, *, backend: str | None = None, user: str | None = None
    ) -> None:
        b = get_backend(backend)
        q = validation.queue_name(queue_name)
        by = _user(user)
        _call(b, lambda: b.resume(q, by=by))

    def is_paused(self, queue_name: str, *, backend: str | None = None) -> bool:
        return self.control(queue_name, backend=backend).paused

    def set_limits(
        self,
        queue_name: str,
        *,
        concurrency: int | None = None,
        key_concurrency: int | None = None,
        rate_limit: tuple[int, float] | None = None,
        key_rate_limit: tuple[int, float] | None = None,
        backend: str | None = None,
        user: str | None = None,
    ) -> QueueLimits:
        """The queue's live limits, across every worker (``None``: no such limit). They
        replace its ``BLAMEQUEUE["QUEUES"]`` defaults as a whole until ``clear_limits``."""
        b = get_backend(backend)
        q = validation.queue_name(queue_name)
        limits = validation.limits(
            concurrency=concurrency,
            key_concurrency=key_concurrency,
            rate_limit=rate_limit,
            key_rate_limit=key_rate_limit,
        )
        by = _user(user)
        _call(b, lambda: b.set_limits(q, limits, by=by))
        return limits

    def clear_limits(
        self, queue_name: str, *, backend: str | None = None, user: str | None = None
    ) -> QueueLimits:
        """Drop the live limits: the queue's settings defaults apply again (answered)."""
        b = get_backend(backend)
        q = validation.queue_name(queue_name)
        by = _user(user)
        _call(b, lambda: b.set_limits(q, None, by=by))
        return get_settings().queues.get(q) or QueueLimits()

    def get_limits(self, queue_name: str, *, backend: str | None = None) -> QueueLimits:
        """The limits in force: the live ones, else the settings' defaults."""
        return self.control(queue_name, backend=backend).limits

    def control(self, queue_name: str, *, backend: str | None = None) -> QueueControl:
        b = get_backend(backend)
        q = validation.queue_name(queue_name)
        states = _call(b, lambda: b.controls([q]), idempotent=True)
        return view(b, q, states.get(q))

    def controls(self, *, backend: str | None = None) -> list[QueueControl]:
        """Every queue of the backend(s) that is paused or limited (live or by settings)."""
        found: list[QueueControl] = []
        for b in [get_backend(backend)] if backend else all_backends():
            states = _call(b, lambda b=b: b.controls(), idempotent=True)  # type: ignore[misc]
            names = sorted(set(states) | set(get_settings().queues))
            for q in names:
                v = view(b, q, states.get(q))
                if v.paused or not v.limits.empty:
                    found.append(v)
        return found

    def workers(self, *, backend: str | None = None) -> list[WorkerInfo]:
        """The worker registry: live workers first (running, stopping), then stopped and gone
        ones until they are pruned."""
        found: list[WorkerInfo] = []
        for b in [get_backend(backend)] if backend else all_backends():
            found += fleet.workers(b)
        return found
