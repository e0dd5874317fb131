"""The outbox: messages written in the caller's transaction, relayed after commit.

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

import functools
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connections, transaction

from django_blamequeue.backends import all_backends, get_backend
from django_blamequeue.backends.base import Backend
from django_blamequeue.backends.hooks import install_hooks
from django_blamequeue.core.lifecycle import describe
from django_blamequeue.core.records import OutboxItem
from django_blamequeue.core.texts import storable
from django_blamequeue.core.wire import job_from_body, report_from_body
from django_blamequeue.models import OutboxEntry
from django_blamequeue.observability import metrics
from django_blamequeue.relay import routing

logger = logging.getLogger("django_blamequeue.outbox")
BATCH = 500


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
                if not (backend.has_outbox or backend.sends_later):
                    continue
                try:
                    sent, skipped = self.drain_engine(backend)
                except Exception as exc:
                    logger.warning("outbox relay: backend %r failed: %s", backend.alias, exc)
                    failures.append(exc)
                    continue
                total.sent += sent
                total.skipped += skipped
        if failures and not total:
            raise failures[0]  # nothing got through: let the caller see the error
        return total

    def drain_engine(self, backend: Backend) -> tuple[int, int]:
        """An engine's own outbox: take a page (leased to this relay), deliver each group
        to its target, mark it done; answers (sent, skipped). Then its late sends."""
        sent = skipped = 0
        after = ""  # entries come in order: a pass never takes one twice
        while backend.has_outbox:
            items = backend.take_outbox(self.batch, after)
            if not items:
                break
            after = items[-1].ref
            groups: dict[tuple[str, str], list[OutboxItem]] = {}
            for item in items:
                groups.setdefault((item.kind, item.backend), []).append(item)
            for (kind, alias), group in groups.items():
                done, left = deliver_isolated(
                    kind,
                    alias,
                    group,
                    functools.partial(_deliver_items, backend, kind, alias),
                    lambda item, error: backend.outbox_done([item], error=error),
                    lambda item: f"entry {item.ref}",
                )
                sent += done
                skipped += left
            if len(items) < self.batch:
                break
        if backend.sends_later:
            sent += backend.send_unsent(self.batch)
        return sent, skipped

    def _drain(self, db: str) -> RelayReport:
        """Page through ``db``'s outbox; each page one transaction, its rows locked.

        Relays run in every worker process and every sweeper: with the page's rows locked
        (``SKIP LOCKED`` where the database has it) they share the outbox instead of each
        delivering every row. A group that fails is retried row by row in savepoints, so one
        bad row is logged, counted and left for the next pass, never blocking the rest.
        """

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
        with transaction.atomic(using=db):
            send(kind, alias, [r.body for r in rows])
            OutboxEntry.objects.using(db).filter(id__in=[r.id for r in rows]).delete()


def send(kind: str, alias: str, bodies: Sequence[dict[str, Any]]) -> None:
    """Deliver outbox bodies of one ``kind`` to backend ``alias`` (idempotent at the target)."""
    if kind == "report":
        routing.deliver_reports(alias, [report_from_body(b) for b in bodies])
    elif kind == "enqueue":
        routing.deliver_jobs(alias, [job_from_body(b) for b in bodies])
    else:
        raise ValueError(f"unknown outbox kind {kind!r}")


def _deliver_items(backend: Backend, kind: str, alias: str, items: list[OutboxItem]) -> None:
    """Deliver engine outbox items of one kind to ``alias``, then mark them done there."""
    routing.target(alias)  # an alias nobody configured fails here, naming it
    problems = [i.problem for i in items if i.problem]
    if problems:
        raise ValueError(problems[0])
    if kind == "enqueue":
        routing.deliver_jobs(alias, [i.job for i in items if i.job is not None])
    elif kind == "report":
        routing.deliver_reports(alias, [i.report for i in items if i.report is not None])
    else:
        raise ValueError(f"unknown outbox kind {kind!r}")
    backend.outbox_done(items)


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
            failed(entry, storable(describe(exc), 2000))  # stored: NUL-free, bounded
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
    if OutboxEntry.objects.using(using).add(entries):
        transaction.on_commit(nudge, using=using)


class RelayHooks:
    """The ``Hooks`` every backend calls: relay and settle here, cascade through routing."""

    def outbox_written(self) -> None:
        nudge()

    def settle_soon(self, alias: str, parent_ids: Sequence[str]) -> None:
        settle_soon(alias, parent_ids)

    def cancel_elsewhere(self, children: Sequence[tuple[str, str]]) -> None:
        routing.cancel_children(children)


def install() -> None:
    """Give the backends their hooks (``AppConfig.ready``)."""
    install_hooks(RelayHooks())
