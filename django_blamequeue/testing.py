"""Helpers for tests, ours and users'.

- ``capture_jobs()`` (and the fixtures of ``django_blamequeue.pytest_plugin``): see the jobs
  code under test enqueued and run them in the test's own thread on demand, through the real
  lifecycle — retries with their backoff (recorded, not slept), the DLQ, DAG and ``@flow``
  flows, transactions (a job enqueued in a rolled-back ``atomic()`` was never enqueued).
- ``capture_events()``: audit events as they are sent, with waits on them instead of clocks.
- ``wait_until()``: poll with a deadline, for state that sends no event.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db.models import Q

from django_blamequeue.audit import Event
from django_blamequeue.backends import get_backend
from django_blamequeue.core.records import Claimed, JobInfo
from django_blamequeue.core.states import ACTIVE, State
from django_blamequeue.exceptions import ErrorCode, QueueError
from django_blamequeue.relay.outbox import Relay
from django_blamequeue.signals import audit_event
from django_blamequeue.worker import chaos

if TYPE_CHECKING:
    from django_blamequeue.backends.jobtable.table import JobTable
    from django_blamequeue.worker.execution import Handler


class CapturedEvents:
    """Audit events as they are sent (after commit), with a poll-free ``wait_for``."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._cond = threading.Condition()

    def _receive(self, sender: Any, event: Event, **kwargs: Any) -> None:
        with self._cond:
            self.events.append(event)
            self._cond.notify_all()

    def actions(self, job_id: str | None = None) -> list[str]:
        with self._cond:
            return [e.action for e in self.events if job_id is None or e.job_id == job_id]

    def of(self, action: str) -> list[Event]:
        with self._cond:
            return [e for e in self.events if e.action == action]

    def wait_for(self, predicate: Callable[[list[Event]], bool], timeout: float = 10.0) -> bool:
        """Block until ``predicate(events)`` holds; False at the deadline."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(self.events):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def wait_for_action(
        self, action: str, job_id: str | None = None, count: int = 1, timeout: float = 10.0
    ) -> bool:
        return self.wait_for(
            lambda evs: (
                sum(1 for e in evs if e.action == action and (job_id is None or e.job_id == job_id))
                >= count
            ),
            timeout,
        )


@contextmanager
def capture_events() -> Iterator[CapturedEvents]:
    captured = CapturedEvents()
    audit_event.connect(captured._receive, weak=False)
    try:
        yield captured
    finally:
        audit_event.disconnect(captured._receive)


def wait_until(
    predicate: Callable[[], bool], timeout: float = 10.0, interval: float = 0.01
) -> bool:
    """Poll ``predicate`` until true or the deadline; for state that sends no event."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


# -- capture_jobs ----------------------------------------------------------------------------
LEASE = 3600.0  # seconds: nothing expires while a test runs its jobs


@dataclass(frozen=True, slots=True, kw_only=True)
class Attempt:
    """One attempt ``run_jobs`` made, and where it led."""

    job_id: str
    name: str
    queue: str
    attempt: int
    state: str  # after the ack: done, pending (a retry), failed (the DLQ), cancelled, ...
    error: str | None = None
    backoff: float | None = None  # seconds until the retry (not slept: the clock was moved)
    #: The fault this run carried (``run_jobs(chaos=...)``): "duplicate", "takeover",
    #: "crash_before_ack"; None for a clean run.
    chaos: str | None = None


@dataclass(kw_only=True)
class RunReport:
    """What one ``run_jobs()`` call did, attempt by attempt, in order."""

    attempts: list[Attempt] = field(default_factory=list)
    clock_advanced: float = 0.0  # seconds of backoff (or delay) skipped instead of slept

    def of(self, job_id: str) -> list[Attempt]:
        return [a for a in self.attempts if a.job_id == job_id]

    def _in(self, state: str) -> list[Attempt]:
        return [a for a in self.attempts if a.state == state]

    @property
    def done(self) -> list[Attempt]:
        return self._in("done")

    @property
    def retried(self) -> list[Attempt]:
        return [a for a in self._in("pending") if a.backoff is not None]

    @property
    def dead_lettered(self) -> list[Attempt]:
        return self._in("failed")

    @property
    def backoffs(self) -> list[float]:
        return [a.backoff for a in self.retried if a.backoff is not None]


class JobsDidNotSettle(AssertionError):
    """``run_jobs`` reached ``max_runs``: something keeps enqueueing or retrying."""


