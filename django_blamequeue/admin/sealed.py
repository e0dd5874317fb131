"""What the console shows of an encrypted job (docs/encryption.md#the-admin): to a user
without the ``view_encrypted_job`` permission, "encrypted" in place of its payload, result,
error text and checkpoint; to one with it, the opened values, each such view written to the
audit log."""

from __future__ import annotations

from dataclasses import replace

from django.http import HttpRequest

from django_blamequeue import encryption
from django_blamequeue.admin.base import APP, allowed
from django_blamequeue.core.records import AttemptInfo, JobInfo

#: The permission that opens encrypted jobs in the console (superusers hold it).
VIEW_ENCRYPTED = f"{APP}.view_encrypted_job"
#: What stands in for a value the user may not see.
SEALED = "encrypted"


def may_open(request: HttpRequest, info: JobInfo) -> bool:
    """Whether the console shows this job's values: a plain job, or a permitted user."""
    return not info.encrypted or allowed(request, VIEW_ENCRYPTED)


def shown(request: HttpRequest, info: JobInfo) -> JobInfo:
    """``info`` as this user may see it."""
    return info if may_open(request, info) else listed(info)


def listed(info: JobInfo) -> JobInfo:
    """A job as a list of many shows it (the DLQ page): an encrypted one always sealed, to
    every user — its values open on its own page, where the view is audited."""
    if not info.encrypted:
        return info
    return replace(
        info,
        payload=SEALED,
        result=None if info.result is None else SEALED,
        error=None if info.error is None else SEALED,
        traceback=None,
        checkpoint=None if info.checkpoint is None else SEALED,
    )


def shown_attempts(
    request: HttpRequest, info: JobInfo, attempts: list[AttemptInfo]
) -> list[AttemptInfo]:
    """An encrypted job's attempt history: its error texts opened, or "encrypted"."""
    if not info.encrypted:
        return attempts
    if allowed(request, VIEW_ENCRYPTED):
        return [
            replace(
                a,
                error=encryption.readable(a.error),
                traceback=encryption.readable(a.traceback),
            )
            for a in attempts
        ]
    return [replace(a, error=None if a.error is None else SEALED, traceback=None) for a in attempts]
