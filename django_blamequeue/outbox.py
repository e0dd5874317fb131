"""The outbox: messages written in the caller's transaction, relayed after commit (SPEC §3/§4).

Two kinds: ``enqueue`` (a job bound for another backend) and ``report`` (a flow child's
terminal outcome bound for its parent's dependency row). The relay pages through unsent rows
with a cursor, delivers each group to its target backend and deletes what was delivered.
Delivery is at least once and idempotent at the target — jobs by their fixed id, reports by
``status = 'pending'`` — so a relay killed between the send and the delete repeats harmlessly.
The relay is nudged by each commit that writes a row, and the sweeper runs it for whatever a
crash left behind.

The relay also settles the parents whose reports an ack recorded directly (a parent on the
child's own database, ``settle_soon``): in memory, after that ack's commit. A process that
dies first loses only the nudge: the flow sweeper settles any parent with nothing pending.
"""

from __future__ import annotations

import base64
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from django.db import transaction

from . import metrics
from .records import NewJob, Report
from .serializers import Encoded

logger = logging.getLogger("django_blamequeue.outbox")
BATCH = 500


def job_to_body(job: NewJob) -> dict[str, Any]:
    body = asdict(job)
    body["payload"] = {
        "content_type": job.payload.content_type,
        "content_encoding": job.payload.content_encoding,
        "body": base64.b64encode(job.payload.body).decode(),
    }
    body["run_at"] = job.run_at.isoformat() if job.run_at else None
    body["depends_on"] = list(job.depends_on)
    return body


def job_from_body(body: dict[str, Any]) -> NewJob:
    data = dict(body)
    p = data.pop("payload")
    data["payload"] = Encoded(p["content_type"], p["content_encoding"], base64.b64decode(p["body"]))
    data["run_at"] = datetime.fromisoformat(data["run_at"]) if data.get("run_at") else None
    data["depends_on"] = tuple(data.get("depends_on") or ())
    return NewJob(**data)


def report_to_body(report: Report) -> dict[str, Any]:
    body = asdict(report)
    body["result"] = base64.b64encode(report.result).decode() if report.result is not None else None
    return body


def report_from_body(body: dict[str, Any]) -> Report:
    data = dict(body)
    data["result"] = base64.b64decode(data["result"]) if data.get("result") is not None else None
    return Report(**data)


@dataclass(kw_only=True)
class RelayReport:
    sent: int = 0
    skipped: int = 0
    settled: int = 0  # parents settled after acks recorded their reports (``settle_soon``)

    def __bool__(self) -> bool:
        return bool(self.sent or self.skipped or self.settled)

    @property
    def moved(self) -> bool:
        """Did this pass change anything another pass may build on (a skip changes nothing)?"""
        return bool(self.sent or self.settled)


def database_of(backend: Any) -> str:
    """The Django database that holds ``backend``'s outbox and audit rows: its ``DATABASE``
    option (``backend`` is a ``Backend`` or its ``BackendConfig``)."""
    config = getattr(backend, "config", backend)
    return str(config.options.get("DATABASE") or "default")


def outbox_databases() -> list[str]:
    """Every database that may hold outbox rows: the default and each backend's."""
    from .backends import all_backends

    dbs = ["default"]
    for b in all_backends():
        db = database_of(b)
        if db not in dbs:
            dbs.append(db)
    return dbs


