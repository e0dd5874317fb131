"""Conversions between raw rows / model instances and the records the core speaks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from django.utils.dateparse import parse_datetime

from django_blamequeue import encryption
from django_blamequeue.backends.readback import FieldReader
from django_blamequeue.core.payload import Encoded
from django_blamequeue.core.records import Claimed, JobInfo
from django_blamequeue.exceptions import QueueError
from django_blamequeue.serializers import decode


def to_dt(value: Any) -> datetime | None:
    """Raw SQL gives aware datetimes on PostgreSQL; on SQLite, stored UTC text, or a naive
    datetime when the column's declared type has a converter. Always answers aware (UTC)."""
    if value is None:
        return None
    if isinstance(value, float):  # seconds since the epoch (the PostgreSQL claim's)
        return datetime.fromtimestamp(value, UTC)
    parsed = value if isinstance(value, datetime) else parse_datetime(str(value))
    if parsed is None:
        raise ValueError(f"not a datetime: {value!r}")
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def to_bytes(value: Any) -> bytes:
    return bytes(value) if value is not None else b""


def claimed_from_row(row: Sequence[Any]) -> Claimed:
    """A claimed row (``sql.CLAIM_COLUMNS``) as a ``Claimed``; never raises.

    SQLite stores any value in any column: a row written past the API may hold a priority
    that is text or a payload that is a number. Each field is read on its own
    (``readback.FieldReader``), so such a row comes back with its ``problem`` and is failed
    alone as ``bad_job``, instead of failing (and rolling back) every claim of its queue.
    """
    (
        job_id,
        queue,
        name,
        payload,
        ctype,
        cenc,
        token,
        attempts,
        max_attempts,
        expires,
        priority,
        timeout,
        trace_id,
        classification,
        flow_id,
        parent_id,
        available_at,
        created_at,
        flow_phase,
        flow_mode,
        flow_depth,
        stalls,
        checkpoint,
        concurrency_key,
        snoozes,
    ) = row
    read = FieldReader()
    return Claimed(
        job_id=str(job_id),
        queue=read.text("queue", queue) or "",
        name=read.text("name", name) or "",
        payload=Encoded(
            read.text("content_type", ctype) or "application/json",
            read.text("content_encoding", cenc) or "utf-8",
            read.body("payload", payload),
        ),
        token=str(token),
        attempt=read.integer("attempts", attempts, 1),
        max_attempts=read.integer("max_attempts", max_attempts, 1),
        lease_expires_at=read.time("lease_expires_at", expires, to_dt) or datetime.now(UTC),
        priority=read.integer("priority", priority, 0),
        timeout=read.seconds("timeout", timeout),
        trace_id=read.text("trace_id", trace_id),
        classification=read.text("classification", classification),
        flow_id=read.text("flow_id", flow_id),
        parent_id=read.text("parent_id", parent_id),
        available_at=read.time("available_at", available_at, to_dt, required=True),
        created_at=read.time("created_at", created_at, to_dt, required=True),
        flow_phase=read.text("flow_phase", flow_phase),
        flow_mode=read.text("flow_mode", flow_mode),
        flow_depth=read.integer("flow_depth", flow_depth or 0, 0),
        stalls=read.integer("stalls", stalls or 0, 0),
        checkpoint=read.text("checkpoint", checkpoint),
        concurrency_key=read.text("concurrency_key", concurrency_key),
        snoozes=read.integer("snoozes", snoozes or 0, 0),
        problem=read.problem,  # last: every field above was read
    )


def claimed_from_pg_row(row: Sequence[Any]) -> Claimed:
    """A row of the PostgreSQL claim (``sql.claim_postgresql``: the times as epoch seconds)
    as a ``Claimed``, without reading each field on its own: PostgreSQL keeps every column
    to its type, so only what the types allow but the API never writes (a timeout that is
    not a positive number of seconds) goes through :func:`claimed_from_row`, which notes it."""
    (
        job_id,
        queue,
        name,
        payload,
        ctype,
        cenc,
        token,
        attempts,
        max_attempts,
        expires,
        priority,
        timeout,
        trace_id,
        classification,
        flow_id,
        parent_id,
        available_at,
        created_at,
        flow_phase,
        flow_mode,
        flow_depth,
        stalls,
        checkpoint,
        concurrency_key,
        snoozes,
    ) = row
    if timeout is not None and not 0 < timeout < 1e10:
        return claimed_from_row(row)
    stamp = datetime.fromtimestamp
    return Claimed(
        job_id=job_id,
        queue=queue,
        name=name,
        payload=Encoded(
            ctype or "application/json",
            cenc or "utf-8",
            payload if type(payload) is bytes else to_bytes(payload),
        ),
        token=token,
        attempt=attempts,
        max_attempts=max_attempts,
        lease_expires_at=stamp(expires, UTC),
        priority=priority,
        timeout=timeout,
        trace_id=trace_id,
        classification=classification,
        flow_id=flow_id,
        parent_id=parent_id,
        available_at=None if available_at is None else stamp(available_at, UTC),
        created_at=None if created_at is None else stamp(created_at, UTC),
        flow_phase=flow_phase,
        flow_mode=flow_mode,
        flow_depth=flow_depth or 0,
        stalls=stalls or 0,
        checkpoint=checkpoint,
        concurrency_key=concurrency_key,
        snoozes=snoozes or 0,
    )


def _decoded(ctype: str, cenc: str, body: Any) -> Any:
    if body is None:
        return None
    try:
        return decode(ctype, cenc, to_bytes(body))
    except Exception:  # a poison payload must still be inspectable
        return None


def info_from_model(
    job: Any,
    backend: str,
    depends_on: Sequence[str] = (),
    children: Mapping[str, int] | None = None,
) -> JobInfo:
    return JobInfo(
        job_id=job.id,
        backend=backend,
        queue=job.queue,
        name=job.name,
        state=job.state,
        payload=_decoded(job.content_type, job.content_encoding, job.payload),
        priority=job.priority,
        attempts=job.attempts,
        max_attempts=job.max_attempts,
        progress=job.progress,
        result=_decoded(job.content_type, job.content_encoding, job.result),
        error=encryption.readable(job.error),
        error_type=job.error_type,
        traceback=encryption.readable(job.traceback),
        encrypted=job.content_encoding.startswith(encryption.PREFIX),
        classification=job.classification,
        trace_id=job.trace_id,
        dedupe_key=job.dedupe_key,
        flow_id=job.flow_id,
        parent_id=job.parent_id,
        available_at=job.available_at,
        created_at=job.created_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
        reason=job.reason,
        stalls=job.stalls,
        cancel_requested=job.cancel_requested,
        timeout=job.timeout,
        lease_expires_at=job.lease_expires_at,
        depends_on=tuple(depends_on),
        flow_key=job.flow_key,
        flow_phase=job.flow_phase,
        children=children,
        concurrency_key=job.concurrency_key,
        snoozes=job.snoozes,
        about=job.about,
        origin=job.origin,
        checkpoint=_checkpoint(job.checkpoint),
        unique_key=job.unique_key,
        unique_calls=job.unique_calls,
        expires_at=job.expires_at,
    )


def _checkpoint(text: str | None) -> Any:
    try:
        return encryption.open_checkpoint(text)
    except ValueError:  # written by hand: still inspectable
        return text
    except QueueError:  # sealed, and no configured key opens it: like its payload
        return None
