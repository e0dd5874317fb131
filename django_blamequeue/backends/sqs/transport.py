"""SQS through boto3: one client and one queue-URL cache per backend object, batched calls.

Queues are found (``GetQueueUrl``) or created on demand: first the dead-letter queue
``{name}-dlq``, then the queue with a ``RedrivePolicy`` pointing at it. Batched calls answer
per entry: the entries SQS refused are returned, never raised, because every caller treats a
refused entry like a crash at that point (the message reappears, or the send step re-sends).
Errors that mean "SQS is not there" propagate as botocore's connection errors or
``SqsUnavailable``; a deleted queue raises ``QueueGone``.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MAX_DELAY = 900  # DelaySeconds: SQS delays a message by at most 15 minutes
MAX_VISIBILITY = 43_200  # VisibilityTimeout: at most 12 hours
BATCH = 10  # entries per *Batch call
#: SendMessageBatch's cap on the sum of its bodies (1 MiB since 2025; 256 KiB before, when a
#: queue could not be larger either: a batch is also kept within its queue's own cap).
BATCH_BYTES = 1_048_576
DLQ_SUFFIX = "-dlq"
_NAME_MAX = 80 - len(DLQ_SUFFIX)  # the queue's name and its DLQ's both fit SQS's 80
_SAFE = re.compile(r"[A-Za-z0-9_-]+")
_GONE = frozenset({"AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"})
_BUSY = frozenset({"Throttling", "ThrottlingException", "RequestThrottled", "ServiceUnavailable"})


class SqsUnavailable(Exception):
    """SQS answered that it cannot serve now (a 5xx or throttling): retry later."""


class QueueGone(Exception):
    """The queue was deleted (or the emulator restarted): recreate it and re-send."""

    def __init__(self, queue: str) -> None:
        super().__init__(f"SQS queue for {queue!r} does not exist")
        self.queue = queue


def sqs_name(prefix: str, queue: str) -> str:
    """The SQS queue name for ``queue``: ``{prefix}{queue}`` when that is a valid name.

    SQS allows A-Z a-z 0-9 - _ and 80 characters. Any other queue name (a dot, a colon, too
    long, or ending in ``-dlq``, which would collide with a dead-letter queue) maps to its
    characters with the others replaced by ``_``, cut to fit, plus ``-`` and 10 hex
    characters of its SHA-256: deterministic, so every process finds the same queue.
    """
    name = prefix + queue
    if _SAFE.fullmatch(queue) and len(name) <= _NAME_MAX and not queue.endswith(DLQ_SUFFIX):
        return name
    digest = hashlib.sha256(queue.encode()).hexdigest()[:10]
    room = _NAME_MAX - len(prefix) - len(digest) - 1
    return f"{prefix}{re.sub(r'[^A-Za-z0-9_-]', '_', queue)[: max(room, 0)]}-{digest}"


@dataclass(frozen=True, slots=True)
class QueueInfo:
    name: str
    url: str
    max_message_size: int  # MaximumMessageSize: the cap of one message (body + attributes)
    dlq_url: str | None
    dlq_max_message_size: int
    retention: int = 345_600  # MessageRetentionPeriod: SQS drops a message this much older


@dataclass(frozen=True, slots=True)
class Received:
    """One received message: the job it names (None: not one of ours) and its handle."""

    queue: str
    job_id: str | None
    receipt: str
    message_id: str
    receive_count: int


@dataclass(frozen=True, slots=True)
class Outgoing:
    job_id: str
    body: str
    size: int  # bytes SQS counts: the UTF-8 body plus the message attribute
    delay: int = 0


JOB_ATTRIBUTE = "bq_job"


def attribute_size(job_id: str) -> int:
    """What the ``bq_job`` message attribute adds to a message's size (name, type, value)."""
    return len(JOB_ATTRIBUTE) + len("String") + len(job_id.encode())