class Relay:
    def __init__(self, databases: Sequence[str] | None = None, batch: int = BATCH) -> None:
        self.databases = list(databases) if databases is not None else None
        self.batch = batch
        self.name = "relay"
        self.period = 1.0

    def run_once(self) -> RelayReport:
        """Drain the outbox table of every database, then the engines' own outboxes."""
        from .backends import all_backends

        total = RelayReport()
        failures: list[BaseException] = []
        settle_pending(total)
        for db in self.databases or outbox_databases():
            try:
                part = self._drain(db)
            except Exception as exc:  # one unreachable database must not stall the others
                logger.warning("outbox relay: database %r failed: %s", db, exc)
                failures.append(exc)
                continue
            total.sent += part.sent
            total.skipped += part.skipped
        if self.databases is None:
            for backend in all_backends():
                if not backend.has_outbox:
                    continue
                try:
                    sent, skipped = backend.drain_outbox(self.batch)
                except Exception as exc:
                    logger.warning("outbox relay: backend %r failed: %s", backend.alias, exc)
                    failures.append(exc)
                    continue
                total.sent += sent
                total.skipped += skipped
        if failures and not total:
            raise failures[0]  # nothing got through: let the caller see the error
        return total

    def _drain(self, db: str) -> RelayReport:
        """Page through ``db``'s outbox; each page one transaction, its rows locked.

        Relays run in every worker process and every sweeper: with the page's rows locked
        (``SKIP LOCKED`` where the database has it) they share the outbox instead of each
        delivering every row. A group that fails is retried row by row in savepoints, so one
        bad row is logged, counted and left for the next pass, never blocking the rest.
        """
        from django.db import connections

        from .models import OutboxEntry

        report = RelayReport()
        cursor = 0
        lock = connections[db].features.has_select_for_update_skip_locked
        while True:
            with transaction.atomic(using=db):
                page = OutboxEntry.objects.using(db).filter(sent_at__isnull=True, id__gt=cursor)
                if lock:
                    page = page.select_for_update(skip_locked=True)
                rows = list(page.order_by("id")[: self.batch])
                if not rows:
                    return report
                cursor = rows[-1].id
                groups: dict[tuple[str, str], list[Any]] = {}
                for row in rows:
                    groups.setdefault((row.kind, row.backend), []).append(row)
                for (kind, alias), group in groups.items():
                    self._deliver_group(db, kind, alias, group, report)
            if len(rows) < self.batch:
                return report

    def _deliver_group(
        self, db: str, kind: str, alias: str, group: list[Any], report: RelayReport
    ) -> None:
        from .models import OutboxEntry

        def failed(row: Any, error: str) -> None:
            OutboxEntry.objects.using(db).filter(id=row.id).update(
                attempts=row.attempts + 1, last_error=error
            )

        sent, skipped = deliver_isolated(
            kind,
            alias,
            group,
            lambda rows: self._deliver(db, kind, alias, rows),
            failed,
            lambda row: f"row {row.id}",
        )
        report.sent += sent
        report.skipped += skipped

    def _deliver(self, db: str, kind: str, alias: str, rows: list[Any]) -> None:
        """Deliver and delete in a savepoint of the page's transaction on ``db``.

        On the same database the delivery commits with the delete: exactly once. Elsewhere
        the target commits first: a crash before our commit delivers again, and the target
        records it once (jobs by their id, reports by ``status = 'pending'``).
        """
        from .models import OutboxEntry

        with transaction.atomic(using=db):
            send(kind, alias, [r.body for r in rows])
            OutboxEntry.objects.using(db).filter(id__in=[r.id for r in rows]).delete()


def send(kind: str, alias: str, bodies: Sequence[dict[str, Any]]) -> None:
    """Deliver outbox bodies of one ``kind`` to backend ``alias`` (idempotent at the target)."""
    from .backends import get_backend

    target = get_backend(alias)
    if kind == "report":
        target.deliver_reports([report_from_body(b) for b in bodies])
    elif kind == "enqueue":
        target.enqueue_many([job_from_body(b) for b in bodies])
    else:
        raise ValueError(f"unknown outbox kind {kind!r}")


def deliver_isolated[T](
    kind: str,
    alias: str,
    group: Sequence[T],
    deliver: Callable[[list[T]], None],
    failed: Callable[[T, str], None],
    label: Callable[[T], object],
) -> tuple[int, int]:
    """Deliver a group at once; if that fails, entry by entry, so one bad entry is logged,
    counted, marked (``failed``) and left for the next pass, never blocking the rest. Every
    relay (the outbox table's, an engine's own) goes through here. Answers (sent, skipped)."""
    try:
        deliver(list(group))
        return len(group), 0
    except Exception:  # isolate: retried entry by entry below
        pass
    sent = skipped = 0
    for entry in group:
        try:
            deliver([entry])
            sent += 1
        except Exception as exc:
            skipped += 1
            metrics.outbox_skipped(alias, kind)
            logger.warning("outbox %s (%s → %s) skipped: %s", label(entry), kind, alias, exc)
            failed(entry, f"{type(exc).__name__}: {exc}"[:2000])
    return sent, skipped


