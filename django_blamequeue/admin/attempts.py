"""The job page's attempt history: every kept attempt with its worker, times, outcome and
error, grouped into rounds — a DLQ retry starts a new round (its attempts count from 1 again),
and each round links to the one before and after it (docs/admin.md#attempt-history)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from django_blamequeue.admin import display
from django_blamequeue.api import queue
from django_blamequeue.core.records import AttemptInfo, JobInfo
from django_blamequeue.exceptions import QueueError


@dataclass
class Round:
    """The attempts between two DLQ retries (the first round starts at the enqueue)."""

    number: int
    attempts: list[tuple[AttemptInfo, str, str, str]] = field(default_factory=list)

    @property
    def anchor(self) -> str:
        return f"bq-round-{self.number}"


def rounds(attempts: list[AttemptInfo]) -> list[Round]:
    """``attempts`` (oldest first) split where the counter falls back: a DLQ retry."""
    found: list[Round] = []
    last = 0
    for a in attempts:
        if not found or a.attempt <= last:
            found.append(Round(len(found) + 1))
        found[-1].attempts.append(
            (a, display.relative(a.started_at), display.relative(a.finished_at), took(a))
        )
        last = a.attempt
    return found


def took(a: AttemptInfo) -> str:
    if a.started_at is None or a.finished_at is None:
        return "–"
    seconds = (a.finished_at - a.started_at).total_seconds()
    return f"{seconds:.2f} s" if seconds < 60 else display.age(seconds)


def history(
    info: JobInfo, shown: Callable[[list[AttemptInfo]], list[AttemptInfo]] = list
) -> tuple[list[Round], str | None]:
    """The job's rounds, or [] and why not (the engine did not answer); ``shown``: the
    attempts as the user may see them (an encrypted job's errors: ``sealed``)."""
    try:
        return rounds(shown(queue.attempts(info.job_id, backend=info.backend))), None
    except QueueError as exc:
        return [], str(exc)
