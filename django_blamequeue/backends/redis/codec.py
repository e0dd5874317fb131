"""Records to script arguments and Redis replies back to records.

A script gets its arguments as one JSON document (None as false, numbers that may pass 2^53 as
strings) plus binary blobs the JSON points at by number (1 = the first blob): payloads and
results travel and are stored as the bytes they are. One argument per call, instead of one per
field, is what makes a batch cheap to send (redis-py packs every argument in Python).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django_blamequeue import encryption
from django_blamequeue.backends.readback import FieldReader
from django_blamequeue.backends.redis.keys import from_us, to_us
from django_blamequeue.core import wire
from django_blamequeue.core.controls import ControlState, KeyWeights, QueueLimits
from django_blamequeue.core.records import (
    Ack,
    ChildSpec,
    JobInfo,
    NewJob,
    OutboxItem,
    QueueStats,
    Report,
)
from django_blamequeue.core.states import State
from django_blamequeue.exceptions import QueueError
from django_blamequeue.serializers import decode


def dumps(spec: Any) -> bytes:
    """JSON for cjson: UTF-8 as it is (no \\u escapes to undo), never NaN."""
    return json.dumps(spec, ensure_ascii=False, allow_nan=False).encode("utf-8", "replace")


def job_header(j: NewJob) -> list[Any]:
    """A job's JSON header (``insert_job`` in lib.lua); its payload is a blob."""
    return [
        j.job_id,
        j.queue,
        j.name,
        j.payload.content_type,
        j.payload.content_encoding,
        str(j.priority),
        str(to_us(j.run_at)) if j.run_at else False,
        str(round((j.delay or 0.0) * 1_000_000)),
        str(j.max_attempts),
        repr(float(j.timeout)) if j.timeout is not None else False,
        j.classification or False,
        j.trace_id or False,
        j.dedupe_key if j.dedupe_key is not None else False,
        j.flow_id or False,
        j.parent_id or False,
        j.flow_key if j.flow_key is not None else False,
        j.flow_phase or False,
        j.flow_mode or False,
        j.parent_backend or False,
        str(j.flow_depth),
        1 if j.blocked else 0,
        " ".join(j.depends_on),
        j.about or False,
        dumps(j.origin).decode() if j.origin else False,
        j.concurrency_key if j.concurrency_key is not None else False,
        j.unique_key if j.unique_key is not None else False,
        j.unique_states or False,
        str(round(j.unique_window * 1_000_000)) if j.unique_window is not None else False,
        j.unique_mode or False,
        _expires_spec(j.expires),
    ]


def _expires_spec(expires: float | datetime | None) -> Any:
    """A job's expiry as ``insert_job`` reads it: ``["at", us]`` absolute, ``["in", us]``
    after the script's now, or false."""
    if expires is None:
        return False
    if isinstance(expires, datetime):
        return ["at", str(to_us(expires))]
    return ["in", str(round(expires * 1_000_000))]


class Blobs(list[bytes]):
    """The binary arguments of one call; ``add`` answers the number the JSON refers to."""

    def add(self, data: bytes) -> int:
        self.append(data)
        return len(self)


def child_spec(c: ChildSpec, blobs: Blobs) -> list[Any]:
    """One child of a fan-out or a repair (``land`` in lib.lua)."""
    body = json.dumps(wire.job_to_body(c.job))
    return [c.key, c.backend, body, job_header(c.job), blobs.add(c.job.payload.body)]


#: ``ATTEMPT_HISTORY`` as leasing.lua's ``keep_attempt`` reads it.
HISTORY_LEVELS = {"off": 0, "failures": 1, "all": 2}


def ack_spec(a: Ack, blobs: Blobs, history: str = "failures") -> list[Any]:
    """One ack (``apply_ack`` in leasing.lua); ``history``: ``ATTEMPT_HISTORY``. A plain
    success that keeps no attempt history goes short, ``[id, token, result]``: most acks are
    that, and the script reads the rest as its defaults."""
    t = a.transition
    if (
        t.state is State.DONE
        and history != "all"
        and t.error is None
        and t.traceback is None
        and t.error_type is None
        and t.reason is None
        and not t.delay
        and not t.give_back_attempt
        and not t.snoozed
        and t.yields_to_cancel
        and not t.children
    ):
        return [a.job_id, a.token, blobs.add(t.result.body) if t.result is not None else False]
    return [
        a.job_id,
        a.token,
        t.state.value,
        blobs.add(t.result.body) if t.result is not None else False,
        t.error if t.error is not None else False,
        t.traceback if t.traceback is not None else False,
        t.reason.value if t.reason else False,
        str(round(t.delay * 1_000_000)),
        1 if t.give_back_attempt else 0,
        1 if t.yields_to_cancel else 0,
        [child_spec(c, blobs) for c in t.children] if t.children else False,
        1 if t.snoozed else 0,
        t.error_type if t.error_type is not None else False,
        a.worker or False,
        HISTORY_LEVELS[history],
    ]


