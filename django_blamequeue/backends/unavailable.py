"""Protocols we know of but do not ship: choosing one fails with a message that names it."""

from __future__ import annotations

from django_blamequeue.exceptions import ErrorCode, QueueError

KNOWN = {"amqp": "AMQP 0-9-1 (RabbitMQ etc.)", "nats": "NATS JetStream"}


def refuse(protocol: str, alias: str) -> QueueError:
    return QueueError(
        ErrorCode.PROTOCOL_UNAVAILABLE,
        f"backend {alias!r}: protocol {protocol!r} ({KNOWN[protocol]}) is known but not "
        "available in django-blamequeue; use local, redis or sqs",
    )
