"""From enqueue arguments to stored jobs: validate, encode, build ``NewJob``s, store them.

Every way a job is enqueued goes through here — the ``queue`` facade, ``@job``'s
``.enqueue``, a flow's fan-out and the scheduler — so each rule (defaults from the job's
definition, the trace id, the transactional outbox) is written once. Everything is checked and
every payload encoded before a backend is called: a ``QueueError`` from here means nothing
was written. Callers resolve the job's definition (``registry``) and pass it in.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import connections

from django_blamequeue import audit
from django_blamequeue.backends import get_backend
from django_blamequeue.backends.base import Backend
from django_blamequeue.conf import get_settings
from django_blamequeue.context import current_job_or_none
from django_blamequeue.core import ids, validation, wire
from django_blamequeue.core.records import EnqueuedJob, NewJob
from django_blamequeue.exceptions import ErrorCode, QueueError
from django_blamequeue.jobs import origin
from django_blamequeue.observability import tracing
from django_blamequeue.relay import outbox
from django_blamequeue.serializers import encode_many

if TYPE_CHECKING:
    from django_blamequeue.jobs.registry import JobDefinition


def new_jobs(
    queue_name: str,
    payloads: Sequence[Any],
    *,
    definition: JobDefinition | None,
    name: str | None,
    delay: Any,
    run_at: Any,
    priority: Any,
    max_attempts: Any,
    classification: Any,
    trace_id: Any,
    dedupe_keys: Sequence[Any],
    job_ids: Sequence[str | None] | None = None,
    concurrency_keys: Sequence[Any] | None = None,
    abouts: Sequence[Any] | None = None,
    cause: Mapping[str, Any] | None = None,
) -> list[NewJob]:
    """Validated jobs of one queue; what they share is checked once, not per payload.

    ``abouts``: the model object (or key) each job is about; ``cause``: origin keys the
    caller knows (a schedule, a flow). The origin is captured once for the whole batch.
    A job's concurrency key is the caller's, else its ``@job``'s ``concurrency_key`` (a
    string, or a callable of the payload); ``ABOUT`` is the job's ``about`` key.
    """
    if max_attempts is None:
        max_attempts = (definition.max_attempts if definition else None) or (
            get_settings().default_max_attempts
        )
    ctx = current_job_or_none()
    common: dict[str, Any] = {
        "queue": validation.queue_name(queue_name),
        "name": name or queue_name,
        "priority": validation.priority(priority),
        "delay": validation.delay(delay),
        "run_at": validation.run_at(run_at),
        "max_attempts": validation.positive_int(max_attempts, "max_attempts"),
        "timeout": definition.timeout if definition else None,
        "classification": validation.optional_text(classification, "classification", 100),
    }
    shared_trace = (
        validation.optional_text(trace_id, "trace_id", 64)
        or tracing.current_trace_id()
        or (ctx.trace_id if ctx and ctx.trace_id else None)
    )
    flow = definition.flow if definition is not None else None
    keys = _about_keys(abouts, len(payloads))
    ckeys = _concurrency_keys(payloads, concurrency_keys, definition, keys)
    common["origin"] = origin.capture(cause)
    jobs = []
    for i, payload in enumerate(encode_many(payloads)):
        new = NewJob(
            job_id=(job_ids[i] if job_ids is not None else None) or ids.new_id(),
            payload=payload,
            trace_id=shared_trace or os.urandom(16).hex(),  # uuid4().hex's shape, cheaper
            dedupe_key=key_or_about(dedupe_keys[i], keys[i], "dedupe_key"),
            about=keys[i],
            concurrency_key=ckeys[i],
            **common,
        )
        if flow is not None:
            new = replace(
                new, flow_phase="fan_out", flow_mode=flow.on_child_failure, flow_id=new.job_id
            )
        jobs.append(new)
    return jobs


def _concurrency_keys(
    payloads: Sequence[Any],
    given: Sequence[Any] | None,
    definition: JobDefinition | None,
    abouts: Sequence[str | None],
) -> list[str | None]:
    """Each payload's validated concurrency key (the caller's, else the ``@job``'s; ``ABOUT``:
    the job's ``about`` key, one tenant per object)."""
    default = definition.concurrency_key if definition is not None else None
    keys: list[str | None] = []
    for i, payload in enumerate(payloads):
        key = given[i] if given is not None else None
        if key is None and default is not None:
            try:
                key = default(payload) if callable(default) else default
            except Exception as exc:
                raise QueueError(
                    ErrorCode.BAD_ARGUMENT,
                    f"the concurrency_key of @job {definition.name!r} raised "  # type: ignore[union-attr]
                    f"{type(exc).__name__}: {exc}",
                ) from exc
        if key is origin.ABOUT:
            key = key_or_about(key, abouts[i], "concurrency_key")
        keys.append(validation.concurrency_key(key))
    return keys


def _about_keys(abouts: Sequence[Any] | None, n: int) -> list[str | None]:
    """Each job's ``about`` key (``origin.about_key``); one object's key is computed once."""
    if abouts is None:
        return [None] * n
    if len(abouts) != n:
        raise QueueError(ErrorCode.BAD_ARGUMENT, "abouts must match payloads in length")
    seen: dict[int, str] = {}
    keys: list[str | None] = []
    for obj in abouts:
        if obj is None:
            keys.append(None)
        elif id(obj) in seen:
            keys.append(seen[id(obj)])
        else:
            keys.append(seen.setdefault(id(obj), origin.about_key(obj)))
    return keys


