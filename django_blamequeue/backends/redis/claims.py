"""A claim's reply (``claim`` in leasing.lua) as the worker's ``Claimed`` records.

The reply is a JSON header, a row of strings (false for none) per job ending with its
payload's length, then every payload in one bulk. Each row is read in one pass; a row that is
not as the API stores it (a hash field ``HSET`` past the API) is read again field by field
(``readback``), so the job carries its ``problem`` and the worker fails it alone.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from django_blamequeue.backends.readback import FieldReader
from django_blamequeue.backends.redis.keys import from_us
from django_blamequeue.core.payload import Encoded
from django_blamequeue.core.records import Claimed


def claimed_from(reply: Sequence[Any]) -> list[Claimed]:
    """A claim's reply (``claim`` in leasing.lua): a JSON header (each row ends with its
    payload's length, -1 for none), then the payloads one after the other in one bulk.

    Each row is read in one pass (``_claimed_fast``); a row it cannot read as stored by the
    API is read again field by field (``_claimed``), which notes what is wrong with it."""
    if not reply or not reply[0]:
        return []
    header, payloads = json.loads(reply[0]), reply[1]
    times: dict[Any, datetime | None] = {}
    out, at = [], 0
    for row in header:
        size = row.pop()
        payload = None if size < 0 else payloads[at : at + size]
        at += max(size, 0)
        try:
            out.append(_claimed_fast(row, payload, times))
        except (TypeError, ValueError, OverflowError, OSError):
            out.append(_claimed(row, payload))
    return out


def _time(raw: Any, times: dict[Any, datetime | None]) -> datetime | None:
    """``from_us``, remembered for one reply: a claim stamps every lease with one expiry, and
    jobs enqueued in one call share their created and available times."""
    try:
        return times[raw]
    except KeyError:
        when = times[raw] = from_us(raw)
        return when


def _claimed_fast(row: list[Any], payload: Any, times: dict[Any, datetime | None]) -> Claimed:
    """One claimed job as the API stores it (every value a string, or false for a missing
    field); raises on anything else, for ``_claimed`` to read and note."""
    (
        token,
        expires,
        _started,
        job_id,
        queue,
        name,
        ctype,
        cenc,
        attempts,
        max_attempts,
        priority,
        timeout,
        trace_id,
        classification,
        flow_id,
        parent_id,
        available,
        created,
        flow_phase,
        flow_mode,
        flow_depth,
        stalls,
        checkpoint,
        ckey,
        snoozes,
    ) = row
    if type(payload) is not bytes or False in (attempts, max_attempts, priority):
        raise TypeError("read field by field")
    seconds = float(timeout) if timeout else None
    if seconds is not None and not 0 < seconds < 1e10:
        raise ValueError("read field by field")
    return Claimed(
        job_id=str(job_id),
        queue=queue or "",
        name=name or "",
        payload=Encoded(ctype or "application/json", cenc or "utf-8", payload),
        token=str(token),
        attempt=int(attempts),
        max_attempts=int(max_attempts),
        lease_expires_at=_time(expires, times) or datetime.now(UTC),
        priority=int(priority),
        timeout=seconds,
        trace_id=trace_id or None,
        classification=classification or None,
        flow_id=flow_id or None,
        parent_id=parent_id or None,
        available_at=_time(available, times),
        created_at=_time(created, times),
        flow_phase=flow_phase or None,
        flow_mode=flow_mode or None,
        flow_depth=int(flow_depth) if flow_depth else 0,
        stalls=int(stalls) if stalls else 0,
        checkpoint=None if checkpoint is False else checkpoint,
        concurrency_key=ckey or None,
        snoozes=int(snoozes) if snoozes else 0,
    )


def _claimed(row: list[Any], payload: bytes | None) -> Claimed:
    """One claimed job; never raises (``readback``): a hash field of the wrong type (an
    ``HSET`` past the API) makes the job's ``problem``, and the worker fails it alone."""
    (
        token,
        expires,
        _started,
        job_id,
        queue,
        name,
        ctype,
        cenc,
        attempts,
        max_attempts,
        priority,
        timeout,
        trace_id,
        classification,
        flow_id,
        parent_id,
        available,
        created,
        flow_phase,
        flow_mode,
        flow_depth,
        stalls,
        checkpoint,
        ckey,
        snoozes,
    ) = row
    read = FieldReader()
    return Claimed(
        job_id=str(job_id),
        queue=read.text("queue", queue) or "",
        name=read.text("name", name) or "",
        payload=Encoded(
            read.text("ctype", ctype) or "application/json",
            read.text("cenc", cenc) or "utf-8",
            read.body("payload", payload),
        ),
        token=str(token),
        attempt=read.integer("attempts", attempts, 1),
        max_attempts=read.integer("max_attempts", max_attempts, 1),
        lease_expires_at=read.time("expires", expires, from_us) or datetime.now(UTC),
        priority=read.integer("priority", priority, 0),
        timeout=read.seconds("timeout", timeout),
        trace_id=read.text("trace_id", trace_id) or None,
        classification=read.text("classification", classification) or None,
        flow_id=read.text("flow_id", flow_id) or None,
        parent_id=read.text("parent_id", parent_id) or None,
        available_at=read.time("avail", available, from_us),
        created_at=read.time("created", created, from_us),
        flow_phase=read.text("flow_phase", flow_phase) or None,
        flow_mode=read.text("flow_mode", flow_mode) or None,
        flow_depth=read.integer("flow_depth", flow_depth or 0, 0),
        stalls=read.integer("stalls", stalls or 0, 0),
        checkpoint=read.text("checkpoint", checkpoint),
        concurrency_key=read.text("ckey", ckey) or None,
        snoozes=read.integer("snoozes", snoozes or 0, 0),
        problem=read.problem,  # last: every field above was read
    )
