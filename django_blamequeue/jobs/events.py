"""The lifecycle signals (``job_started`` … ``job_cancelled``) and the hooks they run.

One meaning each, wherever the transition happens: ``job_succeeded`` when a job reached
``done``, ``job_retrying`` when an attempt failed and the job is pending again with attempts
left, ``job_failed`` when it reached ``failed`` (the DLQ), ``job_cancelled`` when it reached
``cancelled`` — sent after the transition committed, in the process that made it, never for
a transition that did not happen. A job's hooks (``jobs/hooks.py``) run here first, then the
signal's receivers. ``job_started`` is sent in the worker just before a handler is called.

A worker's attempts are notified by the worker (``worker/notify.py``: off its main loop, after
the ack committed, with the exception object and the return value). Transitions made
elsewhere — the rescuer failing or re-pending a stalled job, ``queue.cancel`` and a flow's
cascade cancelling waiting jobs — reach here from their audit events (``from_audit``), with
what those carry: no exception object, no result.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.dispatch import Signal

from django_blamequeue import audit, signals
from django_blamequeue.backends import get_backend
from django_blamequeue.core.payload import Encoded
from django_blamequeue.core.records import JobInfo
from django_blamequeue.core.rules import STALLED_MESSAGE
from django_blamequeue.jobs import calls, registry
from django_blamequeue.jobs.registry import JobDefinition
from django_blamequeue.serializers import decode

logger = logging.getLogger("django_blamequeue.hooks")

STARTED, SUCCEEDED, RETRYING, FAILED, CANCELLED = (
    "started",
    "succeeded",
    "retrying",
    "failed",
    "cancelled",
)
SIGNALS: dict[str, Signal] = {
    STARTED: signals.job_started,
    SUCCEEDED: signals.job_succeeded,
    RETRYING: signals.job_retrying,
    FAILED: signals.job_failed,
    CANCELLED: signals.job_cancelled,
}
#: The hook each kind runs.
HOOK_OF = {SUCCEEDED: "on_success", RETRYING: "on_retry", FAILED: "on_failure"}


@dataclass(frozen=True, slots=True, kw_only=True)
class JobEvent:
    """What a lifecycle signal's receivers (``event=``) and a job's hooks receive.

    ``exc`` is the exception the handler raised, in the process that ran it; it is None for a
    failure that raised nothing here (a stalled job failed by the rescuer, a timeout). The
    payload, arguments and result are decoded when asked for: known where the worker ran the
    attempt, None for a transition made elsewhere (``info()`` reads the job).
    """

    job_id: str
    name: str | None
    queue: str | None
    backend: str | None
    #: Where the job went: ``done``, ``pending`` (a retry), ``failed``, ``cancelled``;
    #: ``inflight`` for ``job_started``.
    state: str
    attempt: int | None = None
    max_attempts: int | None = None
    reason: str | None = None
    error: str | None = None
    error_type: str | None = None
    traceback: str | None = None
    exc: BaseException | None = None
    #: ``job_retrying``: seconds until the job is due again.
    retry_in: float | None = None
    trace_id: str | None = None
    encoded_payload: Encoded | None = None
    encoded_result: Encoded | None = None

    @property
    def payload(self) -> Any:
        """The job's payload (the argument envelope of a ``.delay`` call), or None."""
        return _decoded(self.encoded_payload)

    @property
    def args(self) -> tuple[Any, ...]:
        """Celery's ``args``: a call's positional arguments, else ``(payload,)``."""
        payload = self.payload
        if calls.is_call(payload):
            return tuple(payload[calls.ARGS])
        return () if self.encoded_payload is None else (payload,)

    @property
    def kwargs(self) -> dict[str, Any]:
        """Celery's ``kwargs``: a call's keyword arguments, else ``{}``."""
        payload = self.payload
        return dict(payload[calls.KWARGS]) if calls.is_call(payload) else {}

    @property
    def result(self) -> Any:
        """``job_succeeded``: what the handler (a flow's ``collect``) returned."""
        return _decoded(self.encoded_result)

    def info(self) -> JobInfo | None:
        """The job as its backend has it now."""
        return get_backend(self.backend).get(self.job_id)