def report_spec(r: Report, blobs: Blobs) -> list[Any]:
    return [
        r.parent_id,
        r.child_id,
        r.state,
        blobs.add(r.result) if r.result is not None else False,
        r.result_type or False,
        r.error if r.error is not None else False,
    ]


def claim_spec(
    queues: Sequence[str],
    limit: int,
    lease_s: float,
    limits: Mapping[str, QueueLimits] | None = None,
) -> list[Any]:
    """Queues, limit, lease, a random nonce the script derives the tokens from, and the
    settings' default limits of the queues claimed under limits (``limits.lua``)."""
    lease = str(round(lease_s * 1_000_000))
    limited = {q: limits_spec(lim) for q, lim in limits.items()} if limits else False
    return [list(queues), limit, lease, os.urandom(14).hex(), limited]


def text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def ack_rows(reply: Any) -> list[list[Any]]:
    """An ack reply: a JSON array of ``[id, ok, state, queue, attempts, name, fanned]``."""
    return json.loads(reply) if reply else []


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
        try:  # a field HSET past the API must not make the job unreadable
            return int(h[name]) if h.get(name) is not None else default
        except ValueError:
            return default

    def t(name: str) -> datetime | None:
        try:  # likewise: a time that is no number of microseconds reads as none
            return from_us(h.get(name))
        except (ValueError, OverflowError):
            return None

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
        error=encryption.readable(s("error")),
        error_type=s("etype"),
        traceback=encryption.readable(s("traceback")),
        encrypted=cenc.startswith(encryption.PREFIX),
        classification=s("classification"),
        trace_id=s("trace_id"),
        dedupe_key=s("dedupe_key"),
        flow_id=s("flow_id"),
        parent_id=s("parent_id"),
        available_at=t("avail"),
        created_at=t("created"),
        started_at=t("started"),
        finished_at=t("finished"),
        reason=s("reason"),
        stalls=n("stalls"),
        cancel_requested=h.get("cancel_req") == b"1",
        timeout=FieldReader().seconds("timeout", s("timeout")),
        lease_expires_at=t("expires") if h.get("state") == b"inflight" else None,
        depends_on=tuple((s("depends_on") or "").split()),
        flow_key=s("flow_key"),
        flow_phase=s("flow_phase"),
        children=children,
        concurrency_key=s("ckey"),
        snoozes=n("snoozes"),
        about=s("about"),
        origin=json.loads(h["origin"]) if h.get("origin") else None,
        checkpoint=_checkpoint(s("checkpoint")),
        unique_key=s("ukey"),
        unique_calls=n("ucalls"),
        expires_at=t("exp"),
    )


def limits_spec(limits: QueueLimits | None) -> list[Any] | bool:
    """Limits as the scripts read them (``limits.lua``): [c, kc, rm, rp, krm, krp, names]."""
    if limits is None:
        return False
    rate, key_rate = limits.rate_limit, limits.key_rate_limit
    values: list[Any] = [
        limits.concurrency,
        limits.key_concurrency,
        rate[0] if rate else None,
        repr(float(rate[1])) if rate else None,
        key_rate[0] if key_rate else None,
        repr(float(key_rate[1])) if key_rate else None,
    ]
    names = [[name, most, repr(float(per))] for name, most, per in limits.name_rate_limits]
    return [False if v is None else v for v in values] + [
        names or False,
        weights_spec(limits.key_weights),
    ]


def weights_spec(weights: KeyWeights) -> list[list[Any]] | bool:
    """``key_weights`` as the scripts read them: [[glob, weight, Lua pattern], ...]."""
    return [[glob, weight, lua_pattern(glob)] for glob, weight in weights] or False


