"""From enqueue arguments to stored jobs: merge and check the options, encode, build
``NewJob``s, store them.

Every way a job is enqueued goes through here — the ``queue`` facade, ``@job``'s
``.enqueue``, a flow's fan-out and the scheduler — so each rule (the call's options over the
job's own and the settings', ``core/options.py``; the trace id; the transactional outbox) is
applied once. Everything is checked and every payload encoded before a backend is called: a
``QueueError`` from here means nothing was written. Callers resolve the job's definition
(``registry``) and pass it in, with the options the call gave by name.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from django.db import connections

from django_blamequeue import audit, encryption
from django_blamequeue.backends import get_backend
from django_blamequeue.backends.base import Backend
from django_blamequeue.conf import Settings, get_settings
from django_blamequeue.context import current_job_or_none
from django_blamequeue.core import ids, unique, validation, wire
from django_blamequeue.core.options import UNSET, JobOptions
from django_blamequeue.core.records import EnqueuedJob, NewJob
from django_blamequeue.core.unique import Unique, UniqueLock
from django_blamequeue.exceptions import ErrorCode, QueueError
from django_blamequeue.jobs import origin, routing
from django_blamequeue.observability import tracing
from django_blamequeue.relay import outbox
from django_blamequeue.serializers import encode_many

if TYPE_CHECKING:
    from django_blamequeue.jobs.registry import JobDefinition


def merged(given: Mapping[str, Any], definition: JobDefinition | None) -> JobOptions:
    """The options in force for an enqueue: what the call gave (its keyword arguments, by
    option name), then the job's own, then the settings' defaults (``JobOptions.merge``); not
    checked yet. A call that names no queue takes the job's route (``ROUTES``) over the
    job's own queue."""
    if definition is not None and given.get("queue", UNSET) is UNSET:
        routed = routing.route(definition.name)
        if routed is not None:
            given = {**given, "queue": routed}
    return JobOptions.merge(given, definition.options if definition else None, _settings_defaults())


#: The settings' layer of a merge, built once per settings object.
_defaults: list[tuple[Settings, JobOptions]] = []


def _settings_defaults() -> JobOptions:
    settings = get_settings()
    if _defaults and _defaults[0][0] is settings:
        return _defaults[0][1]
    layer = JobOptions(max_attempts=settings.default_max_attempts)
    _defaults[:] = [(settings, layer)]
    return layer


def new_jobs(
    options: JobOptions,
    payloads: Sequence[Any],
    *,
    definition: JobDefinition | None,
    name: str | None,
    dedupe_keys: Sequence[Any] | None = None,
    job_ids: Sequence[str | None] | None = None,
    concurrency_keys: Sequence[Any] | None = None,
    abouts: Sequence[Any] | None = None,
    cause: Mapping[str, Any] | None = None,
) -> list[NewJob]:
    """Validated jobs of one queue from the merged ``options`` (``merged``), checked once for
    the whole batch, not per payload.

    Per payload: ``dedupe_keys`` (default: the options' one for every job), ``abouts`` (the
    model object, or key, each job is about; default: the options' ``about``) and the call's
    ``concurrency_keys`` (a None takes the ``@job``'s ``concurrency_key``: a string, or a
    callable of the payload; ``ABOUT`` is the job's ``about`` key). ``cause``: origin keys
    the caller knows (a schedule, a flow); the origin is captured once for the batch.
    """
    options = options.checked()
    ctx = current_job_or_none()
    common: dict[str, Any] = options.stored()
    common["name"] = name or common["queue"]
    shared_trace = (
        options.trace_id
        or tracing.current_trace_id()
        or (ctx.trace_id if ctx and ctx.trace_id else None)
    )
    flow = definition.flow if definition is not None else None
    n = len(payloads)
    if abouts is None:
        abouts = None if options.about is None else [options.about] * n
    keys = _about_keys(abouts, n)
    ckeys = _concurrency_keys(payloads, concurrency_keys, definition, keys)
    common["origin"] = origin.capture(cause)
    dedupes = dedupe_keys if dedupe_keys is not None else [options.dedupe_key] * n
    locks = _unique_locks(options, common["name"], payloads, dedupes)
    jobs = []
    encoded = encode_many(payloads)
    if encryption.wants_encryption(common["queue"], options.encrypted):
        encoded = [encryption.seal(e) for e in encoded]
    for i, payload in enumerate(encoded):
        new = NewJob(
            job_id=(job_ids[i] if job_ids is not None else None) or ids.new_id(),
            payload=payload,
            trace_id=shared_trace or os.urandom(16).hex(),  # uuid4().hex's shape, cheaper
            dedupe_key=key_or_about(dedupes[i], keys[i], "dedupe_key"),
            about=keys[i],
            concurrency_key=ckeys[i],
            **common,
        )
        lock = locks[i] if locks is not None else None
        if lock is not None:
            new = _with_lock(new, lock)
        if flow is not None:
            new = replace(
                new, flow_phase="fan_out", flow_mode=flow.on_child_failure, flow_id=new.job_id
            )
        jobs.append(new)
    if locks is not None:
        unique.check_batch(jobs)
    return jobs


