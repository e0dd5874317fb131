"""Text for the ``blamequeue`` command: a job, a flow, queue stats and schedules as lines.

Pure functions of what the command read, so each shape is tested without a database.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django_blamequeue.core.controls import (
    HandlerWait,
    QueueControl,
    WorkerInfo,
    rate_text,
    weights_text,
)
from django_blamequeue.core.records import JobInfo, QueueStats
from django_blamequeue.core.states import reason_note

STATE_MARK = {
    "pending": "·",
    "blocked": "⏸",
    "inflight": "▶",
    "waiting_children": "⋯",
    "done": "✓",
    "failed": "✗",
    "cancelled": "⊘",
}
#: The count columns of ``stats``, with the state each one counts (None: computed apart).
STATS_COLUMNS = (
    ("due", None),
    ("delayed", None),
    ("blocked", "blocked"),
    ("inflight", "inflight"),
    ("waiting", "waiting_children"),
    ("done", "done"),
    ("failed", "failed"),
    ("cancelled", "cancelled"),
)


def when(moment: datetime | None) -> str:
    return f"{moment:%Y-%m-%d %H:%M:%S} UTC" if moment else "-"


def span(seconds: float) -> str:
    """A duration as people read it: 42 s, 17 min, 5 h, 3 d."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"


# -- show ------------------------------------------------------------------------------------
def render_job(j: JobInfo) -> list[str]:
    """Every field an operator asks about, the error and traceback last."""
    note = reason_note(j.state, j.reason)
    state = j.state + (f" ({note})" if note else "")
    if j.cancel_requested and j.state == "inflight":
        state += ", cancel requested"
    rows = [
        ("name", j.name),
        ("queue", f"{j.queue} (backend {j.backend})"),
        ("state", state),
        (
            "attempts",
            f"{j.attempts}/{j.max_attempts}" + (f", stalls {j.stalls}" if j.stalls else ""),
        ),
        ("priority", str(j.priority)),
        ("progress", f"{j.progress}%"),
        ("created", when(j.created_at)),
        ("available", when(j.available_at)),
        ("started", when(j.started_at)),
        ("finished", when(j.finished_at)),
    ]
    if j.state == "inflight":
        rows.append(("lease until", when(j.lease_expires_at)))
    rows += [(k, v) for k, v in (("dedupe key", j.dedupe_key), ("trace id", j.trace_id)) if v]
    if j.unique_key:
        calls = f", absorbed {j.unique_calls} call{'s' if j.unique_calls != 1 else ''}"
        rows.append(("unique key", j.unique_key + (calls if j.unique_calls else "")))
    if j.classification:
        rows.append(("class", j.classification))
    origin = getattr(j, "origin", None)  # JobInfo.origin where the installed version has it
    if origin:
        rows.append(("origin", _inline(origin)))
    rows += _flow_rows(j)
    rows += [("payload", _inline(j.payload)), ("result", _inline(j.result))]
    width = max(len(k) for k, _ in rows)
    lines = [f"job {j.job_id}"] + [f"  {k.ljust(width)}  {v}" for k, v in rows]
    if j.error:
        kind = f" ({j.error_type})" if j.error_type else ""
        lines += [f"error{kind}", *_indented(j.error)]
    if j.traceback:
        lines += ["traceback", *_indented(j.traceback.rstrip("\n"))]
    return lines


def _flow_rows(j: JobInfo) -> list[tuple[str, str]]:
    if not j.flow_id:
        return []
    rows = [("flow", f"{j.flow_id} (blamequeue flow show {j.flow_id})")]
    if j.flow_key:
        rows.append(("flow key", j.flow_key))
    if j.parent_id:
        rows.append(("parent", j.parent_id))
    if j.depends_on:
        rows.append(("depends on", ", ".join(j.depends_on)))
    if j.flow_phase:
        rows.append(("flow phase", j.flow_phase))
    if j.children:
        rows.append(("children", _tally(j.children)))
    return rows


def _inline(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return repr(value)


def _indented(text: str) -> list[str]:
    return ["  " + line for line in text.splitlines()]


def _tally(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))


# -- stats -----------------------------------------------------------------------------------
def render_stats(rows: Iterable[QueueStats]) -> list[str]:
    """One line per queue: due and delayed pending jobs apart, the other states, the age of
    the oldest due job and when the next delayed one comes due; then the queues whose jobs
    expired in the last hour, if any."""
    header = f"{'backend':<12} {'queue':<20} "
    header += " ".join(f"{name:>9}" for name, _ in STATS_COLUMNS) + "  oldest due  next delayed"
    lines = [header]
    expired: list[str] = []
    for st in rows:
        counts = dict(st.counts)
        due = counts.get("pending", 0) - st.delayed
        cells = [f"{due:>9,}", f"{st.delayed:>9,}"]
        cells += [f"{counts.get(state, 0):>9,}" for _, state in STATS_COLUMNS if state]
        oldest = "-"
        if due and st.oldest_pending_age is not None:
            oldest = span(st.oldest_pending_age)
        upcoming = "-"
        if st.delayed and st.next_delayed_in is not None:
            upcoming = f"in {span(max(0.0, st.next_delayed_in))}"
        lines.append(f"{st.backend:<12} {st.queue:<20} {' '.join(cells)}  {oldest:<10}  {upcoming}")
        if st.expired_last_hour:
            expired.append(f"{st.queue!r} {st.expired_last_hour:,} ({st.backend})")
    if expired:  # among the cancelled: never started, so nobody else would notice
        lines.append("expired in the last hour (not started in time): " + ", ".join(expired))
    return lines


