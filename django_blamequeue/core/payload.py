"""A payload as it is stored: its content type, encoding and bytes, not yet decoded.

The value object that crosses every boundary (records, acks, outbox rows). Encoding and
decoding need settings (``ACCEPT_CONTENT``) and kombu: they live in ``serializers``, above
``core``, and run where a payload is made or used.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Encoded:
    """An encoded payload as it is stored or sent: kombu's triple, the body always bytes."""

    content_type: str
    content_encoding: str
    body: bytes