class Transport:
    """One boto3 SQS client (thread-safe) and the queues this backend object has seen."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.options = options
        self.prefix = str(options.get("QUEUE_PREFIX") or "")
        self.max_receive_count = int(options.get("MAX_RECEIVE_COUNT") or 10)
        self.wait_time = int(options.get("WAIT_TIME_SECONDS") or 0)
        self._client: Any = None
        self._queues: dict[str, QueueInfo] = {}
        self.lock = threading.Lock()

    @property
    def client(self) -> Any:
        if self._client is None:
            with self.lock:
                if self._client is None:
                    self._client = self._make_client()
        return self._client

    def _make_client(self) -> Any:
        import boto3
        from botocore.config import Config

        o = self.options
        session = boto3.session.Session(
            aws_access_key_id=o.get("ACCESS_KEY_ID") or None,
            aws_secret_access_key=o.get("SECRET_ACCESS_KEY") or None,
            region_name=o.get("REGION") or None,
        )
        config = Config(
            # Fail fast: the breaker, not botocore's back-off, decides when to try again.
            retries={"total_max_attempts": 2, "mode": "standard"},
            connect_timeout=3,
            read_timeout=self.wait_time + 10,
            max_pool_connections=25,
        )
        return session.client("sqs", endpoint_url=o.get("ENDPOINT_URL") or None, config=config)

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.close()

    # -- queues ----------------------------------------------------------------------------
    def queue(self, queue: str) -> QueueInfo:
        """The SQS queue of ``queue``, found or created (with its DLQ) on first use."""
        info = self._queues.get(queue)
        if info is None:
            info = self._queues[queue] = self._resolve(queue, create=True)
        return info

    def existing(self, queue: str) -> QueueInfo | None:
        """The SQS queue of ``queue`` if it exists, without creating it (deploy checks)."""
        try:
            return self._queues.get(queue) or self._resolve(queue, create=False)
        except QueueGone:
            return None

    def shortest_retention(self) -> int:
        """The shortest ``MessageRetentionPeriod`` of the queues seen (SQS's default 4 days
        before any)."""
        return min((i.retention for i in self._queues.values()), default=345_600)

    def forget(self, queue: str) -> None:
        self._queues.pop(queue, None)

    def _resolve(self, queue: str, *, create: bool) -> QueueInfo:
        name = sqs_name(self.prefix, queue)
        with self._errors(queue):
            try:
                url = self.client.get_queue_url(QueueName=name)["QueueUrl"]
            except self.client.exceptions.QueueDoesNotExist:
                if not create:
                    raise QueueGone(queue) from None
                url = self._create(name)
            attrs = self._attributes(
                url, "MaximumMessageSize", "RedrivePolicy", "MessageRetentionPeriod"
            )
            dlq_url, dlq_size = None, 262_144
            target = json.loads(attrs.get("RedrivePolicy") or "{}").get("deadLetterTargetArn")
            if target:
                dlq_url = self.client.get_queue_url(QueueName=str(target).rsplit(":", 1)[-1])[
                    "QueueUrl"
                ]
                dlq_size = int(
                    self._attributes(dlq_url, "MaximumMessageSize")["MaximumMessageSize"]
                )
        size, retention = int(attrs["MaximumMessageSize"]), int(attrs["MessageRetentionPeriod"])
        return QueueInfo(name, url, size, dlq_url, dlq_size, retention)

    def _create(self, name: str) -> str:
        """The DLQ, then the queue redriving to it after ``MAX_RECEIVE_COUNT`` receives.
        Both calls are idempotent: workers racing to create the same queue all succeed."""
        dlq_url = self.client.create_queue(QueueName=name + DLQ_SUFFIX)["QueueUrl"]
        arn = self._attributes(dlq_url, "QueueArn")["QueueArn"]
        policy = {"deadLetterTargetArn": arn, "maxReceiveCount": str(self.max_receive_count)}
        created = self.client.create_queue(
            QueueName=name, Attributes={"RedrivePolicy": json.dumps(policy)}
        )
        return str(created["QueueUrl"])

    def _attributes(self, url: str, *names: str) -> dict[str, str]:
        answer = self.client.get_queue_attributes(QueueUrl=url, AttributeNames=list(names))
        return dict(answer.get("Attributes", {}))

    # -- messages --------------------------------------------------------------------------
    def receive(self, queue: str, limit: int, visibility: int) -> list[Received]:
        info = self.queue(queue)
        with self._errors(queue):
            answer = self.client.receive_message(
                QueueUrl=info.url,
                MaxNumberOfMessages=max(1, min(BATCH, limit)),
                VisibilityTimeout=max(0, min(visibility, MAX_VISIBILITY)),
                WaitTimeSeconds=self.wait_time,
                MessageAttributeNames=[JOB_ATTRIBUTE],
                MessageSystemAttributeNames=["ApproximateReceiveCount"],
            )
        found = []
        for m in answer.get("Messages", []):
            value = (m.get("MessageAttributes") or {}).get(JOB_ATTRIBUTE, {}).get("StringValue")
            count = int((m.get("Attributes") or {}).get("ApproximateReceiveCount") or 1)
            found.append(Received(queue, value, m["ReceiptHandle"], m["MessageId"], count))
        return found

    def send(self, queue: str, messages: Sequence[Outgoing], *, dlq: bool = False) -> set[str]:
        """Send ``messages`` in batches of 10 within the byte caps; answer the job ids sent."""
        info = self.queue(queue)
        url = info.dlq_url if dlq else info.url
        if url is None:
            return set()
        cap = min(BATCH_BYTES, info.dlq_max_message_size if dlq else info.max_message_size)
        sent: set[str] = set()
        for batch in _batches(messages, cap):
            entries = [
                {
                    "Id": str(i),
                    "MessageBody": m.body,
                    "DelaySeconds": max(0, min(m.delay, MAX_DELAY)),
                    "MessageAttributes": {
                        JOB_ATTRIBUTE: {"DataType": "String", "StringValue": m.job_id}
                    },
                }
                for i, m in enumerate(batch)
            ]
            with self._errors(queue):
                answer = self.client.send_message_batch(QueueUrl=url, Entries=entries)
            sent.update(batch[int(ok["Id"])].job_id for ok in answer.get("Successful", []))
        return sent

    def delete(self, queue: str, receipts: Sequence[str]) -> list[str]:
        """Delete messages by receipt handle; answer the receipts SQS refused."""
        return self._batched(
            queue, "delete_message_batch", [{"ReceiptHandle": r} for r in receipts]
        )

    def change_visibility(self, queue: str, changes: Sequence[tuple[str, int]]) -> list[str]:
        """Set each message's visibility timeout (seconds from now); answer the receipts SQS
        refused (most often: a message that no longer exists)."""
        entries = [
            {"ReceiptHandle": r, "VisibilityTimeout": max(0, min(s, MAX_VISIBILITY))}
            for r, s in changes
        ]
        return self._batched(queue, "change_message_visibility_batch", entries)

    def _batched(self, queue: str, call: str, entries: Sequence[dict[str, Any]]) -> list[str]:
        info = self.queue(queue)
        refused: list[str] = []
        for start in range(0, len(entries), BATCH):
            chunk = entries[start : start + BATCH]
            with self._errors(queue):
                answer = getattr(self.client, call)(
                    QueueUrl=info.url, Entries=[{"Id": str(i), **e} for i, e in enumerate(chunk)]
                )
            refused += [chunk[int(f["Id"])]["ReceiptHandle"] for f in answer.get("Failed", [])]
        return refused

    def _errors(self, queue: str) -> _ErrorMap:
        return _ErrorMap(self, queue)


class _ErrorMap:
    """Translate SQS's answers at the boundary: a missing queue → ``QueueGone`` (and the
    cached URL is dropped), throttling or a server error → ``SqsUnavailable``."""

    def __init__(self, transport: Transport, queue: str) -> None:
        self.transport, self.queue = transport, queue

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        from botocore.exceptions import ClientError

        if not isinstance(exc, ClientError):
            return
        error = exc.response.get("Error", {})
        codes = {str(error.get("Code", "")), str(error.get("QueryErrorCode", ""))}
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        if codes & _GONE:
            self.transport.forget(self.queue)
            raise QueueGone(self.queue) from exc
        if codes & _BUSY or status >= 500:
            raise SqsUnavailable(f"SQS: {error.get('Code')}: {error.get('Message')}") from exc


def _batches(messages: Sequence[Outgoing], cap: int) -> Iterator[list[Outgoing]]:
    """Runs of at most 10 messages whose sizes add up to at most ``cap`` bytes."""
    batch: list[Outgoing] = []
    size = 0
    for m in messages:
        if batch and (len(batch) == BATCH or size + m.size > cap):
            yield batch
            batch, size = [], 0
        batch.append(m)
        size += m.size
    if batch:
        yield batch