def _unique_locks(
    options: JobOptions, name: str, payloads: Sequence[Any], dedupes: Sequence[Any]
) -> list[UniqueLock | None] | None:
    """Each payload's unique lock (``core/unique.py``: the key made from the payload),
    or None when the options ask for none."""
    spec = options.unique
    if not isinstance(spec, Unique):
        return None
    if any(d is not None for d in dedupes):
        raise QueueError(ErrorCode.BAD_ARGUMENT, "give unique= or dedupe_key(s)=, not both")
    queue = options.queue
    assert isinstance(queue, str)
    return [spec.lock(name, queue, payload) for payload in payloads]


def _with_lock(job: NewJob, lock: UniqueLock) -> NewJob:
    """The job carrying its lock; a debounced job waits out its window before it runs."""
    fields: dict[str, Any] = {
        "unique_key": lock.key,
        "unique_states": lock.states,
        "unique_window": lock.window,
        "unique_mode": lock.mode,
    }
    if lock.delay is not None:
        fields["delay"], fields["run_at"] = lock.delay, None
    return replace(job, **fields)


def _concurrency_keys(
    payloads: Sequence[Any],
    given: Sequence[Any] | None,
    definition: JobDefinition | None,
    abouts: Sequence[str | None],
) -> list[str | None]:
    """Each payload's validated concurrency key (the caller's, else the ``@job``'s; ``ABOUT``:
    the job's ``about`` key, one tenant per object)."""
    default = definition.options.concurrency_key if definition is not None else None
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
    job_id: str | None = None,
    cause: Mapping[str, Any] | None = None,
    **options: Any,
) -> NewJob:
    """One validated job of ``queue_name``: ``options`` (by ``JobOptions``' names, what the
    caller gives) merged over the job's own and the settings' (as for ``new_jobs``)."""
    return new_jobs(
        merged({"queue": queue_name, **options}, definition),
        [payload],
        definition=definition,
        name=name,
        job_ids=[job_id],
        concurrency_keys=[options.get("concurrency_key")],
        cause=cause,
    )[0]


def enqueue_many(
    payloads: Iterable[Any],
    given: Mapping[str, Any],
    *,
    definition: JobDefinition | None = None,
    name: str | None = None,
    dedupe_keys: Sequence[str | origin.About | None] | None = None,
    concurrency_keys: Sequence[str | None] | None = None,
    abouts: Sequence[Any] | None = None,
    cause: Mapping[str, Any] | None = None,
) -> list[EnqueuedJob]:
    """Store many jobs of one queue in one statement batch (all or none). ``given``: the
    call's options by name (``queue`` among them), merged here over the job's own and the
    settings' (``merged``); ``dedupe_keys``, ``concurrency_keys`` and ``abouts`` give one value
    per payload instead of the options' one for all."""
    if isinstance(payloads, str | bytes | Mapping) or not isinstance(payloads, Iterable):
        raise QueueError(ErrorCode.BAD_PAYLOAD, "enqueue_many takes an iterable of payloads")
    items = list(itertools.islice(payloads, validation.MAX_ENQUEUE_MANY + 1))
    if len(items) > validation.MAX_ENQUEUE_MANY:
        raise QueueError(
            ErrorCode.BAD_ARGUMENT,
            f"enqueue_many stores at most {validation.MAX_ENQUEUE_MANY:,} jobs in one call (one "
            "transaction, held in memory): split the payloads into calls of that many or "
            "fewer. Nothing was stored.",
        )
    if dedupe_keys is not None and len(dedupe_keys) != len(items):
        raise QueueError(ErrorCode.BAD_ARGUMENT, "dedupe_keys must match payloads in length")
    if concurrency_keys is not None and (
        isinstance(concurrency_keys, str) or len(concurrency_keys) != len(items)
    ):
        raise QueueError(
            ErrorCode.BAD_ARGUMENT, "concurrency_keys must be a list matching payloads in length"
        )
    options = merged(given, definition)
    target = get_backend(options.backend_alias)
    if not items:
        return []
    # The span is current while the jobs are built: they carry its trace context. Its queue
    # is the name as given (new_jobs checks it, inside the span).
    with tracing.enqueue_span(options.queue, target.alias) as span:  # type: ignore[arg-type]
        jobs = new_jobs(
            options,
            items,
            definition=definition,
            name=name,
            dedupe_keys=dedupe_keys,
            # A None among them takes the @job's key, not the call's one for all.
            concurrency_keys=concurrency_keys
            if concurrency_keys is not None
            else [given.get("concurrency_key")] * len(items),
            abouts=abouts,
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


def enqueue(payload: Any, given: Mapping[str, Any], **batch: Any) -> EnqueuedJob:
    """One job; as ``enqueue_many``."""
    return enqueue_many([payload], given, **batch)[0]


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
