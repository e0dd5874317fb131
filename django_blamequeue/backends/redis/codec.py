"""Records to script arguments and Redis replies back to records.

Optional values travel as ``""`` (None) or ``"+value"`` so that an empty string stays an empty
string; payloads and results are bytes, passed and stored as they are (binary-safe).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ... import outbox
from ...records import Ack, ChildSpec, Claimed, JobInfo, NewJob, Report
from ...serializers import Encoded, decode
from .keys import from_us, to_us


def opt(value: str | bytes | None) -> str | bytes:
    if value is None:
        return ""
    return b"+" + value if isinstance(value, bytes) else "+" + value


def job_args(j: NewJob) -> list[Any]:
    """The 23 arguments of one job (``insert_job`` in lib.lua)."""
    return [
        j.job_id,
        j.queue,
        j.name,
        j.payload.body,
        j.payload.content_type,
        j.payload.content_encoding,
        str(j.priority),
        opt(str(to_us(j.run_at)) if j.run_at else None),
        str(round((j.delay or 0.0) * 1_000_000)),
        str(j.max_attempts),
        opt(repr(float(j.timeout)) if j.timeout is not None else None),
        opt(j.classification),
        opt(j.trace_id),
        opt(j.dedupe_key),
        opt(j.flow_id),
        opt(j.parent_id),
        opt(j.flow_key),
        opt(j.flow_phase),
        opt(j.flow_mode),
        opt(j.parent_backend),
        str(j.flow_depth),
        "1" if j.blocked else "0",
        " ".join(j.depends_on),
    ]


def child_args(c: ChildSpec) -> list[Any]:
    """One child of a fan-out: key, backend, its spec for the manifest, its job."""
    return [c.key, c.backend, json.dumps(outbox.job_to_body(c.job)), *job_args(c.job)]


def ack_args(a: Ack) -> list[Any]:
    """The 11 arguments of one ack (``apply_ack`` in leasing.lua), then its children."""
    t = a.transition
    args: list[Any] = [
        a.job_id,
        a.token,
        t.state.value,
        opt(t.result.body if t.result is not None else None),
        opt(t.error),
        opt(t.traceback),
        opt(t.reason.value if t.reason else None),
        str(round(t.delay * 1_000_000)),
        "1" if t.give_back_attempt else "0",
        "1" if t.yields_to_cancel else "0",
        str(len(t.children)),
    ]
    for c in t.children:
        args += child_args(c)
    return args


def report_args(r: Report) -> list[Any]:
    return [r.parent_id, r.child_id, r.state, opt(r.result), opt(r.result_type), opt(r.error)]


def text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def claimed_from(row: Sequence[Any]) -> Claimed:
    """A claim reply row (``CLAIMED`` in leasing.lua)."""
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
        available,
        created,
        flow_phase,
        flow_mode,
        flow_depth,
    ) = row
    expires_at = from_us(expires)
    assert expires_at is not None
    return Claimed(
        job_id=job_id.decode(),
        queue=queue.decode(),
        name=name.decode(),
        payload=Encoded(ctype.decode(), cenc.decode(), payload),
        token=token.decode(),
        attempt=int(attempts),
        max_attempts=int(max_attempts),
        lease_expires_at=expires_at,
        priority=int(priority),
        timeout=float(timeout) if timeout is not None else None,
        trace_id=text(trace_id),
        classification=text(classification),
        flow_id=text(flow_id),
        parent_id=text(parent_id),
        available_at=from_us(available),
        created_at=from_us(created),
        flow_phase=text(flow_phase),
        flow_mode=text(flow_mode),
        flow_depth=int(flow_depth or 0),
    )


def _decoded(ctype: str, cenc: str, body: bytes | None) -> Any:
    if body is None:
        return None
    try:
        return decode(ctype, cenc, body)
    except Exception:  # a poison payload must still be inspectable
        return None


def info_from(raw: Mapping[bytes, bytes], alias: str) -> JobInfo:
    """A job hash (HGETALL) as the public snapshot."""
    h = {k.decode(): v for k, v in raw.items()}

    def s(name: str) -> str | None:
        return text(h.get(name))

    def n(name: str, default: int = 0) -> int:
        value = h.get(name)
        return int(value) if value is not None else default

    ctype, cenc = s("ctype") or "application/json", s("cenc") or "utf-8"
    children = None
    if h.get("flow_phase") is not None:
        tally = {"pending": n("kp"), "done": n("kd"), "failed": n("kf"), "cancelled": n("kc")}
        children = {k: v for k, v in tally.items() if v}
    return JobInfo(
        job_id=s("id") or "",
        backend=alias,
        queue=s("queue") or "",
        name=s("name") or "",
        state=s("state") or "",
        payload=_decoded(ctype, cenc, h.get("payload")),
        priority=n("priority"),
        attempts=n("attempts"),
        max_attempts=n("max_attempts"),
        progress=n("progress"),
        result=_decoded(ctype, cenc, h.get("result")),
        error=s("error"),
        traceback=s("traceback"),
        classification=s("classification"),
        trace_id=s("trace_id"),
        dedupe_key=s("dedupe_key"),
        flow_id=s("flow_id"),
        parent_id=s("parent_id"),
        available_at=from_us(h.get("avail")),
        created_at=from_us(h.get("created")),
        started_at=from_us(h.get("started")),
        finished_at=from_us(h.get("finished")),
        reason=s("reason"),
        stalls=n("stalls"),
        cancel_requested=h.get("cancel_req") == b"1",
        timeout=float(h["timeout"]) if h.get("timeout") is not None else None,
        lease_expires_at=from_us(h.get("expires")),
        depends_on=tuple((s("depends_on") or "").split()),
        flow_key=s("flow_key"),
        flow_phase=s("flow_phase"),
        children=children,
    )