class CapturedJobs:
    """The jobs enqueued on one local backend since the capture began; ``run_jobs`` runs them.

    Jobs are real rows of the test database, so whatever the code under test did with its
    transactions is what you see: an enqueue inside a rolled-back ``atomic()`` left nothing.
    """

    def __init__(self, backend: str | None = None) -> None:

        self.backend = get_backend(backend)
        table: JobTable | None = getattr(self.backend, "jobtable", None)
        if table is None:
            raise QueueError(
                ErrorCode.PROTOCOL_UNAVAILABLE,
                f"capture_jobs needs a local backend; {self.backend.alias!r} is "
                f"{self.backend.protocol} (point BLAMEQUEUE at the test database in tests)",
            )
        self._table = table
        self.since = self.backend.now()
        # Only this backend's database: a test may be allowed to touch no other.
        self._relay = Relay(databases=[table.db])
        self._clock = chaos.Clock(self.backend)
        self._chaosed: set[str] = set()

    def _rows(self) -> Any:
        return self._table.jobs().filter(created_at__gte=self.since)

    def jobs_enqueued(
        self, queue: str | None = None, *, name: str | None = None, state: str | None = None
    ) -> list[JobInfo]:
        """Jobs enqueued since the capture began, in enqueue order, as they are now."""
        rows = self._rows()
        if queue is not None:
            rows = rows.filter(queue=queue)
        if name is not None:
            rows = rows.filter(name=name)
        if state is not None:
            rows = rows.filter(state=state)
        found = [
            self.backend.get(job_id) for job_id in rows.order_by("id").values_list("id", flat=True)
        ]
        return [info for info in found if info is not None]

    def now(self) -> datetime:
        """The clock ``run_jobs`` runs at: the engine's, plus the backoff it skipped."""
        return self._clock.now()

    def run_jobs(
        self,
        queue: str | None = None,
        *,
        handler: Handler | None = None,
        until: datetime | timedelta | None = None,
        max_runs: int = 1000,
        chaos: str | None = None,
    ) -> RunReport:
        """Run captured jobs in this thread until nothing is left to run; answer what happened.

        Runs jobs of ``queue`` (default: every queue a captured job is on) by their registered
        ``@job``/``@flow``/``@task`` handler, or ``handler(job, ctx)`` as ``queue.consume``
        would. A failing job retries per its policy: the clock moves past the backoff instead
        of sleeping, and the attempt records it; a job out of attempts lands in the DLQ.
        Delayed jobs stay pending unless ``until`` (a time, or a span from now) reaches them.
        Timeouts are not enforced: the handler runs to its end in the test's thread.

        ``chaos`` plays one delivery fault on each job's first run: ``"duplicate"`` (delivered
        twice, the second ack refused), ``"takeover"`` (the lease expires mid-run and a new
        run takes the job over) or ``"crash_before_ack"`` (the ack is lost; the job runs
        again). A handler whose effects land twice is not idempotent (docs/testing.md).
        """
        mode = chaos_mode(chaos)
        report = RunReport()
        horizon = until if not isinstance(until, timedelta) else self.now() + until
        runs = 0
        while True:
            queues = [queue] if queue is not None else self._queues()
            claimed = self.backend.claim(queues, 1, LEASE, self.now()) if queues else []
            if claimed:
                runs += 1
                if runs > max_runs:
                    raise JobsDidNotSettle(f"run_jobs stopped after {max_runs} runs")
                report.attempts += self._attempts(claimed[0], handler, mode)
                continue
            if self._relay.run_once().moved:  # flow reports and settles, cross-backend jobs
                continue
            if self.backend.expire(self.now()):  # what the sweeper would cancel as expired
                continue
            step = self._next_wait(queues, horizon)
            if step is None:
                return report
            self._clock.advance(step.total_seconds())
            report.clock_advanced += step.total_seconds()

    def _queues(self) -> list[str]:
        return sorted(
            set(self._rows().filter(state__in=list(ACTIVE)).values_list("queue", flat=True))
        )

    def _next_wait(self, queues: list[str], horizon: datetime | None) -> timedelta | None:
        """How far to move the clock to the next retry (or, up to ``horizon``, delayed job)."""
        now = self.now()
        waiting = self._rows().filter(state=State.PENDING, queue__in=queues, available_at__gt=now)
        # retries, and snoozes (a snoozed first attempt has given its attempt back)
        soonest = (
            waiting.filter(Q(attempts__gt=0) | Q(snoozes__gt=0)).order_by("available_at").first()
        )
        if horizon is not None:
            delayed = waiting.filter(available_at__lte=horizon).order_by("available_at").first()
            if delayed is not None and (
                soonest is None or delayed.available_at < soonest.available_at
            ):
                soonest = delayed
        if soonest is None:
            return None
        wait: timedelta = soonest.available_at - now
        return wait + timedelta(microseconds=1)

    def _attempts(self, c: Claimed, handler: Handler | None, mode: str | None) -> list[Attempt]:
        """The runs of one claimed job: one, or those a chaos ``mode`` plays (once per job)."""
        if mode is None or c.job_id in self._chaosed:
            return [self._attempt(c, chaos.run_claimed(self.backend, c, handler, self.now()))]
        self._chaosed.add(c.job_id)
        played = chaos.play(mode, self.backend, c, handler, self._clock)
        return [self._attempt(c, ran, fault) for ran, fault in played]

    def _attempt(self, c: Claimed, ran: chaos.Ran, fault: str | None = None) -> Attempt:
        transition, ack = ran.transition, ran.ack
        if c.parent_id and ack is not None and ack.ok:
            # A worker's commit queues the parent's settle for its relay thread; inside the
            # test's transaction nothing commits (and another thread could not see it), so
            # settle here, on this connection. A parent elsewhere is not found: a no-op.
            self.backend.settle_reported([c.parent_id])
        if ran.crashed:
            state = "crashed"
        else:
            assert ack is not None
            state = ack.state.value if ack.state is not None else "lock_lost"
        retry = state == "pending" and not transition.give_back_attempt
        return Attempt(
            job_id=c.job_id,
            name=c.name,
            queue=c.queue,
            attempt=c.attempt,
            state=state,
            error=transition.error,
            backoff=transition.delay if retry else None,
            chaos=fault,
        )


chaos_mode = chaos.check_mode
CHAOS_MODES = chaos.MODES


@contextmanager
def capture_jobs(backend: str | None = None) -> Iterator[CapturedJobs]:
    """``with capture_jobs() as jobs:`` … ``jobs.jobs_enqueued(queue=…)``, ``jobs.run_jobs()``."""
    yield CapturedJobs(backend)
