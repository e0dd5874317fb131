"""The worker's unsent acks, kept across failures, and what it logs about each one applied.

An ack that could not be sent because the engine is unavailable stays, and goes again with
the next batch: acks are fenced by their token, so sending one twice is safe. An ack batch
the engine *refuses* (an error that is not unavailability: a value it cannot store) is taken
apart: its acks go one at a time until the refused one is found; that one goes again as a
plain decision (``lifecycle.unstorable``), and after ``MAX_REFUSALS`` it is given up — its
lease then expires and the rescuer re-pends the job. One bad ack can never hold back the
others, or the worker.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace

from django_blamequeue import encryption
from django_blamequeue.conf import get_settings
from django_blamequeue.core import lifecycle
from django_blamequeue.core.records import Ack, AckResult, Transition
from django_blamequeue.core.states import Reason, State
from django_blamequeue.exceptions import ErrorCode
from django_blamequeue.observability import metrics
from django_blamequeue.worker.counters import Counters
from django_blamequeue.worker.execution import Run

logger = logging.getLogger("django_blamequeue.worker")

#: Refusals of one ack (alone) before it is given up; the second try is already plain.
MAX_REFUSALS = 3


class PendingAcks:
    """Finished attempts whose ack is not applied yet, in the order they finished."""

    def __init__(self) -> None:
        #: The worker's registry id, carried by each ack into the attempt history.
        self.worker: str | None = None
        self._acks: dict[str, Ack] = {}
        self._runs: dict[str, Run] = {}
        self._suspects: list[str] = []  # the acks of a refused batch, sent one at a time
        self._refusals: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._acks)

    def add(self, run: Run, transition: Transition) -> None:
        c = run.claimed
        self._acks[c.job_id] = Ack(
            job_id=c.job_id, token=c.token, transition=transition, worker=self.worker
        )
        self._runs[c.job_id] = run

    @property
    def isolating(self) -> bool:
        """A refused batch is being taken apart: send acks alone, not with a claim."""
        self._suspects = [j for j in self._suspects if j in self._acks]
        return bool(self._suspects)

    def batch(self) -> list[Ack]:
        """The acks to send now: all of them, or one suspect of a refused batch."""
        if self.isolating:
            return [self._acks[self._suspects[0]]]
        return list(self._acks.values())

    def applied(self, results: list[AckResult]) -> list[tuple[Run, Transition, AckResult]]:
        """Forget the acks the engine answered; each with its run and what was sent."""
        done = []
        for res in results:
            ack = self._acks.pop(res.job_id, None)
            run = self._runs.pop(res.job_id, None)
            self._refusals.pop(res.job_id, None)
            if ack is not None and run is not None:
                done.append((run, ack.transition, res))
        return done

    def refused(self, batch: list[Ack], exc: BaseException) -> list[tuple[Run, Transition]]:
        """The engine refused ``batch``; answers the acks given up (their leases will
        expire and the rescuer re-pends their jobs)."""
        if len(batch) > 1:
            self._suspects = [a.job_id for a in batch]
            return []
        (ack,) = batch
        n = self._refusals[ack.job_id] = self._refusals.get(ack.job_id, 0) + 1
        if n < MAX_REFUSALS:
            plain = lifecycle.unstorable(ack.transition, exc)
            self._acks[ack.job_id] = replace(ack, transition=plain)
            return []
        self._acks.pop(ack.job_id)
        self._refusals.pop(ack.job_id)
        return [(self._runs.pop(ack.job_id), ack.transition)]


def account(
    counters: Counters, alias: str, run: Run, transition: Transition, res: AckResult
) -> None:
    """Count an applied ack, time it, and say what became of the job."""
    c = run.claimed
    if not res.ok:
        logger.warning(
            "ack refused for job %s: %s (another worker took it over)",
            *(c.job_id, ErrorCode.LOCK_LOST),
            extra={"job_id": c.job_id, "queue": c.queue, "attempt": c.attempt},
        )
    else:
        if metrics.enabled:
            metrics.run_finished(alias, c.queue, time.monotonic() - run.started)
        log_applied(run, transition, res.state)
    counters.count(
        res.ok,
        res.state,
        released=transition.give_back_attempt,
        snoozed=transition.snoozed,
        handed_back=transition.reason == Reason.NO_HANDLER,
    )


def log_applied(run: Run, transition: Transition, state: State | None) -> None:
    """One WARNING line for each retry, an ERROR for each move to the DLQ, with the job's id,
    name, queue and attempt and the error (what the operator reads at 3 a.m.); a WARNING for
    each job a stopping worker released, its attempt given back. The traceback goes with the
    final failure only (``LOG_TRACEBACKS``: "every" adds it to each retry's line, "never"
    leaves it to the job's row): a flaky job does not fill the log with the same frames
    attempt after attempt."""
    c = run.claimed
    if state == State.PENDING and transition.give_back_attempt:
        if not (transition.snoozed or transition.reason == Reason.NO_HANDLER):
            logger.warning(
                "job %s (%s) on %s released: back to pending, attempt %s/%s given back",
                *(c.job_id, c.name, c.queue, c.attempt, c.max_attempts),
                extra={"job_id": c.job_id, "queue": c.queue, "attempt": c.attempt},
            )
        return
    if state == State.PENDING:
        level, what = logging.WARNING, f"will be retried in {transition.delay:.3g} s"
    elif state == State.FAILED:
        level, what = logging.ERROR, "moved to the DLQ"
    else:
        return
    reason = transition.reason.value if transition.reason else "error"
    wanted = get_settings().log_tracebacks
    traced = wanted == "every" or (wanted == "final" and level == logging.ERROR)
    plain_trace = encryption.readable(transition.traceback) if traced else None
    trace = f"\n{plain_trace.rstrip()}" if plain_trace else ""
    logger.log(
        level,
        "job %s (%s) on %s failed on attempt %s/%s and %s (%s): %s%s",
        *(c.job_id, c.name, c.queue, c.attempt, c.max_attempts, what, reason),
        *(encryption.readable(transition.error) or "", trace),
        extra={"job_id": c.job_id, "queue": c.queue, "attempt": c.attempt},
    )
