"""serializers: kombu encoding behind ACCEPT_CONTENT and MAX_PAYLOAD_BYTES."""

from __future__ import annotations

import pickle
import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pytest
from pytest_django import Settings as SettingsWrapper

from django_blamequeue import conf
from django_blamequeue.core.payload import Encoded
from django_blamequeue.exceptions import ErrorCode, QueueError
from django_blamequeue.serializers import decode, encode, size_of

ran: list[str] = []


class Exploit:
    """Unpickling this records that code ran; a refused decode must never get that far."""

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (ran.append, ("pwned",))


@pytest.fixture(autouse=True)
def _json_only(settings: SettingsWrapper) -> Iterator[None]:
    conf.reset()
    settings.BLAMEQUEUE = {"SERIALIZER": "json", "ACCEPT_CONTENT": ["json"]}
    ran.clear()
    yield
    conf.reset()


@pytest.mark.parametrize(
    "payload",
    [
        {"to": "a@example.com", "n": 3, "ratio": 0.5, "ok": True, "none": None},
        [1, "two", 3.0, False, None, {"nested": [[]]}],
        "plain text, ünïcode ✓",
        0,
        -17,
        1.25,
        True,
        None,
        {},
    ],
)
def test_json_round_trips_plain_values(payload: object) -> None:
    encoded = encode(payload)
    assert (encoded.content_type, encoded.content_encoding) == ("application/json", "utf-8")
    assert isinstance(encoded.body, bytes)
    assert decode(encoded.content_type, encoded.content_encoding, encoded.body) == payload


def test_the_settings_serializer_is_the_default(settings: SettingsWrapper) -> None:
    settings.BLAMEQUEUE = {"SERIALIZER": "pickle", "ACCEPT_CONTENT": ["json", "pickle"]}
    assert encode({"a": 1}).content_type == "application/x-python-serialize"
    assert encode({"a": 1}, serializer="json").content_type == "application/json"


def test_a_serializer_may_be_named_by_its_content_type() -> None:
    assert encode([1], serializer="application/json").content_type == "application/json"


def test_an_unknown_serializer_is_a_bad_argument() -> None:
    with pytest.raises(QueueError) as caught:
        encode([1], serializer="bson")
    assert caught.value.code == ErrorCode.BAD_ARGUMENT


def test_pickle_is_refused_for_encoding_unless_listed() -> None:
    with pytest.raises(QueueError) as caught:
        encode({"a": 1}, serializer="pickle")
    assert caught.value.code == ErrorCode.CONTENT_DISALLOWED
    assert "ACCEPT_CONTENT" in caught.value.message


def test_pickle_is_refused_for_decoding_unless_listed_and_nothing_runs() -> None:
    body = pickle.dumps(Exploit())
    with pytest.raises(QueueError) as caught:
        decode("application/x-python-serialize", "binary", body)
    assert caught.value.code == ErrorCode.CONTENT_DISALLOWED
    assert ran == []


def test_pickle_works_once_listed(settings: SettingsWrapper) -> None:
    settings.BLAMEQUEUE = {"ACCEPT_CONTENT": ["json", "pickle"]}
    encoded = encode({1, 2}, serializer="pickle")
    assert decode(encoded.content_type, encoded.content_encoding, encoded.body) == {1, 2}


def test_content_kombu_trusts_by_default_is_still_refused_unless_listed() -> None:
    with pytest.raises(QueueError) as caught:
        decode("application/data", "binary", b"raw bytes")
    assert caught.value.code == ErrorCode.CONTENT_DISALLOWED


def test_accept_content_may_list_content_types(settings: SettingsWrapper) -> None:
    settings.BLAMEQUEUE = {"ACCEPT_CONTENT": ["application/json"]}
    encoded = encode({"a": [1]})
    assert decode(encoded.content_type, encoded.content_encoding, encoded.body) == {"a": [1]}


@pytest.mark.parametrize(("payload", "type_name"), [({1, 2}, "set"), ({"k": object()}, "object")])
def test_a_payload_json_cannot_encode_is_a_bad_payload_naming_the_type(
    payload: object, type_name: str
) -> None:
    with pytest.raises(QueueError) as caught:
        encode(payload)
    assert caught.value.code == ErrorCode.BAD_PAYLOAD
    assert type_name in caught.value.message


@pytest.mark.parametrize(
    "body", [b"{not json", b"\xff\xfe", b'{"__type__": "nope", "__value__": 1}']
)
def test_an_undecodable_body_is_a_bad_payload(body: bytes) -> None:
    with pytest.raises(QueueError) as caught:
        decode("application/json", "utf-8", body)
    assert caught.value.code == ErrorCode.BAD_PAYLOAD


def test_a_payload_at_the_cap_passes_and_one_byte_more_is_refused(
    settings: SettingsWrapper,
) -> None:
    settings.BLAMEQUEUE = {"MAX_PAYLOAD_BYTES": 12}
    assert size_of(encode("x" * 10)) == 12  # the quotes count
    with pytest.raises(QueueError) as caught:
        encode("x" * 11)
    assert caught.value.code == ErrorCode.PAYLOAD_TOO_LARGE
    assert caught.value.message == "payload is 13 bytes; the cap is 12 (MAX_PAYLOAD_BYTES)"


