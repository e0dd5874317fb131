"""Payload encoding through kombu's serializer registry, behind ``ACCEPT_CONTENT`` and a size cap.

Both directions refuse what ``ACCEPT_CONTENT`` does not list, so pickle (which runs code on
load) is only ever used when a project opts in. The checks happen before anything is written:
a refused payload leaves no trace in any backend.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from kombu.exceptions import ContentDisallowed, DecodeError, EncodeError, SerializerNotInstalled
from kombu.serialization import dumps as _kombu_dumps
from kombu.serialization import loads as _kombu_loads
from kombu.serialization import registry
from kombu.utils import json as _kombu_json

from django_blamequeue import encryption
from django_blamequeue.conf import content_type_of, get_settings
from django_blamequeue.core.payload import Encoded
from django_blamequeue.core.validation import MAX_JSON_DEPTH, deeper_than
from django_blamequeue.exceptions import ErrorCode, QueueError

__all__ = ["accepted_content_types", "decode", "encode", "encode_many", "size_of"]

# kombu's functions are untyped; these names give them the signatures used here.
_dumps: Callable[..., tuple[str, str, str | bytes]] = _kombu_dumps
_loads: Callable[..., Any] = _kombu_loads
_BINARY = frozenset({"binary", "ascii-8bit"})
_JSON = "application/json"
_UTF8 = frozenset({"utf-8", "utf8", ""})
#: The function kombu's registry decodes JSON with (``kombu.utils.json.loads``: UTF-8, then
#: ``json.loads`` with kombu's hook for its tagged types, datetimes, decimals, UUIDs...).
_kombu_json_loads: Callable[[bytes], Any] = _kombu_json.loads
#: What ``_kombu_json_loads`` builds on every call (``json.loads`` with an ``object_hook``
#: makes a new decoder each time), made once.
_json_decode = json.JSONDecoder(object_hook=_kombu_json.object_hook).decode


_accepted: tuple[object, int, frozenset[str]] | None = None


def accepted_content_types() -> frozenset[str]:
    """The content types ``ACCEPT_CONTENT`` allows (names mapped through kombu's registry).

    Cached per settings object and size of kombu's registry: every encode and decode asks."""
    global _accepted
    current = get_settings()
    cached = _accepted
    if cached is not None and cached[0] is current and cached[1] == len(registry.name_to_type):
        return cached[2]
    found = (content_type_of(item) for item in current.accept_content)
    types = frozenset(t for t in found if t is not None)
    _accepted = (current, len(registry.name_to_type), types)
    return types


def encode(obj: Any, *, serializer: str | None = None, max_bytes: int | None = None) -> Encoded:
    """Encode ``obj`` with ``serializer`` (default ``SERIALIZER``), refusing before any write.

    ``max_bytes`` is a backend's own limit (an SQS queue's ``MaximumMessageSize``); the smaller
    of it and ``MAX_PAYLOAD_BYTES`` applies.

    Raises ``QueueError``: ``CONTENT_DISALLOWED`` if the serializer's content type is not
    accepted, ``BAD_PAYLOAD`` if it cannot encode ``obj``, ``PAYLOAD_TOO_LARGE`` over the cap,
    ``BAD_ARGUMENT`` for a serializer kombu does not have.
    """
    return encode_many([obj], serializer=serializer, max_bytes=max_bytes)[0]


def encode_many(
    objs: Sequence[Any], *, serializer: str | None = None, max_bytes: int | None = None
) -> list[Encoded]:
    """``encode`` for a batch: the serializer and ``ACCEPT_CONTENT`` are checked once."""
    current = get_settings()
    name = _serializer_name(serializer or current.serializer)
    content_type = registry.name_to_type[name]
    if content_type not in accepted_content_types():
        message = (
            f"serializer {name!r} ({content_type}) is not in ACCEPT_CONTENT "
            f"({', '.join(current.accept_content)})"
        )
        raise QueueError(ErrorCode.CONTENT_DISALLOWED, message)
    return [_encode(obj, name, current.max_payload_bytes, max_bytes) for obj in objs]


def _encode(obj: Any, name: str, configured: int, max_bytes: int | None) -> Encoded:
    try:
        content_type, content_encoding, body = _dumps(obj, serializer=name)
    except SerializerNotInstalled as exc:
        raise QueueError(ErrorCode.BAD_ARGUMENT, f"serializer {name!r}: {exc}") from exc
    except EncodeError as exc:
        cause = exc.__cause__ or exc
        message = f"cannot encode a {type(obj).__name__} payload with {name!r}: {cause}"
        raise QueueError(ErrorCode.BAD_PAYLOAD, message) from exc
    if isinstance(body, str):
        body = body.encode("utf-8" if content_encoding in _BINARY else content_encoding)
    encoded = Encoded(content_type, content_encoding, bytes(body))
    if content_type == _JSON:
        _refuse_non_json_numbers(encoded.body, type(obj).__name__)
        _refuse_deep_nesting(encoded.body, obj)
        _refuse_codec_markers(encoded.body, obj)
    _check_size(encoded, configured, max_bytes)
    return encoded


def _refuse_non_json_numbers(body: bytes, kind: str) -> None:
    """NaN and ±Infinity are not JSON (RFC 8259): Python's encoder writes them anyway, and
    strict readers — PostgreSQL's ``jsonb``, most other languages — refuse what it wrote.

    Only a body that contains the words is parsed again, so an ordinary payload costs two
    substring searches.
    """
    if b"NaN" not in body and b"Infinity" not in body:
        return

    def refuse(constant: str) -> Any:
        raise QueueError(
            ErrorCode.BAD_PAYLOAD,
            f"cannot encode a {kind} payload as JSON: it holds {constant}, which JSON has no "
            "number for (send None or a string instead)",
        )

    try:
        json.loads(body, parse_constant=refuse)
    except (ValueError, RecursionError) as exc:  # pragma: no cover - the encoder wrote it
        raise QueueError(ErrorCode.BAD_PAYLOAD, f"payload is not JSON: {exc}") from exc


#: The keys of kombu's JSON marker for a tagged value (``{"__type__": "bytes", "__value__":
#: ...}``: bytes, datetimes, decimals, UUIDs): its decoder turns any dict with exactly these keys
#: into the tagged type, or fails on a type it does not know.
_MARKER_KEYS = frozenset({"__type__", "__value__"})


def _refuse_codec_markers(body: bytes, obj: Any) -> None:
    """A plain dict of the payload with exactly the marker's keys would not come back as
    itself (it would reach the handler as bytes, or fail to decode on the worker): refuse it
    at enqueue, so what is enqueued is what runs. Values kombu tags itself are not dicts of
    ``obj``; only a body that holds both keys is walked."""
    if b'"__value__"' not in body or b'"__type__"' not in body:
        return
    stack: list[tuple[Any, str]] = [(obj, "payload")]
    while stack:
        value, where = stack.pop()
        if isinstance(value, dict):
            if value.keys() == _MARKER_KEYS:
                raise QueueError(
                    ErrorCode.BAD_PAYLOAD,
                    f"{where} is a dict with exactly the keys '__type__' and '__value__', "
                    "the JSON codec's marker for a tagged value (bytes, datetime...): it would "
                    "not reach the handler as sent; rename or add a key",
                )
            stack.extend((v, f"{where}[{k!r}]") for k, v in value.items())
        elif isinstance(value, list | tuple):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(value))


