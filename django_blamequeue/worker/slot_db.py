"""A slot thread's database connections: kept from job to job for the worker's life.

Django closes a connection after each web request when ``CONN_MAX_AGE`` says so (0 by default).
A worker's slot thread has no requests, and opening a connection per job (a backend fork,
authentication, ``set_config``, cold catalog caches) cost more than most jobs themselves: ORM
jobs drained at 285/s with a connection per job and 855/s with kept ones (docs/perf-notes.md).
So a slot keeps its connections whatever ``CONN_MAX_AGE`` says, and closes one only when it
cannot be trusted for the next job:

- after an interrupt (timeout, cancel, lost lease): the handler may have been stopped between a
  ``BEGIN`` and Django's note of it, so the connection could hold a transaction open;
- when the handler left it inside a transaction (an ``atomic`` block or autocommit turned
  off): closing rolls that back instead of leaking it into the next job;
- after a database error in the job (``errors_occurred``): the session's state is suspect;
- when it was idle for ``IDLE_CHECK`` seconds and no longer answers (a restarted server, a
  proxy's idle timeout): checked before the next job uses it.

With Django's connection pool (``OPTIONS: {"pool": ...}``, psycopg 3) the connection goes back
to the pool after every job instead: a check-out costs microseconds, and the pool's
``max_size`` stays the bound on the server's connections.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from django.db import connections

logger = logging.getLogger("django_blamequeue.worker")

#: Seconds a slot's connection may sit unused before it is pinged ahead of the next job.
IDLE_CHECK = 30.0

_last_used = threading.local()


def before_job() -> None:
    """Ping the connections of a slot that was idle for ``IDLE_CHECK`` s; close dead ones
    (Django reconnects on the next query)."""
    now = time.monotonic()
    last = getattr(_last_used, "at", None)
    _last_used.at = now
    if last is None or now - last < IDLE_CHECK:
        return
    for connection in connections.all(initialized_only=True):
        if connection.connection is not None and not _usable(connection):
            _close(connection, "an idle connection no longer answers")


def after_job(*, interrupted: bool) -> None:
    """Keep this thread's connections for the next job, or close those that cannot be trusted
    (see the module's docstring)."""
    _last_used.at = time.monotonic()
    for connection in connections.all(initialized_only=True):
        if connection.connection is None:
            continue
        if interrupted:
            _close(connection, "the job was interrupted")
        elif _pooled(connection):
            _close(connection, None)  # back to the pool
        elif connection.in_atomic_block or not connection.get_autocommit():
            _close(connection, "the handler left a transaction open")
        elif connection.errors_occurred:
            _close(connection, "a database error occurred in the job")


def drop_all() -> None:
    """Close every connection of this thread (an interrupted run; a slot thread that exits)."""
    for connection in connections.all(initialized_only=True):
        _close(connection, None)


def _pooled(connection: Any) -> bool:
    options = connection.settings_dict.get("OPTIONS") or {}
    return bool(options.get("pool"))


def _usable(connection: Any) -> bool:
    try:
        return bool(connection.is_usable())
    except Exception:
        return False


def _close(connection: Any, why: str | None) -> None:
    if why:
        logger.debug("closing the %s connection of a slot: %s", connection.alias, why)
    try:
        connection.close()
    except Exception:
        logger.debug("closing a slot's %s connection failed", connection.alias, exc_info=True)
    if connection.in_atomic_block:  # Django keeps a wrapper closed inside a block unusable
        del connections[connection.alias]  # the next query of this thread gets a new one
