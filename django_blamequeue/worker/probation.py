"""Jobs on probation run alone in their worker, so that a crash convicts only its cause.

When a worker process dies (SIGKILL, the OOM killer, a segfault in a C extension), every job
it held stalls, and nobody can tell which one killed it. Counting a stall against each of
them would dead-letter the innocent along with the guilty. Instead (``core.lifecycle``): a
job that reached ``MAX_STALLED_COUNT`` stalls is on probation, and its worker runs it alone —
no other job runs in the process meanwhile — after marking its lease so
(``Backend.run_alone``). Only a stall of such a lease counts past the limit. A handler that
crashes the process again is then the one in the DLQ, and the jobs that shared its worker
run alone once each, and finish.

The price: while a probation job waits for the others to finish, and while it runs, the
worker claims nothing more. Probation follows crashes only, and other workers go on.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Mapping

from django_blamequeue.backends.base import Backend
from django_blamequeue.core.lifecycle import on_probation
from django_blamequeue.worker.execution import Run

logger = logging.getLogger("django_blamequeue.worker")


class Probation:
    def __init__(self, max_stalled: int) -> None:
        self.max_stalled = max_stalled
        self._held: deque[Run] = deque()
        self._alone: Run | None = None

    @property
    def held(self) -> int:
        """How many runs wait to run alone (read by the registry's thread too)."""
        return len(self._held)

    def admit(self, runs: list[Run]) -> list[Run]:
        """The runs to start now; those on probation are held to run alone, in turn."""
        start = []
        for run in runs:
            if on_probation(stalls=run.claimed.stalls, max_stalled=self.max_stalled):
                run.deadline = None  # its timeout counts from its start
                self._held.append(run)
            else:
                start.append(run)
        return start

    def busy(self, running: Mapping[str, Run]) -> bool:
        """True while a run waits to run alone, or runs alone: claim nothing meanwhile."""
        self._forget_ended(running)
        return bool(self._held) or self._alone is not None

    def next(self, running: Mapping[str, Run]) -> Run | None:
        """The held run to start now, alone: only when every run here is a held one."""
        self._forget_ended(running)
        if not self._held or self._alone is not None:
            return None
        # every held run is tracked (``_forget_ended``), so equal counts mean nothing else runs
        return self._held[0] if len(running) == len(self._held) else None

    def _forget_ended(self, running: Mapping[str, Run]) -> None:
        """Forget the alone run once it ended, and any held run the worker no longer
        tracks as its job's run. The worker discards a held run whose lease ends; this
        check by identity keeps any slip (a job leased here again, its old run replaced)
        from holding the worker back for good: a held run nobody tracks never starts, and
        the worker would claim nothing while it waits."""
        if self._alone is not None and not _tracked(self._alone, running):
            self._alone = None
        for run in [r for r in self._held if not _tracked(r, running)]:
            self._held.remove(run)
            logger.warning(
                "job %s was held to run alone but is no longer this worker's; forgotten",
                run.claimed.job_id,
                extra={"job_id": run.claimed.job_id, "queue": run.claimed.queue},
            )

    def start_next(self, backend: Backend, running: Mapping[str, Run]) -> tuple[Run, bool] | None:
        """Mark the next run's lease alone (``Backend.run_alone``) when it may start; answers
        it and whether the lease was still held (start it then). Raises what the backend
        raised: the run stays held, to be tried again."""
        run = self.next(running)
        if run is None:
            return None
        c = run.claimed
        marked = backend.resilience.call(
            lambda: backend.run_alone(c.job_id, c.token), idempotent=True
        )
        self.started(run)
        if marked:
            logger.warning(
                "job %s (%s) stalled %s time(s) before: running it alone in this worker",
                *(c.job_id, c.name, c.stalls),
                extra={"job_id": c.job_id, "queue": c.queue, "attempt": c.attempt},
            )
            run.started = now = time.monotonic()
            timeout = c.timeout or (run.definition.options.timeout if run.definition else None)
            run.deadline = now + timeout if timeout else None
        return run, bool(marked)

    def started(self, run: Run) -> None:
        """``run`` (from ``next``) leaves the held ones: it runs alone now, or its lease is
        gone."""
        self._held.remove(run)
        self._alone = run

    def discard(self, run: Run) -> bool:
        """Forget a held run (cancelled, lease lost, released); False if it was not held."""
        if run in self._held:
            self._held.remove(run)
            return True
        return False

    def release_all(self) -> list[Run]:
        """Shutdown: every held run, to be released without having run."""
        held, self._held = list(self._held), deque()
        return held


def _tracked(run: Run, running: Mapping[str, Run]) -> bool:
    return running.get(run.claimed.job_id) is run