def _refuse_deep_nesting(body: bytes, obj: Any) -> None:
    """Past ``MAX_JSON_DEPTH`` levels a reader deeper in its own stack (a view, a worker)
    might fail to decode what a shallow caller encoded: refuse it here, deterministically.

    A body with no more brackets than the limit cannot nest deeper, so only large ones are
    walked."""
    if body.count(b"[") + body.count(b"{") <= MAX_JSON_DEPTH:
        return
    if deeper_than(obj, MAX_JSON_DEPTH):
        raise QueueError(
            ErrorCode.BAD_PAYLOAD, f"payload nests deeper than {MAX_JSON_DEPTH} levels"
        )


def decode(content_type: str, content_encoding: str, body: bytes) -> Any:
    """The object ``body`` encodes; refuses content types ``ACCEPT_CONTENT`` does not list.

    Raises ``QueueError``: ``CONTENT_DISALLOWED`` for an unaccepted type (checked here, not
    only by kombu, which trusts ``application/data`` and ``application/text`` unconditionally),
    ``BAD_PAYLOAD`` for a body that does not decode, ``DECRYPT_FAILED`` for an encrypted one
    (``encryption``) that no configured key opens.
    """
    if content_encoding.startswith(encryption.PREFIX):
        opened = encryption.open_payload(Encoded(content_type, content_encoding, body))
        content_encoding, body = opened.content_encoding, opened.body
    accepted = accepted_content_types()
    if content_type not in accepted:
        message = f"refusing to decode {content_type!r}: ACCEPT_CONTENT allows {sorted(accepted)}"
        raise QueueError(ErrorCode.CONTENT_DISALLOWED, message)
    if content_type == _JSON and body and content_encoding in _UTF8 and _json_is_kombus():
        # What kombu's registry would call, without its look-ups and context managers (a few
        # µs a job on the worker's hot path); the same values, the same errors.
        try:
            text = body.decode() if type(body) is bytes else None
            if text is None or text[:1] == "\ufeff":  # a BOM: json.loads says why it refuses
                return _kombu_json_loads(body)
            return _json_decode(text)
        except Exception as exc:
            message = f"cannot decode a {content_type} payload of {len(body)} bytes: {exc}"
            raise QueueError(ErrorCode.BAD_PAYLOAD, message) from exc
    try:
        return _loads(body, content_type, content_encoding, accept=accepted)
    except ContentDisallowed as exc:
        raise QueueError(ErrorCode.CONTENT_DISALLOWED, str(exc)) from exc
    except (DecodeError, SerializerNotInstalled) as exc:
        cause = exc.__cause__ or exc
        message = f"cannot decode a {content_type} payload of {len(body)} bytes: {cause}"
        raise QueueError(ErrorCode.BAD_PAYLOAD, message) from exc


def _json_is_kombus() -> bool:
    """Whether kombu still decodes JSON with its own function (a project may register
    another ``application/json`` serializer: then kombu's registry is asked, as always)."""
    return bool(registry._decoders.get(_JSON) is _kombu_json_loads)


def size_of(encoded: Encoded) -> int:
    """The size the cap is measured in: bytes of the encoded body."""
    return len(encoded.body)


def _serializer_name(name_or_type: str) -> str:
    """A kombu serializer name, also accepting its content type (``application/json``)."""
    name = registry.type_to_name.get(name_or_type, name_or_type)
    if name not in registry.name_to_type:
        known = ", ".join(sorted(registry.name_to_type))
        message = f"unknown serializer {name_or_type!r}; kombu knows: {known}"
        raise QueueError(ErrorCode.BAD_ARGUMENT, message)
    return str(name)


def _check_size(encoded: Encoded, configured: int, limit: int | None) -> None:
    size = size_of(encoded)
    if limit is not None and limit < configured:
        cap, source = limit, "the backend's limit"
    else:
        cap, source = configured, "MAX_PAYLOAD_BYTES"
    if size > cap:
        message = f"payload is {size} bytes; the cap is {cap} ({source})"
        raise QueueError(ErrorCode.PAYLOAD_TOO_LARGE, message)
