"""The Lua scripts: each atomic step of the backend is one script, run by EVALSHA.

A script file may start with ``--! include NAME`` lines; the loader builds its text as
``lib.lua`` + the included files + the file itself. Every script gets the same header
(``lib.lua``): the tagged prefix as its only key, then now (or "" for Redis ``TIME``), the
backend's alias and whether high-volume audit events are wanted. It answers
``[result, events, remote, outboxed, woken]``, unpacked here into a ``Reply``.

redis-py's ``Script`` sends EVALSHA and, on ``NOSCRIPT`` (a restarted or flushed server),
loads the script and sends it again; in a pipeline the scripts are loaded before it runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from importlib.resources import files
from typing import Any

from ... import audit
from .keys import to_us

NAMES = (
    "enqueue",
    "claim",
    "ack",
    "ack_claim",
    "renew",
    "extend",
    "progress",
    "rescue",
    "cancel",
    "cancel_flow",
    "purge",
    "dlq_retry",
    "report_terminal",
    "deliver_reports",
    "reland",
    "settle",
    "outbox_take",
    "outbox_done",
    "prune",
    "stats",
)


def source(name: str) -> str:
    """The full text of script ``name``: the library, its includes, then the script."""
    folder = files(__package__).joinpath("scripts")
    body = folder.joinpath(f"{name}.lua").read_text()
    parts = [folder.joinpath("lib.lua").read_text()]
    for line in body.splitlines():
        if line.startswith("--! include "):
            parts.append(folder.joinpath(f"{line.split()[-1]}.lua").read_text())
    parts.append(body)
    return "\n".join(parts)


_SOURCES: dict[str, str] = {}


def sources() -> dict[str, str]:
    if not _SOURCES:
        _SOURCES.update({name: source(name) for name in NAMES})
    return _SOURCES


@dataclass(slots=True)
class Reply:
    """A script's answer, decoded: its own result and what the caller must do after it."""

    result: Any
    events: list[audit.Event] = field(default_factory=list)
    remote: list[tuple[str, str]] = field(default_factory=list)  # (backend, child id)
    outboxed: int = 0
    woken: list[str] = field(default_factory=list)


def header(now: datetime | None, alias: str, high_volume: bool) -> list[Any]:
    return ["" if now is None else to_us(now), alias, "1" if high_volume else "0"]


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def unpack(raw: list[Any], alias: str) -> Reply:
    result, events, remote, outboxed, woken = raw
    return Reply(
        result=result,
        events=[_event(e, alias) for e in events],
        remote=[(text(b), text(c)) for b, c in remote],
        outboxed=int(outboxed),
        woken=[text(q) for q in woken],
    )


def _event(raw: list[bytes], alias: str) -> audit.Event:
    action, job_id, queue, attempt, data = (text(v) for v in raw)
    return audit.Event(
        action=action,
        job_id=job_id or None,
        queue=queue or None,
        backend=alias,
        attempt=int(attempt) if attempt else None,
        data=json.loads(data) if data else {},
    )
