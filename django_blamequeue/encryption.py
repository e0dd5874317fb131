"""Payloads, results and error text encrypted at rest with Fernet (AES-128-CBC + HMAC-SHA256).

One seam: an encrypted payload is an ``Encoded`` whose ``content_encoding`` carries the
``fernet+`` prefix and whose body is a Fernet token of the serialized bytes. Every engine
stores and sends that triple as it would any other payload (the job table, the Redis hash,
the SQS message body and ledger), and ``serializers.decode`` opens it wherever a payload is
read. Keys come from ``ENCRYPTION_KEYS``: the first encrypts, every one decrypts, so a new
key goes first and an old one leaves after ``blamequeue rotate-keys`` (docs/encryption.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django_blamequeue.conf import get_settings
from django_blamequeue.core import checkpoints
from django_blamequeue.core.payload import Encoded
from django_blamequeue.core.texts import storable
from django_blamequeue.exceptions import ErrorCode, QueueError

if TYPE_CHECKING:
    from cryptography.fernet import MultiFernet

__all__ = [
    "PREFIX",
    "TEXT_PREFIX",
    "is_encrypted",
    "is_sealed_text",
    "open_checkpoint",
    "open_payload",
    "open_text",
    "readable",
    "rotate",
    "seal",
    "seal_checkpoint",
    "seal_text",
    "wants_encryption",
]

#: The ``content_encoding`` prefix of an encrypted payload (``fernet+utf-8``).
PREFIX = "fernet+"
#: The prefix of encrypted error text (a job's last error, an attempt's traceback).
TEXT_PREFIX = "fernet:"
_INSTALL = "encryption needs cryptography: pip install 'django-blamequeue[crypto]'"

_cipher: tuple[object, MultiFernet] | None = None


def _fernet() -> MultiFernet:
    """The ``MultiFernet`` of ``ENCRYPTION_KEYS``, cached per settings object."""
    global _cipher
    current = get_settings()
    cached = _cipher
    if cached is not None and cached[0] is current:
        return cached[1]
    try:
        from cryptography.fernet import Fernet, MultiFernet
    except ImportError:  # the crypto extra is not installed
        raise QueueError(ErrorCode.DECRYPT_FAILED, _INSTALL) from None
    if not current.encryption_keys:
        message = "no ENCRYPTION_KEYS are configured (docs/encryption.md)"
        raise QueueError(ErrorCode.DECRYPT_FAILED, message)
    cipher = MultiFernet([Fernet(key) for key in current.encryption_keys])
    _cipher = (current, cipher)
    return cipher


def wants_encryption(queue: str, flag: bool | None) -> bool:
    """Whether a job of ``queue`` is encrypted: its own ``encrypted=`` when given, else
    ``ENCRYPT`` (True for every queue, or the queues it names)."""
    if flag is not None:
        return flag
    setting = get_settings().encrypt
    return setting if isinstance(setting, bool) else queue in setting


def is_encrypted(encoded: Encoded) -> bool:
    return encoded.content_encoding.startswith(PREFIX)


def seal(encoded: Encoded) -> Encoded:
    """``encoded`` encrypted with the first key (already encrypted: unchanged)."""
    if is_encrypted(encoded):
        return encoded
    token = _fernet().encrypt(encoded.body)
    return Encoded(encoded.content_type, PREFIX + encoded.content_encoding, token)


def open_payload(encoded: Encoded) -> Encoded:
    """The plain ``Encoded`` inside an encrypted one (a plain one: unchanged).

    Raises ``QueueError`` ``DECRYPT_FAILED`` when no configured key opens it (a wrong or
    retired key, a missing ``ENCRYPTION_KEYS``, a body altered at rest)."""
    if not is_encrypted(encoded):
        return encoded
    return Encoded(
        encoded.content_type,
        encoded.content_encoding[len(PREFIX) :],
        _decrypt(encoded.body, "payload"),
    )


def rotate(encoded: Encoded) -> Encoded | None:
    """``encoded`` re-encrypted with the first key, or None when it is not encrypted.

    Raises ``DECRYPT_FAILED`` when no configured key opens it."""
    if not is_encrypted(encoded):
        return None
    try:
        from cryptography.fernet import InvalidToken
    except ImportError:  # pragma: no cover - the dev extra installs it
        raise QueueError(ErrorCode.DECRYPT_FAILED, _INSTALL) from None
    try:
        token = _fernet().rotate(encoded.body)
    except InvalidToken:
        raise QueueError(ErrorCode.DECRYPT_FAILED, _no_key("payload")) from None
    return Encoded(encoded.content_type, encoded.content_encoding, token)


def seal_text(text: str | None, limit: int | None = None, *, keep_tail: bool = False) -> str | None:
    """Error text as stored for an encrypted job: ``fernet:<token>``. ``limit``: the most
    characters the column keeps; the plain text is cut first (at its end, or in the middle
    with ``keep_tail``) so the token fits whole — a cut token would open nothing."""
    if text is None or text.startswith(TEXT_PREFIX):
        return text
    if limit is not None:
        text = _fitted(text, plain_bytes(limit), keep_tail)
    return TEXT_PREFIX + _fernet().encrypt(text.encode("utf-8")).decode("ascii")


def seal_checkpoint(value: Any, sealed: bool) -> str:
    """``value`` as stored checkpoint text (``checkpoints.encode``: refused before anything
    is written), sealed for an encrypted job; the cap applies to the plain text."""
    text = checkpoints.encode(value)
    return (seal_text(text) or text) if sealed else text


def open_checkpoint(text: str | None) -> Any:
    """A stored checkpoint's value (None: none), sealed text opened first
    (``DECRYPT_FAILED`` when no configured key opens it)."""
    return checkpoints.decode(open_text(text))


def plain_bytes(limit: int) -> int:
    """The most UTF-8 bytes of plain text whose token fits in ``limit`` characters (a Fernet
    token: 73 bytes around the text padded to 16, all in url-safe base64)."""
    return max(0, (limit - len(TEXT_PREFIX)) * 3 // 4 - 73 - 16)


def _fitted(text: str, most: int, keep_tail: bool) -> str:
    """``text`` cut (``texts.storable``, with its note) to at most ``most`` UTF-8 bytes."""
    chars = most
    fitted = storable(text, chars, keep_tail=keep_tail)
    while len(fitted.encode("utf-8")) > most and chars > 0:
        chars = max(0, chars * most // len(fitted.encode("utf-8")) - 1)
        fitted = storable(text, chars, keep_tail=keep_tail)
    return fitted


def is_sealed_text(text: Any) -> bool:
    return isinstance(text, str) and text.startswith(TEXT_PREFIX)


def open_text(text: str | None) -> str | None:
    """Plain error text from stored text (plain text: unchanged); ``DECRYPT_FAILED`` when no
    configured key opens it."""
    if text is None or not text.startswith(TEXT_PREFIX):
        return text
    return _decrypt(text[len(TEXT_PREFIX) :].encode("ascii"), "error text").decode("utf-8")


def readable(text: str | None) -> str | None:
    """Error text as a log line or a hook shows it: opened where a key does (the worker's
    log and hooks are the operator's, not storage at rest), else a placeholder."""
    try:
        return open_text(text)
    except QueueError:
        return "(encrypted error text: no configured key opens it)"


def _decrypt(token: bytes, what: str) -> bytes:
    try:
        from cryptography.fernet import InvalidToken
    except ImportError:  # pragma: no cover - the dev extra installs it
        raise QueueError(ErrorCode.DECRYPT_FAILED, _INSTALL) from None
    try:
        return _fernet().decrypt(token)
    except InvalidToken:
        raise QueueError(ErrorCode.DECRYPT_FAILED, _no_key(what)) from None


def _no_key(what: str) -> str:
    count = len(get_settings().encryption_keys)
    return (
        f"the {what} is encrypted and none of the {count} ENCRYPTION_KEYS opens it (a retired "
        "or wrong key, or the body was altered)"
    )
