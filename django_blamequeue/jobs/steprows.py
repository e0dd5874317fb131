"""The rows of a durable workflow: reading its recorded steps, committing one, consuming an
event. Every read and write of a step's result goes through here (``encode`` / ``decode``),
the one seam where a stored result could be encrypted at rest like a payload.

A step's row commits in a transaction on the backend's ``effects_database`` and is fenced
twice: by its unique keys (job, seq) and (job, name, occurrence), so the first run to commit
a step owns it, and, where the job rows live in that same database (the local backend, the
SQS ledger), by a locking read of the job's row under the run's lease token
(``Backend.fence_step``), so a run that lost its lease commits nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, connections, transaction

from django_blamequeue import encryption
from django_blamequeue.core import validation
from django_blamequeue.exceptions import ErrorCode, QueueError
from django_blamequeue.models import WorkflowEvent, WorkflowStep

#: The largest step result, in bytes of its JSON text: a step's result rides on every
#: replay of its workflow (one read per attempt), so keep results to what later steps need.
MAX_STEP_BYTES = 1_048_576


def encode(value: Any, what: str) -> str:
    """``value`` as stored JSON text, or ``QueueError`` (nothing is recorded)."""
    problem = validation.json_problem(value)
    if problem is not None:
        raise QueueError(ErrorCode.BAD_PAYLOAD, f"{what} {problem}")
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise QueueError(
            ErrorCode.BAD_PAYLOAD,
            f"{what} must be JSON (dict, list, str, int, float, bool or None), "
            f"not {validation.shown(value)}: {exc}",
        ) from None
    if len(text.encode("utf-8")) > MAX_STEP_BYTES:
        raise QueueError(
            ErrorCode.PAYLOAD_TOO_LARGE, f"{what} is larger than {MAX_STEP_BYTES:,} bytes of JSON"
        )
    return text


def sealed(text: str) -> str:
    """A step's stored text for an encrypted job (``fernet:<token>``, docs/encryption.md)."""
    sealed_text = encryption.seal_text(text)
    assert sealed_text is not None
    return sealed_text


def decode(text: str | None) -> Any:
    """The stored value; an encrypted job's (``sealed``) opened first (``DECRYPT_FAILED``
    when no configured key opens it)."""
    if text is None:
        return None
    return json.loads(encryption.open_text(text) or "null")


def size_of(text: str | None) -> int:
    return 0 if text is None else len(text.encode("utf-8"))


def recorded(db: str, job_id: str) -> dict[int, WorkflowStep]:
    """A job's recorded steps by place (one query per attempt)."""
    return {r.seq: r for r in WorkflowStep.objects.using(db).filter(job_id=job_id)}


class Stale(Exception):
    """The run lost its lease before the step committed: everything rolled back."""


class Taken(Exception):
    """Another run committed this step first: this one rolled back; ``row`` is theirs."""

    def __init__(self, row: WorkflowStep) -> None:
        super().__init__(row.name)
        self.row = row


@dataclass(frozen=True, slots=True)
class Fence:
    """What a step's transaction checks before it commits."""

    db: str
    job_id: str
    token: str
    backend: Any  # the job's Backend (its ``fence_step``)

    def check(self) -> None:
        if self.backend.fence_step(self.job_id, self.token) is False:
            raise Stale


def put(fence: Fence, row: WorkflowStep, *, replacing: WorkflowStep | None) -> WorkflowStep:
    """Write ``row`` in the open transaction: over ``replacing`` (this run's own earlier
    record: a failed try, a waiting timer) if it is still as read, else as a new row. Raises
    ``Taken`` when another run recorded the step, ``Stale`` when the lease is gone."""
    db = fence.db
    if replacing is not None:
        fields = {
            f: getattr(row, f)
            for f in (
                "name",
                "kind",
                "status",
                "attempt",
                "result",
                "result_bytes",
                "error",
                "finished_at",
                "wake_at",
                "event_name",
                "event_key",
                "child_id",
                "child_backend",
            )
        }
        same = WorkflowStep.objects.using(db).filter(
            id=replacing.id, status=replacing.status, attempt=replacing.attempt
        )
        if not same.update(**fields):
            raise Taken(WorkflowStep.objects.using(db).get(id=replacing.id))
        row.id = replacing.id
    else:
        inserted = _insert(db, row)
        if inserted is None:
            theirs = WorkflowStep.objects.using(db).filter(job_id=row.job_id, seq=row.seq).first()
            if theirs is None:
                theirs = WorkflowStep.objects.using(db).get(
                    job_id=row.job_id, name=row.name, occurrence=row.occurrence
                )
            raise Taken(theirs)
        row.id = inserted
    fence.check()
    return row


