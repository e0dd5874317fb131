"""The worker registry: every consumer registers itself, heartbeats, and says when it stops.

Rows live in the Django database of the worker's backend (its ``DATABASE``: the local
backend's own, the redis and SQS backends' outbox and audit database), so every backend has a
registry without an engine-specific copy. Time is that database's clock. A worker whose
heartbeats stopped for ``GONE_AFTER`` is shown as ``gone`` (it died: SIGKILL, a lost host);
rows of workers stopped or gone for ``PRUNE_AFTER`` are deleted by any live worker's
heartbeat.

The registry also answers two questions of the control plane: which job names live workers
have handlers for (a worker hands a job it cannot run back without spending an attempt, and
waits longer when no live worker has it), and which queues no live worker serves.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connections, transaction
from django.utils import timezone

from django_blamequeue.backends.base import Backend
from django_blamequeue.core.controls import HandlerWait, WorkerInfo
from django_blamequeue.models import WorkerRecord

logger = logging.getLogger("django_blamequeue.fleet")

HEARTBEAT = 5.0  # seconds between a worker's registry updates
GONE_AFTER = 30.0  # no heartbeat for this long: the worker is shown as gone
PRUNE_AFTER = 86400.0  # stopped or gone for this long: its row is deleted
ANY_NAME = "*"  # job_names of a consumer with a handler of its own: it runs every name
#: The states a heartbeat writes; past GONE_AFTER without one, a worker in them is gone.
LIVE = ("running", "stalled", "stopping")


def database_of(backend: Backend) -> str:
    """The Django database of ``backend``'s registry rows."""
    return backend.database or str(backend.config.options.get("DATABASE") or "default")


def clock(db: str) -> datetime:
    """The registry database's clock (SQLite lives on this host: its clock is ours)."""
    connection = connections[db]
    if connection.vendor != "postgresql":
        return timezone.now()
    with connection.cursor() as cur:
        cur.execute("SELECT statement_timestamp()")
        value: datetime = cur.fetchone()[0]
        return value


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("django-blamequeue")
    except PackageNotFoundError:  # a source tree
        return "dev"


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    """What a heartbeat reports about its consumer."""

    running: tuple[str, ...]
    state: str  # running | stalled | stopping
    done: int
    failed: int


def info_of(row: WorkerRecord, now: datetime) -> WorkerInfo:
    state = row.state
    if state in LIVE and row.last_seen < now - timedelta(seconds=GONE_AFTER):
        state = "gone"
    return WorkerInfo(
        worker_id=row.worker_id,
        backend=row.backend,
        host=row.host,
        pid=row.pid,
        queues=tuple(row.queues or ()),
        concurrency=row.concurrency,
        running=tuple(row.running or ()) if state in LIVE else (),
        started_at=row.started_at,
        last_seen=row.last_seen,
        state=state,
        version=row.version,
        job_names=tuple(row.job_names or ()),
        stopped_at=row.stopped_at,
        done=row.done,
        failed=row.failed,
    )


def workers(backend: Backend, now: datetime | None = None) -> list[WorkerInfo]:
    """Every registered worker of ``backend``, live ones first, newest first."""
    db = database_of(backend)
    t = now or clock(db)
    rows = WorkerRecord.objects.using(db).filter(backend=backend.alias)
    found = [info_of(r, t) for r in rows.order_by("-started_at")]
    return sorted(found, key=lambda w: not w.live)


def prune(backend: Backend, now: datetime | None = None) -> int:
    """Delete rows of workers stopped or gone for ``PRUNE_AFTER``; answer how many."""
    db = database_of(backend)
    t = now or clock(db)
    cut = t - timedelta(seconds=PRUNE_AFTER)
    n, _ = WorkerRecord.objects.using(db).filter(backend=backend.alias, last_seen__lt=cut).delete()
    return int(n)


