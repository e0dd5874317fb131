"""The text ``runworker`` prints about itself: its banner's rows (a block per backend when it
serves several), the progress line's notes and what a burst leaves behind."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from django.core.checks import CheckMessage

from django_blamequeue.backends import Backend
from django_blamequeue.core.records import Backlog
from django_blamequeue.exceptions import QueueError
from django_blamequeue.jobs import registry
from django_blamequeue.management.render import span
from django_blamequeue.management.sizing import connection_bound
from django_blamequeue.worker import atomic_turns, fleet
from django_blamequeue.worker.ahead import SHORT_RUN, Ahead
from django_blamequeue.worker.consumer import Consumer
from django_blamequeue.worker.progress import worker_identity


def worker_rows(
    consumers: Sequence[Consumer],
    queues: Sequence[str],
    *,
    concurrency: str,
    grace: float,
    sweeping: bool,
    unused: Sequence[CheckMessage],
) -> list[tuple[str, str]]:
    """The rows of ``runworker``'s banner: with several backends, a block of rows for each
    (its database, connections, wake-up) and the options they share once."""
    opts = consumers[0].options
    served = [serving(c, queues, sweeping) for c in consumers]
    several = len(consumers) > 1
    rows = [("worker", worker_identity())]
    if several:
        for s in served:
            rows.append(("backend", s.pop("backend")))
            rows += [(f"  {k}", v) for k, v in s.items()]
        rows += [
            ("queues", f"{', '.join(queues)} (on each backend)"),
            ("concurrency", f"{concurrency}, on each backend"),
        ]
    else:
        s = served[0]
        rows += [
            ("backend", s["backend"]),
            ("queues", ", ".join(queues)),
            ("concurrency", concurrency),
            ("db connections", s["db connections"]),
        ]
    rows.append(("lease", f"{opts.lease:g} s (renewed every {opts.lease / 2:g} s)"))
    rows.append(("claim ahead", ahead_row(opts.concurrency, opts.rate_limit)))
    if not several:
        rows.append(("wake-up", served[0]["wake-up"]))
    rows += [
        ("rate limit", "{} per {:g} s".format(*opts.rate_limit) if opts.rate_limit else "none"),
        ("async jobs", async_row(queues, opts.concurrency)),
    ]
    if not several and "atomic jobs" in served[0]:
        rows.append(("atomic jobs", served[0]["atomic jobs"]))
    rows += [
        ("shutdown grace", f"{grace:g} s"),
        ("sweeper", "on" if sweeping else "off (--no-sweep)"),
        ("mode", mode(opts)),
    ]
    control = [control_rows(c) for c in consumers]
    shared = set.intersection(*(set(found) for found in control))  # said once
    rows += [row for row in control[0] if row in shared]
    for c, found in zip(consumers, control, strict=True):
        rows += [(f"{k} ({c.backend.alias})", v) for k, v in found if (k, v) not in shared]
        rows += [("warning", text) for text in c.backend.deployment_warnings()]
    for warning in unused:
        rows.append(("warning", f"{warning.msg}. {warning.hint} ({warning.id})"))
    return rows


def mode(options: Any) -> str:
    if not options.burst:
        return "run until signalled"
    if options.wait_delayed:
        return "burst (exit when empty, delayed jobs included)"
    return "burst (exit when nothing is due)"


def delayed_left(left: Backlog) -> str:
    """What a burst leaves behind: the delayed jobs, and when the next one is due."""
    when = ""
    if left.next_due_at is not None:
        seconds = max(0.0, (left.next_due_at - datetime.now(UTC)).total_seconds())
        soon = f"{seconds:.1f} s" if seconds < 10 else span(seconds)
        when = f"; the next is due in {soon} ({left.next_due_at:%Y-%m-%d %H:%M:%S} UTC)"
    return f"{left.delayed:,} delayed job(s) left{when}; --wait-delayed waits for them"


def database_of(b: Backend) -> str:
    """The banner's words for the Django database that holds a backend's jobs (or ledger)."""
    return f", database {b.database}" if b.database is not None else ""


def serving(c: Consumer, queues: Sequence[str], sweeping: bool) -> dict[str, str]:
    """The banner's rows about one backend a worker serves."""
    b = c.backend
    table = getattr(b, "jobtable", None)  # the local backend's jobs, the SQS ledger
    vendor = (
        table.connection.vendor
        if table is not None
        else str(getattr(b, "engine_label", b.protocol))  # e.g. "Redis Cluster, slot N"
    )
    opts = c.options
    poll = opts.fast_poll if b.cheap_polling else opts.poll_interval
    rows = {
        "backend": f"{b.alias} ({b.protocol}, {vendor}{database_of(b)})",
        "db connections": connection_bound(
            b, queues, opts.concurrency, sweeping=sweeping
        ).describe(),
        "wake-up": b.wake_up if b.supports_listen else f"polling every {poll:g} s",
    }
    atomic = atomic_turns.describe(b, queues)
    if atomic:
        rows["atomic jobs"] = atomic
    return rows


def notes(consumer: Any, named: bool = False) -> list[str]:
    """The progress line's words about the control plane: paused queues, jobs this worker
    has no handler for (by name); ``named`` says on which backend."""
    notes = []
    paused = consumer.control.paused()
    if paused:
        where = f" on {consumer.backend.alias}" if named else ""
        notes.append("paused " + ", ".join(paused) + where)
    if consumer.no_handler:
        names = sorted(consumer.no_handler, key=lambda n: -consumer.no_handler[n])
        shown = ", ".join(names[:3]) + (f" +{len(names) - 3}" if len(names) > 3 else "")
        notes.append(f"waiting for a handler: {shown}")
    return notes


def control_rows(consumer: Any) -> list[tuple[str, str]]:
    """Banner rows: paused and limited queues, jobs no running worker has a handler for."""
    try:
        consumer.control.refresh(force=True)
        rows: list[tuple[str, str]] = consumer.control.describe()
        queues = set(consumer.options.queues)
        waits = [w for w in fleet.unhandled(consumer.backend) if w.queue in queues]
    except QueueError as exc:
        return [("control", f"could not be read ({exc})")]
    rows.append(("handlers", f"{len(registry.registered())} job names registered"))
    total = sum(w.count for w in waits)
    if total:
        names = ", ".join(f"{w.name} ({w.count:,})" for w in waits[:3])
        rows.append(
            ("waiting", f"{total:,} job(s) wait for a handler no running worker has: {names}")
        )
    return rows


def ahead_row(concurrency: int, rate_limit: object) -> str:
    """How many jobs the worker may lease beyond its free slots (``worker/ahead.py``)."""
    cap = Ahead(concurrency, enabled=rate_limit is None).cap
    if cap:
        return f"up to {cap} beyond the free slots, while runs average under {SHORT_RUN:g} s"
    return "off (--rate-limit)" if rate_limit else "off (one slot)"


def async_row(queues: Sequence[str], concurrency: int) -> str:
    """What the banner says of ``async def`` handlers: they run on an event loop thread,
    inside the same ``--concurrency`` slots as threaded ones."""
    names = sorted(
        d.name for d in registry.registered().values() if d.queue in queues and d.is_async
    )
    if not names:
        return "none registered here (an event loop starts with the first one)"
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return (
        f"{len(names)} async def job{'s' if len(names) != 1 else ''} ({shown}) run on one "
        f"event loop, sharing the {concurrency} slots"
    )