def key_or_about(value: Any, about: str | None, what: str) -> str | None:
    """A key as given (``dedupe_key``; the control plane's ``concurrency_key`` the same way),
    or for ``ABOUT`` the job's ``about`` key: one live (or running) job per object."""
    if value is origin.ABOUT:
        if about is None:
            raise QueueError(ErrorCode.BAD_ARGUMENT, f"{what}=ABOUT needs about=")
        return about
    return validation.optional_text(value, what, 255)


def new_job(
    queue_name: str,
    payload: Any,
    *,
    definition: JobDefinition | None = None,
    name: str | None = None,
    delay: Any = None,
    run_at: Any = None,
    priority: Any = 0,
    max_attempts: Any = None,
    classification: Any = None,
    trace_id: Any = None,
    dedupe_key: Any = None,
    job_id: str | None = None,
    concurrency_key: Any = None,
    about: Any = None,
    cause: Mapping[str, Any] | None = None,
) -> NewJob:
    """One validated job (the arguments as for ``new_jobs``)."""
    return new_jobs(
        queue_name,
        [payload],
        definition=definition,
        name=name,
        delay=delay,
        run_at=run_at,
        priority=priority,
        max_attempts=max_attempts,
        classification=classification,
        trace_id=trace_id,
        dedupe_keys=[dedupe_key],
        job_ids=[job_id],
        concurrency_keys=[concurrency_key],
        abouts=[about],
        cause=cause,
    )[0]


def enqueue_many(
    queue_name: str,
    payloads: Iterable[Any],
    *,
    definition: JobDefinition | None = None,
    name: str | None = None,
    delay: float | None = None,
    run_at: datetime | None = None,
    priority: int = 0,
    max_attempts: int | None = None,
    classification: str | None = None,
    trace_id: str | None = None,
    dedupe_key: str | origin.About | None = None,
    dedupe_keys: Sequence[str | origin.About | None] | None = None,
    backend: str | None = None,
    concurrency_key: str | None = None,
    concurrency_keys: Sequence[str | None] | None = None,
    about: Any = None,
    abouts: Sequence[Any] | None = None,
    cause: Mapping[str, Any] | None = None,
) -> list[EnqueuedJob]:
    """Store many jobs of one queue in one statement batch (all or none). ``about``: one
    model object all the jobs are about; ``abouts``: one per payload."""
    if isinstance(payloads, str | bytes | Mapping) or not isinstance(payloads, Iterable):
        raise QueueError(ErrorCode.BAD_PAYLOAD, "enqueue_many takes an iterable of payloads")
    items = list(payloads)
    if dedupe_keys is not None and len(dedupe_keys) != len(items):
        raise QueueError(ErrorCode.BAD_ARGUMENT, "dedupe_keys must match payloads in length")
    if concurrency_keys is not None and (
        isinstance(concurrency_keys, str) or len(concurrency_keys) != len(items)
    ):
        raise QueueError(
            ErrorCode.BAD_ARGUMENT, "concurrency_keys must be a list matching payloads in length"
        )
    target = get_backend(backend)
    if not items:
        return []
    # The span is current while the jobs are built: they carry its trace context.
    with tracing.enqueue_span(queue_name, target.alias) as span:
        jobs = new_jobs(
            queue_name,
            items,
            definition=definition,
            name=name,
            delay=delay,
            run_at=run_at,
            priority=priority,
            max_attempts=max_attempts,
            classification=classification,
            trace_id=trace_id,
            dedupe_keys=dedupe_keys if dedupe_keys is not None else [dedupe_key] * len(items),
            concurrency_keys=concurrency_keys
            if concurrency_keys is not None
            else [concurrency_key] * len(items),
            abouts=abouts if abouts is not None or about is None else [about] * len(items),
            cause=cause,
        )
        flows = [  # a @flow's root: audited as a flow enqueue, with the insert
            audit.Event(
                action=audit.FLOW_ENQUEUE,
                job_id=j.job_id,
                queue=j.queue,
                backend=target.alias,
                data={"flow_id": j.flow_id, "name": j.name},
            )
            for j in jobs
            if j.flow_phase
        ]
        enqueued = store(target, jobs, flows)
        tracing.enqueued(span, enqueued)
        return enqueued


def enqueue(queue_name: str, payload: Any = None, **options: Any) -> EnqueuedJob:
    """One job; ``options`` as for ``enqueue_many`` (``dedupe_key``, ``concurrency_key``)."""
    return enqueue_many(queue_name, [payload], **options)[0]


def store(target: Backend, jobs: list[NewJob], events: list[audit.Event]) -> list[EnqueuedJob]:
    """Hand validated jobs to their backend, transactionally on every backend (docs/concepts.md).

    A local backend's enqueue is a row of the caller's transaction by itself. For an engine
    outside the database (redis, sqs), an enqueue inside ``transaction.atomic()`` on the
    backend's Django database is written to the outbox in that transaction and relayed after
    commit (nothing is sent on rollback, nothing lost between COMMIT and the send); the job id
    is fixed here, so a relay that sends twice creates one job. A dedupe key is then resolved
    by the engine when the relay delivers: the answer is the new id, not yet the holder's.
    Outside a transaction the jobs go straight to the engine.
    """
    if not target.transactional_enqueue:
        db = outbox.database_of(target)
        if connections[db].in_atomic_block:
            target.check_jobs(jobs)  # not through the breaker: the outbox is for outages
            entries = [("enqueue", target.alias, j.job_id, wire.job_to_body(j)) for j in jobs]
            outbox.write_many(entries, using=db)
            audit.record(events, using=db)
            return [
                EnqueuedJob(job_id=j.job_id, queue_name=j.queue, backend=target.alias) for j in jobs
            ]
    assert target.resilience is not None
    return target.resilience.call(lambda: target.enqueue_many(jobs, events=events))