def _decoded(encoded: Encoded | None) -> Any:
    if encoded is None:
        return None
    return decode(encoded.content_type, encoded.content_encoding, encoded.body)


def wanted(kind: str, definition: JobDefinition | None) -> bool:
    """Does anybody listen: a receiver of the kind's signal, or a hook of the job's?"""
    if SIGNALS[kind].receivers:
        return True
    hook = HOOK_OF.get(kind)
    return hook is not None and definition is not None and bool(definition.hooks.of(hook))


def notify(kind: str, event: JobEvent, definition: JobDefinition | None) -> None:
    """Run the job's hooks of ``kind``, then send its signal (``sender``: the job's
    definition, None where this process has none). Neither may raise: a raising hook or
    receiver is logged, and the job is where it is — its transition committed already."""
    hook = HOOK_OF.get(kind)
    if hook is not None and definition is not None:
        for call in definition.hooks.of(hook):
            try:
                call(event)
            except Exception:
                logger.exception(
                    "the %s hook of job %s (%s) raised; the job stays %s",
                    *(hook, event.job_id, event.name, event.state),
                    extra=_extra(event),
                )
    signal = SIGNALS[kind]
    if not signal.receivers:
        return
    for receiver, response in signal.send_robust(sender=definition, event=event):
        if isinstance(response, Exception):  # django.dispatch logged its traceback
            logger.error(
                "a job_%s receiver (%r) raised for job %s; the job stays %s: %s",
                *(kind, receiver, event.job_id, event.state, response),
                extra=_extra(event),
            )


def _extra(event: JobEvent) -> dict[str, object]:
    return {"job_id": event.job_id, "queue": event.queue, "attempt": event.attempt}


# -- transitions made outside a worker, from their audit events ------------------------------
#: The audit actions of transitions no worker acked (``audit.watch``).
WATCHED = frozenset({audit.STALLED, audit.CANCEL})
_STALLED_TO = {"failed": FAILED, "pending": RETRYING, "cancelled": CANCELLED}


def from_audit(events: Sequence[audit.Event]) -> None:
    """The lifecycle signals of committed transitions no worker acked: stalled jobs the
    rescuer failed, re-pended or cancelled, and jobs cancelled while waiting. A worker's
    own ``cancelled`` ack is left to the worker (``while: running``)."""
    for e in events:
        kind = _kind(e)
        if kind is None or e.job_id is None:
            continue
        name = e.data.get("name")
        definition = registry.get(name) if isinstance(name, str) else None
        if not wanted(kind, definition):
            continue
        stalled = e.action == audit.STALLED
        notify(
            kind,
            JobEvent(
                job_id=e.job_id,
                name=name if isinstance(name, str) else None,
                queue=e.queue,
                backend=e.backend,
                state=_STATE[kind],
                attempt=e.attempt,
                reason="stalled" if stalled and kind != CANCELLED else "cancelled",
                error=STALLED_MESSAGE if stalled and kind != CANCELLED else None,
                retry_in=0.0 if kind == RETRYING else None,
            ),
            definition,
        )


_STATE = {SUCCEEDED: "done", RETRYING: "pending", FAILED: "failed", CANCELLED: "cancelled"}


def _kind(e: audit.Event) -> str | None:
    if e.action == audit.STALLED:
        return _STALLED_TO.get(str(e.data.get("to")))
    if e.action == audit.CANCEL and e.data.get("while") != "running":
        return CANCELLED
    return None


def install() -> None:
    """From ``AppConfig.ready``: transitions outside workers send their signals too."""
    audit.watch(WATCHED, from_audit)