def lua_pattern(glob: str) -> str:
    """An ``fnmatch`` glob as an anchored Lua pattern (``*``, ``?``, ``[seq]``, ``[!seq]``)."""
    out, i = ["^"], 0
    while i < len(glob):
        ch = glob[i]
        end = glob.find("]", i + 2) if ch == "[" else -1
        if ch == "*":
            out.append(".*")
        elif ch == "?":
            out.append(".")
        elif end != -1:
            inner = glob[i + 1 : end]
            if inner.startswith("!"):
                inner = "^" + inner[1:]
            out.append("[" + inner.replace("%", "%%") + "]")
            i = end
        elif ch in "^$()%.[]*+-?":
            out.append("%" + ch)
        else:
            out.append(ch)
        i += 1
    return "".join(out) + "$"


def control_from(queue: str, raw: Sequence[Any]) -> ControlState:
    """A queue's control hash (a flat HGETALL reply, or a dict) as a ``ControlState``."""
    if isinstance(raw, Mapping):
        h = {text(k) or "": text(v) or "" for k, v in raw.items()}
    else:
        items = [text(v) or "" for v in raw]
        h = dict(zip(items[::2], items[1::2], strict=True))

    def count(name: str) -> int | None:
        return int(h[name]) if h.get(name) else None

    def rate(most: str, per: str) -> tuple[int, float] | None:
        return (int(h[most]), float(h[per])) if h.get(most) and h.get(per) else None

    live = None
    if h.get("ov") == "1":
        live = QueueLimits(
            concurrency=count("c"),
            key_concurrency=count("kc"),
            rate_limit=rate("rm", "rp"),
            key_rate_limit=rate("krm", "krp"),
            key_weights=tuple((str(g), int(w)) for g, w, _ in json.loads(h.get("kw") or "[]")),
        )
    return ControlState(
        queue=queue,
        paused=h.get("paused") == "1",
        reason=h.get("reason") or "",
        paused_at=from_us(h.get("at")) if h.get("paused") == "1" else None,
        paused_by=h.get("by") or None,
        live=live,
        version=int(h.get("v") or 0),
    )


def outbox_item(raw: Sequence[Any]) -> OutboxItem:
    """An outbox entry as the relay takes it; one that cannot be read carries its problem."""
    eid, *pairs = raw
    entry: dict[str, Any] = {"eid": eid.decode()}
    for i in range(0, len(pairs), 2):
        entry[pairs[i].decode()] = pairs[i + 1]
    kind, backend = text(entry.get("kind")) or "", text(entry.get("backend")) or ""
    try:
        if kind == "enqueue":
            return OutboxItem(
                ref=entry["eid"],
                kind=kind,
                backend=backend,
                job=wire.job_from_body(json.loads(entry["body"])),
            )
        report = Report(
            parent_id=entry["parent_id"].decode(),
            child_id=entry["child_id"].decode(),
            state=entry["state"].decode(),
            result=entry.get("result"),
            result_type=text(entry.get("result_type")),
            error=text(entry.get("error")),
        )
        return OutboxItem(ref=entry["eid"], kind=kind, backend=backend, report=report)
    except Exception as exc:  # delivered as a failure: counted and kept, never blocking
        return OutboxItem(
            ref=entry["eid"],
            kind=kind,
            backend=backend,
            problem=f"unreadable outbox entry: {type(exc).__name__}: {exc}",
        )


def stats_from(rows: Sequence[Any], now: datetime, alias: str) -> list[QueueStats]:
    """``stats.lua``'s rows (a queue, its counts by state, then times, then the jobs expired
    within the last hour) as ``QueueStats``."""
    out = []
    states = [s.value for s in State]
    for row in sorted(rows, key=lambda r: r[0]):
        queue, *numbers = row
        pending, blocked, inflight, waiting, done, failed, cancelled = numbers[:7]
        counts = dict.fromkeys(states, 0)
        counts.update(
            pending=pending,
            blocked=blocked,
            inflight=inflight,
            waiting_children=waiting,
            done=done,
            failed=failed,
            cancelled=cancelled,
        )
        if not any(counts.values()):
            continue
        oldest = from_us(numbers[7])
        next_due = from_us(numbers[11])
        out.append(
            QueueStats(
                backend=alias,
                queue=queue.decode(),
                counts=counts,
                oldest_pending_age=max(0.0, (now - oldest).total_seconds()) if oldest else None,
                done_last_hour=numbers[8],
                failed_last_hour=numbers[9],
                delayed=numbers[10],
                next_delayed_in=(next_due - now).total_seconds() if next_due else None,
                expired_last_hour=numbers[12],
            )
        )
    return out


def _checkpoint(text: str | None) -> Any:
    try:
        return encryption.open_checkpoint(text)
    except ValueError:  # written by hand: still inspectable
        return text
    except QueueError:  # sealed, and no configured key opens it: like its payload
        return None
