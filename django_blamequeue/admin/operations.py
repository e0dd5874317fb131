"""Operators' actions: retry, retry all, purge, cancel — each audited with the acting user.

On a local backend the audit row is written in the same database transaction as the state
change (the backend's own transaction nests inside ours as a savepoint), so either both are
committed or neither is. A remote engine has no such transaction: its row is written right
after the engine answered.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

from django.db import transaction
from django.http import HttpRequest

from django_blamequeue import audit
from django_blamequeue.api import queue
from django_blamequeue.backends.base import Backend
from django_blamequeue.sweeper.scheduler import FIRE

ADMIN_RETRY = audit.ADMIN_PREFIX + "retry"
ADMIN_RETRY_ALL = audit.ADMIN_PREFIX + "retry_all"
ADMIN_PURGE = audit.ADMIN_PREFIX + "purge"
ADMIN_CANCEL = audit.ADMIN_PREFIX + "cancel"
#: A user with ``view_encrypted_job`` opened an encrypted job's page (docs/encryption.md).
ADMIN_DECRYPT = audit.ADMIN_PREFIX + "decrypt"
ADMIN_ACTIONS = (
    ADMIN_RETRY,
    ADMIN_DECRYPT,
    ADMIN_RETRY_ALL,
    ADMIN_PURGE,
    ADMIN_CANCEL,
    audit.ADMIN_PREFIX + "bulk",
    *(audit.ADMIN_PREFIX + f"schedule.{verb}" for verb in ("add", "change", "delete")),
)

#: The most jobs one "selected" action touches; larger sets use "retry all" or purge.
MAX_SELECTED = 1000


def known_actions() -> list[str]:
    """Every audit action name the package writes (for the audit log's filter)."""
    names = {v for k, v in vars(audit).items() if k.isupper() and isinstance(v, str)}
    names = {n for n in names if n.startswith("system.") and n != audit.ADMIN_PREFIX}

    return sorted(names | set(ADMIN_ACTIONS) | {FIRE})


@contextlib.contextmanager
def _atomic(backend: Backend) -> Iterator[None]:
    if backend.database is None:
        yield
        return
    with transaction.atomic(using=backend.database):
        yield


def _record(
    request: HttpRequest,
    backend: Backend,
    action: str,
    *,
    job_id: str | None = None,
    queue_name: str | None = None,
    **data: Any,
) -> audit.Event:
    return audit.Event(
        action=action,
        job_id=job_id,
        queue=queue_name,
        backend=backend.alias,
        user=request.user.get_username(),
        data=data,
    )


def _write(backend: Backend, events: Sequence[audit.Event]) -> None:
    audit.record(events, using=backend.database)


def decrypted(request: HttpRequest, backend: Backend, job_id: str, queue_name: str) -> None:
    """Audit one view of an encrypted job's opened values (who, which job, when)."""
    _write(
        backend, [_record(request, backend, ADMIN_DECRYPT, job_id=job_id, queue_name=queue_name)]
    )


def retry(request: HttpRequest, backend: Backend, jobs: Sequence[tuple[str, str]]) -> int:
    """Retry DLQ jobs given as (job id, queue); answer how many went back to pending."""
    with _atomic(backend):
        events = []
        for job_id, queue_name in jobs[:MAX_SELECTED]:
            ok = queue.dlq_retry(job_id, backend=backend.alias)
            events.append(
                _record(request, backend, ADMIN_RETRY, job_id=job_id, queue_name=queue_name, ok=ok)
            )
        _write(backend, events)
    return sum(1 for e in events if e.data["ok"])


def retry_all(request: HttpRequest, backend: Backend, queue_name: str, confirmed: int) -> int:
    """Retry every DLQ job of a queue; ``confirmed`` is the count the operator was shown."""
    with _atomic(backend):
        n = queue.dlq_retry_all(queue_name, backend=backend.alias)
        _write(
            backend,
            [
                _record(
                    request,
                    backend,
                    ADMIN_RETRY_ALL,
                    queue_name=queue_name,
                    count=n,
                    confirmed_count=confirmed,
                )
            ],
        )
    return n


def purge(
    request: HttpRequest, backend: Backend, queue_name: str, confirmed: int, before: datetime
) -> int:
    """Delete the queue's waiting jobs created by ``before`` (when the operator was shown
    ``confirmed`` of them): a job enqueued since is kept."""
    with _atomic(backend):
        n = queue.purge(queue_name, backend=backend.alias, created_before=before)
        _write(
            backend,
            [
                _record(
                    request,
                    backend,
                    ADMIN_PURGE,
                    queue_name=queue_name,
                    count=n,
                    confirmed_count=confirmed,
                )
            ],
        )
    return n


def cancel(request: HttpRequest, backend: Backend, jobs: Sequence[tuple[str, str]]) -> int:
    """Cancel jobs given as (job id, queue); answer how many were cancelled or told to stop."""
    with _atomic(backend):
        events = []
        for job_id, queue_name in jobs[:MAX_SELECTED]:
            ok = queue.cancel(job_id, backend=backend.alias)
            events.append(
                _record(request, backend, ADMIN_CANCEL, job_id=job_id, queue_name=queue_name, ok=ok)
            )
        _write(backend, events)
    return sum(1 for e in events if e.data["ok"])