_TABLE = WorkflowStep._meta.db_table
_FIELDS = [f for f in WorkflowStep._meta.concrete_fields if not f.primary_key]
_INSERT = (
    f"INSERT INTO {_TABLE} ({', '.join(str(f.column) for f in _FIELDS)}) "
    f"VALUES ({', '.join(['%s'] * len(_FIELDS))}) ON CONFLICT DO NOTHING RETURNING id"
)


def _insert(db: str, row: WorkflowStep) -> int | None:
    """``INSERT … ON CONFLICT DO NOTHING RETURNING``: the new row's id, or None when another
    run holds the step's place or key. One statement, no savepoint, no ``IntegrityError``
    (on PostgreSQL a conflicting insert still open elsewhere makes this one wait for it)."""
    connection = connections[db]
    values = [f.get_db_prep_save(getattr(row, f.attname), connection) for f in _FIELDS]
    with connection.cursor() as cur:
        cur.execute(_INSERT, values)
        found = cur.fetchone()
    return None if found is None else int(found[0])


def note_failure(db: str, row: WorkflowStep, existing: WorkflowStep | None) -> None:
    """Record a step's failed try for the timeline (best effort, outside any transaction:
    the try's writes rolled back; a later try replaces it)."""
    try:
        if existing is not None:
            WorkflowStep.objects.using(db).filter(id=existing.id, status="failed").update(
                error=row.error, attempt=row.attempt, finished_at=row.finished_at
            )
        else:
            with transaction.atomic(using=db):
                row.save(using=db, force_insert=True)
    except IntegrityError:
        pass  # another run recorded it meanwhile: theirs stands


def take_event(db: str, name: str, key: str, job_id: str, now: datetime) -> WorkflowEvent | None:
    """In the open transaction: the oldest unconsumed, unexpired event ``name``/``key``,
    now consumed by ``job_id`` (commits, or rolls back, with the step that receives it)."""
    open_events = WorkflowEvent.objects.using(db).filter(
        name=name, key=key, consumed_by__isnull=True, expires_at__gt=now
    )
    for event in open_events.order_by("id")[:5]:
        taken = WorkflowEvent.objects.using(db).filter(id=event.id, consumed_by__isnull=True)
        if taken.update(consumed_by=job_id, consumed_at=now):
            event.consumed_by = job_id
            return event
    return None


def reseal(
    db: str, text: Callable[[str | None], str | None], limit: int = 500
) -> Iterator[tuple[str, int, int]]:
    """``blamequeue rotate-keys`` over the workflow rows of database ``db``: the sealed step
    results and errors, then the sealed event payloads, re-sealed by ``text`` in batches of
    ``limit`` (one transaction each), each row only if it still holds what was read (a run
    that records its step meanwhile wins). Yields ``(what, read, rewritten)`` per batch."""
    sealed = encryption.TEXT_PREFIX
    steps = WorkflowStep.objects.using(db)
    events = WorkflowEvent.objects.using(db)
    tables: list[tuple[str, Any, tuple[str, ...]]] = [
        (
            "step",
            steps.filter(result__startswith=sealed) | steps.filter(error__startswith=sealed),
            ("result", "error"),
        ),
        ("event", events.filter(payload__startswith=sealed), ("payload",)),
    ]
    for what, rows, fields in tables:
        after = 0
        while batch := list(
            rows.filter(id__gt=after).order_by("id").values_list("id", *fields)[:limit]
        ):
            rewritten = 0
            with transaction.atomic(using=db):
                for pk, *old in batch:
                    new = [text(v) for v in old]
                    if new != old:
                        as_read = dict(zip(fields, old, strict=True))
                        same = rows.model.objects.using(db).filter(pk=pk, **as_read)
                        rewritten += same.update(**dict(zip(fields, new, strict=True)))
            after = batch[-1][0]
            yield what, len(batch), rewritten
