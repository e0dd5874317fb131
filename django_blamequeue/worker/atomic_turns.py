"""On SQLite, a worker's atomic runs take turns, one at a time; its other runs keep every slot.

An ``@job(atomic=True)`` handler runs inside one transaction, and SQLite writes one
transaction at a time: two atomic handlers of one worker would only wait for each other's
write lock, slots and leases held. So a worker on SQLite starts one atomic run at a time; an
atomic job it claimed meanwhile waits its turn, held like a job on probation (not started, its
timeout not running, its lease renewed with the others), and starts as soon as the run before
it ends. While one runs or waits, the worker's claims leave out the queues that hold only
atomic jobs (a claim there could only add more waiting runs); every other queue is claimed as
usual. A waiting run holds a lease but no slot (it has no thread): the worker claims other
jobs into the slots as if it were not there, up to ``concurrency`` waiting runs, so a worker
leases at most twice its slots.

What stays: while an atomic handler runs, the database's write lock is its own, so this
worker's claims and acks (and other processes' writes) wait for its commit. Short atomic jobs
cost the others little; long ones belong on PostgreSQL (docs/effects.md, "What it costs").
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping, Sequence

from django.db import connections

from django_blamequeue.backends.base import Backend
from django_blamequeue.conf import get_settings
from django_blamequeue.jobs import registry
from django_blamequeue.worker.execution import Run


def sqlite_atomic_names(backend: Backend, queues: Sequence[str]) -> list[str]:
    """The atomic jobs a worker of ``queues`` on ``backend`` serves whose transaction runs on
    SQLite (the ones that take turns), by name."""
    if connections[backend.effects_database].vendor != "sqlite":
        return []
    default = get_settings().default_backend
    return sorted(
        d.name
        for d in registry.registered().values()
        if d.atomic and d.queue in queues and (d.backend or default) == backend.alias
    )


def describe(backend: Backend, queues: Sequence[str]) -> str | None:
    """The banner's words for the atomic jobs that take turns here, or None."""
    names = sqlite_atomic_names(backend, queues)
    if not names:
        return None
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return (
        f"{shown}: one at a time (SQLite writes one transaction at a time); the other jobs "
        "keep every slot"
    )


class Turns:
    """One consumer's atomic runs, one at a time (``enabled`` only on SQLite)."""

    def __init__(self, backend: Backend, queues: Sequence[str], *, dispatching: bool) -> None:
        names = sqlite_atomic_names(backend, queues) if dispatching else []
        self.enabled = bool(names)
        by_queue: dict[str, set[bool]] = {}
        for d in registry.registered().values():
            if d.queue in queues:
                by_queue.setdefault(d.queue, set()).add(d.name in names)
        #: Queues whose every registered job takes turns: left out of claims while one waits.
        self.atomic_only = frozenset(q for q, kinds in by_queue.items() if kinds == {True})
        self._waiting: deque[Run] = deque()
        self._current: Run | None = None

    @property
    def waiting(self) -> int:
        """Atomic runs claimed and not started: they hold a lease, not a slot."""
        return len(self._waiting)

    def admit(self, runs: list[Run]) -> list[Run]:
        """The runs to start now: all but the atomic ones that must wait their turn."""
        if not self.enabled:
            return runs
        start = []
        for run in runs:
            if run.invoker is None:  # not atomic
                start.append(run)
            elif self._current is None:
                self._current = run
                start.append(run)
            else:
                run.deadline = None  # its timeout counts from its start
                self._waiting.append(run)
        return start

    def due(self, running: Mapping[str, Run]) -> list[Run]:
        """The waiting run to start now that the one before it ended. By identity: a job
        leased to this worker again (its lease ran out in an outage) has a new run under the
        same id, and the old run's turn ended with it."""
        current = self._current
        if current is not None and running.get(current.claimed.job_id) is not current:
            self._current = current = None
        self._waiting = deque(r for r in self._waiting if running.get(r.claimed.job_id) is r)
        if current is not None or not self._waiting:
            return []
        run = self._current = self._waiting.popleft()
        run.started = now = time.monotonic()
        timeout = run.claimed.timeout or (
            run.definition.options.timeout if run.definition else None
        )
        run.deadline = now + timeout if timeout else None
        return [run]

    def claimable(self, queues: list[str]) -> list[str]:
        """The queues to claim from: while an atomic run runs or waits, not the atomic-only
        ones (what it would claim there could only wait, holding slots and leases)."""
        if self._current is None and not self._waiting:
            return queues
        return [q for q in queues if q not in self.atomic_only]

    def discard(self, run: Run) -> bool:
        """Forget a waiting run (cancelled, lease lost); False if it was not waiting."""
        if run in self._waiting:
            self._waiting.remove(run)
            return True
        return False

    def release_all(self) -> list[Run]:
        """Shutdown: every waiting run, to be released without having run."""
        waiting, self._waiting = list(self._waiting), deque()
        return waiting
