"""The SQS message of a job: the job itself, self-describing, so an operator reading the queue
(or its DLQ) in the AWS console sees what it is, and so the queue's ``MaximumMessageSize`` is
the cap of the payload.

The job id also travels as the message attribute ``bq_job``: a receiver reads only that, and
the ledger row is the truth for everything else. A JSON payload is embedded as it is (no
base64: a 1 MiB queue carries a payload of nearly 1 MiB); any other content is base64.
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django_blamequeue.backends.sqs.transport import MAX_DELAY, Outgoing, QueueInfo, attribute_size
from django_blamequeue.core.payload import Encoded
from django_blamequeue.core.records import NewJob
from django_blamequeue.exceptions import ErrorCode, QueueError

VERSION = 1
# Characters SQS refuses in a body (it allows #x9, #xA, #xD, #x20-#xD7FF, #xE000-#xFFFD and
# beyond), that a non-JSON text payload could hold: those go base64.
_REFUSED = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
_JSON_TYPES = frozenset({"application/json"})
_UTF8 = frozenset({"utf-8", "utf8"})

#: Columns of a ledger row that make its message (``body_of_row``), in this order.
SEND_COLUMNS = (
    "id",
    "queue",
    "name",
    "payload",
    "content_type",
    "content_encoding",
    "trace_id",
    "priority",
    "available_at",
)


def body(
    job_id: str,
    queue: str,
    name: str,
    payload: Encoded,
    trace_id: str | None,
    priority: int,
    extra: dict[str, Any] | None = None,
) -> str:
    head: dict[str, Any] = {
        "v": VERSION,
        "job_id": job_id,
        "queue": queue,
        "name": name,
        "priority": priority,
        "trace_id": trace_id,
        "content_type": payload.content_type,
        "content_encoding": payload.content_encoding,
        **(extra or {}),
    }
    text = _json_text(payload)
    if text is None:
        head["payload_base64"] = base64.b64encode(payload.body).decode()
        return json.dumps(head, separators=(",", ":"))
    return json.dumps(head, separators=(",", ":"))[:-1] + ',"payload":' + text + "}"


def _json_text(payload: Encoded) -> str | None:
    """The payload as JSON text to embed, or None when it must go base64."""
    if payload.content_type not in _JSON_TYPES or payload.content_encoding.lower() not in _UTF8:
        return None
    try:
        text = payload.body.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if not text.strip() or _REFUSED.search(text):
        return None
    return text


def outgoing(text: str, job_id: str, delay: float = 0.0) -> Outgoing:
    seconds = max(0, min(math.ceil(delay), MAX_DELAY))
    return Outgoing(job_id, text, len(text.encode()) + attribute_size(job_id), seconds)


def of_job(job: NewJob) -> str:
    return body(job.job_id, job.queue, job.name, job.payload, job.trace_id, job.priority)


def of_row(row: Sequence[Any], extra: dict[str, Any] | None = None) -> str:
    """The message of a ledger row read as ``SEND_COLUMNS``."""
    job_id, queue, name, payload, ctype, cenc, trace_id, priority, _available = row
    encoded = Encoded(ctype, cenc, bytes(payload) if payload is not None else b"")
    return body(job_id, queue, name, encoded, trace_id, priority, extra)


def delay_of(available_at: datetime, now: datetime) -> float:
    return max(0.0, (available_at - now).total_seconds())


def check_size(job: NewJob, info: QueueInfo) -> None:
    """``PAYLOAD_TOO_LARGE`` when the job's message cannot fit its queue (before any write).

    The size SQS counts is the UTF-8 body plus the message attribute, measured against the
    queue's ``MaximumMessageSize`` (256 KiB unless the queue was created larger, up to 1 MiB).
    """
    size = len(of_job(job).encode()) + attribute_size(job.job_id)
    if size > info.max_message_size:
        raise QueueError(
            ErrorCode.PAYLOAD_TOO_LARGE,
            f"the job's SQS message is {size} bytes (payload {len(job.payload.body)}); "
            f"queue {info.name!r} takes at most {info.max_message_size} "
            "(its MaximumMessageSize)",
        )