_settle_lock = threading.Lock()
_to_settle: dict[str, set[str]] = {}  # backend alias -> parents whose reports were recorded


def settle_soon(alias: str, parent_ids: Iterable[str]) -> None:
    """After a commit that recorded reports on these parents (of backend ``alias``): have
    the relay settle the due ones. Coalesced: a wide flow's parent is checked once a pass."""
    with _settle_lock:
        _to_settle.setdefault(alias, set()).update(parent_ids)
    nudge(drain=False)


def settle_pending(report: RelayReport) -> None:
    """Settle what ``settle_soon`` queued, each backend's parents in one transaction; if that
    fails, parent by parent, and one that still fails is logged, counted as skipped and left
    to the flow sweeper (which settles any parent with nothing pending)."""
    from .backends import get_backend

    with _settle_lock:
        work = {alias: sorted(parents) for alias, parents in _to_settle.items()}
        _to_settle.clear()
    for alias, parents in work.items():
        backend = get_backend(alias)

        def settle(ids: list[str], backend: Any = backend) -> None:
            report.settled += len(backend.settle_reported(ids))

        _, skipped = deliver_isolated(
            "settle", alias, parents, settle, lambda p, e: None, lambda p: f"parent {p}"
        )
        report.skipped += skipped


_nudge_lock = threading.Lock()
_nudge_event = threading.Event()
_drain_wanted = threading.Event()  # unset: the pass only settles (``settle_soon``)
_nudge_thread: threading.Thread | None = None


def nudge(*, drain: bool = True) -> None:
    """Relay soon, in this process's relay thread (started on first use; nudges coalesce).
    ``drain=False``: only settle what ``settle_soon`` queued; no outbox row was written."""
    global _nudge_thread
    if drain:
        _drain_wanted.set()
    _nudge_event.set()
    with _nudge_lock:
        if _nudge_thread is None or not _nudge_thread.is_alive():
            _nudge_thread = threading.Thread(
                target=_relay_loop, name="blamequeue-relay", daemon=True
            )
            _nudge_thread.start()


def _relay_loop() -> None:
    global _nudge_thread
    from django.db import connections

    relay = Relay()
    while True:
        # Under load nudges come faster than a second: the connection stays open between
        # passes. Idle for a second, it is given back; idle for 30, the thread ends.
        if not _nudge_event.wait(timeout=1.0):
            connections.close_all()
            if not _nudge_event.wait(timeout=29.0):
                with _nudge_lock:  # a nudge racing our exit must not find us "alive"
                    if not _nudge_event.is_set():
                        _nudge_thread = None
                        return
        _nudge_event.clear()
        drain = _drain_wanted.is_set()
        _drain_wanted.clear()
        try:
            if drain:
                relay.run_once()
            else:
                settle_pending(RelayReport())
        except Exception:
            logger.exception("outbox relay pass failed; the sweeper will retry")
            connections.close_all()  # a broken connection: the next pass opens a new one


def write(kind: str, backend: str, job_id: str, body: dict[str, Any], *, using: str) -> None:
    """Add one row in the current transaction on ``using``; nudge the relay after commit."""
    write_many([(kind, backend, job_id, body)], using=using)


def write_many(entries: Iterable[tuple[str, str, str, dict[str, Any]]], *, using: str) -> None:
    from .models import OutboxEntry

    rows = [OutboxEntry(kind=k, backend=b, job_id=j, body=body) for k, b, j, body in entries]
    if rows:
        OutboxEntry.objects.using(using).bulk_create(rows)
        transaction.on_commit(nudge, using=using)