# -- flow show -------------------------------------------------------------------------------
def render_flow(flow_id: str, jobs: Sequence[JobInfo]) -> list[str]:
    """A flow as text: one line per job in dependency order, with its state and deps; a
    ``@flow`` parent's children under it, in key order (p2 before p10)."""
    by_id = {j.job_id: j for j in jobs}
    counts: dict[str, int] = {}
    for j in jobs:
        counts[j.state] = counts.get(j.state, 0) + 1
    lines = [f"flow {flow_id}: {len(jobs)} job(s) · {_tally(counts)}"]
    depth: dict[str, int] = {}

    def level(job_id: str, seen: frozenset[str] = frozenset()) -> int:
        if job_id in depth:
            return depth[job_id]
        job = by_id[job_id]
        if job.parent_id in by_id and job.parent_id not in seen:  # a child sits under its parent
            depth[job_id] = 1 + level(job.parent_id, seen | {job_id})
            return depth[job_id]
        deps = [d for d in job.depends_on if d in by_id and d not in seen]
        depth[job_id] = 1 + max((level(d, seen | {job_id}) for d in deps), default=-1)
        return depth[job_id]

    def order(j: JobInfo) -> tuple[Any, ...]:
        """Parents before their children, children by key; DAG steps by level, then in the
        order they were enqueued (their ids)."""
        chain: list[Any] = []
        node: JobInfo | None = j
        while node is not None:
            key = _natural(node.flow_key or "") if node.parent_id else ()
            chain.append((level(node.job_id), key, node.job_id))
            node = by_id.get(node.parent_id) if node.parent_id else None
        return tuple(reversed(chain))

    for j in sorted(jobs, key=order):
        deps = ", ".join(_label(by_id[d]) if d in by_id else d for d in j.depends_on)
        indent = "   " * level(j.job_id)
        arrow = f"  ← {deps}" if deps else ""
        mark = STATE_MARK.get(j.state, "?")
        tally = f"  children: {_tally(j.children)}" if j.children else ""
        lines.append(f"{indent}{mark} {_label(j)} [{j.state}] {j.job_id}{arrow}{tally}")
    return lines


def _natural(key: str) -> tuple[tuple[int, int, str], ...]:
    """A sort key that puts p2 before p10: digit runs compare as numbers."""
    parts = re.split(r"(\d+)", key)
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in parts if p)


def _label(j: JobInfo) -> str:
    return f"{j.flow_key} ({j.name})" if j.flow_key and j.flow_key != j.name else j.name


# -- schedules -------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleView:
    """One schedule as ``blamequeue schedules`` shows it."""

    name: str
    source: str  # "settings", "code" or "admin"
    job: str
    queue: str | None  # None: the job is not registered in this process
    rule: str
    tz: str
    enabled: bool
    last_fired: datetime | None
    next_fires: Sequence[datetime]
    problem: str | None = None  # why the next fire times cannot be computed
    payload: Any = None  # what each fire enqueues (an argument envelope for a call)
    overlap: str = "skip"
    skipped: int = 0  # occurrences skipped while the last run still waited or ran
    last_skipped: datetime | None = None
    expires: float | None = None


def render_schedules(views: Sequence[ScheduleView]) -> list[str]:
    if not views:
        return ["no schedules (SCHEDULES, the code and the admin have none)"]
    lines: list[str] = []
    for v in views:
        queue = f"on {v.queue!r}" if v.queue else "(not registered here: the scheduler skips it)"
        lines.append(f"{v.name} ({v.source}): {v.job} {queue}")
        lines.append(f"  rule        {v.rule}")
        lines.append(f"  calls       {_call_text(v.job, v.payload)}")
        overlap = v.overlap
        if v.skipped:
            last = f", last {when(v.last_skipped)}" if v.last_skipped else ""
            overlap += f" ({v.skipped} skipped{last})"
        lines.append(f"  overlap     {overlap}")
        if v.expires is not None:
            lines.append(f"  expires     {v.expires:g} s after each fire")
        lines.append(f"  last fired  {when(v.last_fired) if v.last_fired else 'never'}")
        if not v.enabled:
            nexts = "disabled"
        elif v.problem:
            nexts = f"cannot tell: {v.problem}"
        else:
            nexts = ", ".join(when(f) + _local(f, v.tz) for f in v.next_fires)
        lines.append(f"  next        {nexts}")
    return lines