def live_names(live: Iterable[WorkerInfo], exclude: str = "") -> dict[str, set[str]]:
    """Queue → the job names the live workers serving it have handlers for."""
    names: dict[str, set[str]] = {}
    for w in live:
        if w.worker_id == exclude or not w.live:
            continue
        for q in w.queues:
            names.setdefault(q, set()).update(w.job_names)
    return names


def handled(names: dict[str, set[str]], queue: str, name: str) -> bool:
    known = names.get(queue, set())
    return name in known or ANY_NAME in known


def unhandled(backend: Backend, waits: Sequence[HandlerWait] | None = None) -> list[HandlerWait]:
    """Jobs handed back for lack of a handler whose name no live worker serving their queue
    has: they wait for a deploy (or fail after ``MISSING_HANDLER_TIMEOUT``)."""
    names = live_names(w for w in workers(backend) if w.live)
    found = backend.handler_waits() if waits is None else waits
    return [w for w in found if not handled(names, w.queue, w.name)]


def served_queues(backend: Backend) -> set[str]:
    """The queues at least one live worker of ``backend`` consumes."""
    return {q for w in workers(backend) if w.live for q in w.queues}


class Registration:
    """One consumer's row: written at ``start``, refreshed every ``HEARTBEAT`` by a thread of
    its own (never the consumer's loop), marked stopped at ``stop``. A registry that cannot
    be written is logged and retried; it never stops the worker."""

    def __init__(
        self,
        backend: Backend,
        queues: Sequence[str],
        concurrency: int,
        job_names: Sequence[str],
        snapshot: Callable[[], Snapshot],
        *,
        heartbeat: float | None = None,
    ) -> None:
        self.backend = backend
        self.db = database_of(backend)
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"
        self.queues = list(queues)
        self.concurrency = concurrency
        self.job_names = sorted(job_names)
        self.snapshot = snapshot
        self.heartbeat = heartbeat or HEARTBEAT
        #: Queue → names other live workers have handlers for (refreshed by each beat).
        self.elsewhere: dict[str, set[str]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def known_elsewhere(self, queue: str, name: str) -> bool:
        return handled(self.elsewhere, queue, name)

    def start(self) -> None:
        try:
            self._write(created=True)
        except Exception:
            logger.warning("could not register worker %s", self.worker_id, exc_info=True)
        self._thread = threading.Thread(target=self._run, name="blamequeue-registry", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        try:
            self._write(final=True)
        except Exception:
            logger.warning("could not mark worker %s stopped", self.worker_id, exc_info=True)

    def _run(self) -> None:
        beats = 0
        try:
            while not self._stop.wait(self.heartbeat):
                try:
                    self._write()
                    self.elsewhere = live_names(workers(self.backend), exclude=self.worker_id)
                    beats += 1
                    if beats % 12 == 1:
                        prune(self.backend)
                except Exception:
                    logger.warning("registry heartbeat of %s failed", self.worker_id, exc_info=True)
                    connections[self.db].close_if_unusable_or_obsolete()
        finally:
            connections.close_all()

    def _write(self, *, created: bool = False, final: bool = False) -> None:
        snap = self.snapshot()
        rows = WorkerRecord.objects.using(self.db)
        fields: dict[str, Any] = {
            "running": [] if final else list(snap.running),
            "state": "stopped" if final else snap.state,
            "done": snap.done,
            "failed": snap.failed,
        }
        with transaction.atomic(using=self.db):
            now = clock(self.db)
            fields["last_seen"] = now
            if final:
                fields["stopped_at"] = now
            if created:
                rows.update_or_create(
                    worker_id=self.worker_id,
                    defaults={
                        **fields,
                        "backend": self.backend.alias,
                        "host": socket.gethostname(),
                        "pid": os.getpid(),
                        "queues": self.queues,
                        "concurrency": self.concurrency,
                        "job_names": self.job_names,
                        "version": _version(),
                        "started_at": now,
                    },
                )
            else:
                rows.filter(worker_id=self.worker_id).update(**fields)
