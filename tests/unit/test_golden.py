"""Stored formats stay readable across versions (a golden-file test).

``tests/golden/v0.1.0.json`` holds what version 0.1.0 wrote: payloads encoded by each kombu
serializer we ship with (as the bytes every backend stores), and an outbox ``enqueue`` body.
A later version must decode them to the same values; a format change that breaks them fails
here before it strands a queue full of jobs. Regenerate only for a new version's file, never
over an old one: ``python -m tests.unit.test_golden write tests/golden/vX.Y.Z.json``.
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import pytest

from django_blamequeue.core.payload import Encoded
from django_blamequeue.core.records import NewJob
from django_blamequeue.core.wire import job_from_body, job_to_body
from django_blamequeue.serializers import decode, encode

GOLDEN = sorted((Path(__file__).resolve().parent.parent / "golden").glob("v*.json"))
VALUE = {"to": "a@example.com", "n": 3, "ratio": 0.5, "tags": ["x", "y"], "ok": True, "no": None}
TEXT = "ünïcødé ✓ 🚀"


def _sample_job() -> NewJob:
    return NewJob(
        job_id="01JAAAAAAAAAAAAAAAAAAAAAAA",
        queue="emails",
        name="app.jobs.send",
        payload=encode(VALUE, serializer="json"),
        priority=5,
        delay=10.0,
        max_attempts=4,
        timeout=60.0,
        classification="billing",
        trace_id="0af7651916cd43dd8448eb211c80319c",
        dedupe_key="user-7",
        flow_id="01JBBBBBBBBBBBBBBBBBBBBBBB",
        parent_id="01JCCCCCCCCCCCCCCCCCCCCCCC",
        flow_key="p1",
        parent_backend="default",
        flow_depth=1,
    )


def write(path: Path) -> None:
    payloads = {}
    for name, value in (("json", VALUE), ("json-text", TEXT)):
        enc = encode(value, serializer="json")
        payloads[name] = {
            "content_type": enc.content_type,
            "content_encoding": enc.content_encoding,
            "body": base64.b64encode(enc.body).decode(),
        }
    document = {
        "payloads": payloads,
        "values": {"json": VALUE, "json-text": TEXT},
        "outbox_enqueue_body": job_to_body(_sample_job()),
    }
    path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")


def test_there_is_a_golden_file_per_released_format() -> None:
    assert [p.name for p in GOLDEN][:1] == ["v0.1.0.json"]


@pytest.mark.parametrize("path", GOLDEN, ids=[p.stem for p in GOLDEN])
def test_stored_payloads_of_every_version_decode_to_the_same_values(path: Path) -> None:
    document = json.loads(path.read_text())
    for name, stored in document["payloads"].items():
        body = base64.b64decode(stored["body"])
        value = decode(stored["content_type"], stored["content_encoding"], body)
        assert value == document["values"][name], name


@pytest.mark.parametrize("path", GOLDEN, ids=[p.stem for p in GOLDEN])
def test_an_outbox_body_of_every_version_is_read_as_the_same_job(path: Path) -> None:
    document = json.loads(path.read_text())
    job = job_from_body(document["outbox_enqueue_body"])
    expected = _sample_job()
    assert job == expected
    assert decode(job.payload.content_type, job.payload.content_encoding, job.payload.body) == (
        VALUE
    )


def test_the_current_version_writes_what_the_golden_file_holds() -> None:
    """Today's encoder still produces the 0.1.0 bytes (content type, encoding and body), so
    a message written now is readable by a 0.1.0 worker during a rolling upgrade."""
    document = json.loads(GOLDEN[0].read_text())
    stored = document["payloads"]["json"]
    now = encode(VALUE, serializer="json")
    assert Encoded(now.content_type, now.content_encoding, now.body) == Encoded(
        stored["content_type"], stored["content_encoding"], base64.b64decode(stored["body"])
    )


if __name__ == "__main__" and sys.argv[1:2] == ["write"]:
    import django

    django.setup()
    write(Path(sys.argv[2]))