def _call_text(job: str, payload: Any) -> str:
    """``shop.jobs.cleanup(7, batch_size=100)``, or the one payload a handler is given."""
    short = job.rsplit(".", 1)[-1]
    if isinstance(payload, dict) and payload.keys() == {"__args__", "__kwargs__"}:
        args = [repr(a) for a in payload["__args__"]]
        args += [f"{k}={v!r}" for k, v in payload["__kwargs__"].items()]
        text = f"{short}({', '.join(args)})"
    elif payload is None:
        text = f"{short}() (no payload)"
    else:
        text = f"{short}({payload!r})"
    return text if len(text) <= 120 else f"{text[:119]}…"


def _local(moment: datetime, tz: str) -> str:
    """`` (02:30 CET)``: the wall time a cron rule speaks of, unless that is UTC."""
    if tz in ("", "UTC"):
        return ""
    try:
        return f" ({moment.astimezone(ZoneInfo(tz)):%H:%M %Z})"
    except (ZoneInfoNotFoundError, ValueError):  # this host's tz database lacks it
        return f" (unknown time zone {tz!r})"


# -- the control plane -----------------------------------------------------------------------
def render_controls(controls: Iterable[QueueControl]) -> list[str]:
    """One line per paused queue and per limited queue (under ``stats``)."""
    lines = []
    for c in controls:
        where = f"{c.queue!r} on backend {c.backend}"
        if c.paused:
            by = f" by {c.paused_by}" if c.paused_by else ""
            since = f" since {when(c.paused_at)}" if c.paused_at else ""
            why = f": {c.reason}" if c.reason else ""
            lines.append(f"paused  {where}{by}{since}{why}")
        if not c.limits.empty:
            lines.append(f"limits  {where}: {c.limits.describe()} ({c.source})")
    return lines


def render_limits(c: QueueControl) -> list[str]:
    """``blamequeue limits QUEUE``: the limits in force, where they come from, the pause."""
    lim = c.limits
    rows = [
        ("concurrency", "-" if lim.concurrency is None else str(lim.concurrency)),
        ("key concurrency", "-" if lim.key_concurrency is None else str(lim.key_concurrency)),
        ("rate limit", "-" if lim.rate_limit is None else rate_text(lim.rate_limit)),
        ("key rate limit", "-" if lim.key_rate_limit is None else rate_text(lim.key_rate_limit)),
        (
            "key weights",
            weights_text(lim.key_weights) + " (others 1)" if lim.key_weights else "-",
        ),
        (
            "source",
            {"live": "live (set_limits)", "settings": 'BLAMEQUEUE["QUEUES"]'}.get(
                c.source, "none (no limits)"
            ),
        ),
        ("paused", ("yes" + (f": {c.reason}" if c.reason else "")) if c.paused else "no"),
    ]
    width = max(len(k) for k, _ in rows)
    return [f"queue {c.queue} (backend {c.backend})"] + [
        f"  {k.ljust(width)}  {v}" for k, v in rows
    ]


def render_unserved(backend: str, queues: Iterable[tuple[str, int]]) -> list[str]:
    """Queues with waiting jobs that no live worker of the registry consumes."""
    return [
        f"unserved  {q!r} on backend {backend}: {n:,} waiting job(s), no live worker serves it"
        for q, n in queues
    ]


def render_waits(backend: str, waits: Iterable[HandlerWait]) -> list[str]:
    """Jobs handed back for lack of a handler that no live worker has."""
    waits = list(waits)
    total = sum(w.count for w in waits)
    if not total:
        return []
    names = ", ".join(f"{w.count:,} × {w.name!r} on {w.queue!r}" for w in waits)
    return [
        f"{total:,} job(s) wait for a handler no running worker has on backend {backend}: {names}"
    ]


WORKER_MARK = {"running": "▶", "stalled": "⚠", "stopping": "◼", "stopped": "·", "gone": "✗"}


def render_workers(workers: Sequence[WorkerInfo], now: datetime) -> list[str]:
    """``blamequeue workers``: one line per worker, then the jobs each runs now."""
    if not workers:
        return ["no worker has registered (runworker registers itself and heartbeats)"]
    lines = []
    for w in workers:
        seen = span(max(0.0, (now - w.last_seen).total_seconds()))
        up = span(max(0.0, (now - w.started_at).total_seconds()))
        mark = WORKER_MARK.get(w.state, "?")
        lines.append(
            f"{mark} {w.worker_id}  {w.state:<8} backend {w.backend}  "
            f"queues {', '.join(w.queues)}  running {len(w.running)}/{w.concurrency}  "
            f"done {w.done:,}  failed {w.failed:,}  up {up}  seen {seen} ago  v{w.version}"
        )
        lines += [f"    {job_id}" for job_id in w.running]
    return lines
