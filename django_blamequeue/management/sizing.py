"""How many slots ``runworker`` runs without ``--concurrency``, and how many database
connections a worker may hold: both printed in its banner.

The default comes from a measurement (docs/benchmarks.md, "Choosing the default"): with slots
keeping their connections, ORM jobs (read a row, write a row) reach their plateau between 8
and 16 slots per worker and no-op jobs still gain past it, while every slot can hold a
connection. Ten sits on that plateau and keeps a worker to about fifteen connections, so six
workers fit in PostgreSQL's default ``max_connections`` of 100.

Atomic jobs on SQLite do not change it: they take turns among themselves
(``worker/atomic_turns.py``) while the other jobs keep every slot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django_blamequeue.backends.base import Backend
from django_blamequeue.jobs import registry

#: ``runworker``'s slots when ``--concurrency`` is not given.
DEFAULT_CONCURRENCY = 10


@dataclass(frozen=True, slots=True)
class Concurrency:
    slots: int
    why: str


def default_concurrency(backend: Backend, queues: Sequence[str]) -> Concurrency:
    """The slots of a ``runworker`` of ``queues`` on ``backend`` without ``--concurrency``."""
    return Concurrency(DEFAULT_CONCURRENCY, "default; --concurrency N to change")


@dataclass(frozen=True, slots=True)
class ConnectionBound:
    """At most ``total`` connections to each Django database: one per slot thread that
    touches it, plus one per worker thread named in ``threads``."""

    slots: int
    threads: tuple[str, ...]

    @property
    def total(self) -> int:
        return self.slots + len(self.threads)

    def describe(self) -> str:
        return f"≤ {self.total} per database ({self.slots} slots + {', '.join(self.threads)})"


def connection_bound(
    backend: Backend, queues: Sequence[str], slots: int, *, sweeping: bool
) -> ConnectionBound:
    """What a worker of ``queues`` with ``slots`` may hold open (slot threads keep theirs for
    the worker's life: ``slot_connections``)."""
    threads = ["consumer", "registry", "outbox relay"]
    if backend.supports_listen:
        threads.append("listener")
    if sweeping:
        threads.append("sweeper")
    served = [d for d in registry.registered().values() if d.queue in queues]
    if any(d.is_async for d in served):
        threads.append("event loop")
    if any(d.atomic for d in served) and not backend.effects_with_ack:
        threads.append("effects")
    return ConnectionBound(slots, tuple(threads))