def test_the_size_is_counted_in_encoded_bytes() -> None:
    encoded = encode("é" * 4)
    assert size_of(encoded) == len(encoded.body) == len('"' + "\\u00e9" * 4 + '"')


def test_a_backend_limit_below_the_setting_applies() -> None:
    with pytest.raises(QueueError) as caught:
        encode("x" * 100, max_bytes=50)
    assert caught.value.code == ErrorCode.PAYLOAD_TOO_LARGE
    assert "the cap is 50 (the backend's limit)" in caught.value.message


def test_a_backend_limit_above_the_setting_does_not_lift_it(settings: SettingsWrapper) -> None:
    settings.BLAMEQUEUE = {"MAX_PAYLOAD_BYTES": 20}
    with pytest.raises(QueueError) as caught:
        encode("x" * 100, max_bytes=262_144)
    assert "the cap is 20 (MAX_PAYLOAD_BYTES)" in caught.value.message


def test_encoded_is_a_frozen_value() -> None:
    encoded = Encoded("application/json", "utf-8", b"1")
    with pytest.raises(AttributeError):
        encoded.body = b"2"  # type: ignore[misc]
    assert encoded == Encoded("application/json", "utf-8", b"1")


# -- the JSON fast path decodes exactly what kombu's registry decodes --------------------------
def _kombu_dumps(obj: Any) -> bytes:
    from kombu.utils.json import dumps

    return str(dumps(obj)).encode()


KOMBU_JSON_BODIES = [
    b"{}",
    b"[]",
    b"null",
    b'{"a": [1, 2.5, -0.0, 1e308, true, false, null], "b": {"c": "d"}}',
    '{"é": "☃ \\u00e9 \\ud83d\\ude00", "k": "\\u0000"}'.encode(),
    b"12345678901234567890123456789",
    b'"just a string"',
    b'{"__type__": "datetime", "__value__": "2026-12-04T15:45:11.123456+00:00"}',
    b'{"__type__": "decimal", "__value__": "3.14159265358979323846"}',
    _kombu_dumps(
        {
            "id": uuid.UUID("0b6fd7a2-7d1b-4f83-a0e4-38c6bda6a9ab"),
            "at": datetime(2026, 12, 4, 15, 45, tzinfo=UTC),
            "amount": Decimal("10.10"),
            "day": date(2026, 12, 4),
        }
    ),
    b'[{"__type__": "date", "__value__": "2026-12-04"},'
    b' {"__type__": "bytes", "__value__": "eA=="}]',
    b'{"__type__": "time", "__value__": "15:45:11"}',
    b'{"__type__": "datetime", "__value__": "x", "other": 1}',  # not a tagged value: a dict
]
KOMBU_JSON_FAILURES = [
    b"{",
    b"\xff\xfe{}",  # not UTF-8 (json.loads of the bytes would take it as UTF-16)
    b"\xef\xbb\xbf{}",  # a UTF-8 byte order mark
    b"NaN-ish",
    b'{"__type__": "no-such-type", "__value__": 1}',
    b'{"__type__": "uuid", "__value__": "0b6fd7a2-7d1b-4f83-a0e4-38c6bda6a9ab"}',
    b"[" * 100_000 + b"]" * 100_000,
]


def _kombu(body: bytes, encoding: str = "utf-8") -> Any:
    from kombu.serialization import loads

    return loads(body, "application/json", encoding, accept={"application/json"})


@pytest.mark.parametrize("body", KOMBU_JSON_BODIES)
@pytest.mark.parametrize("encoding", ["utf-8", "utf8", ""])
def test_json_decodes_to_exactly_what_kombu_decodes(body: bytes, encoding: str) -> None:
    ours, theirs = decode("application/json", encoding, body), _kombu(body)
    assert ours == theirs and type(ours) is type(theirs)
    assert repr(ours) == repr(theirs)


@pytest.mark.parametrize("body", KOMBU_JSON_FAILURES)
def test_json_refuses_what_kombu_refuses_with_its_message(body: bytes) -> None:
    from kombu.exceptions import DecodeError

    with pytest.raises(DecodeError) as theirs:
        _kombu(body)
    with pytest.raises(QueueError) as ours:
        decode("application/json", "utf-8", body)
    assert ours.value.code == ErrorCode.BAD_PAYLOAD
    cause = theirs.value.__cause__ or theirs.value
    expected = f"cannot decode a application/json payload of {len(body)} bytes: {cause}"
    assert ours.value.message == expected


def test_an_empty_json_body_decodes_as_kombu_does() -> None:
    assert decode("application/json", "utf-8", b"") == _kombu(b"")


def test_a_json_decoder_a_project_registered_is_used_instead_of_the_fast_path() -> None:
    from kombu.serialization import register, register_json

    register("json", lambda o: "x", lambda s: ("mine", s), content_type="application/json")
    try:
        assert decode("application/json", "utf-8", b"{}") == ("mine", b"{}")
    finally:
        register_json()
    assert decode("application/json", "utf-8", b"{}") == {}
