"""Reading a Redis claim's reply: the one-pass reading of each job gives exactly what the
field-by-field reading gives, and a job whose fields are not as the API stores them is read
field by field, so its ``problem`` names what is wrong and the others of the batch are kept."""

from __future__ import annotations

import json
from typing import Any

import pytest

from django_blamequeue.backends.redis.claims import _claimed, claimed_from

#: A claim row as leasing.lua's ``claim`` answers it: every value a string, false for none.
ROW: list[Any] = [
    "0123456789abcdef0123456789ab0001",  # token
    "1764928800000000",  # expires
    "1764928740000000",  # started
    "01JJOBID",
    "mail",
    "mail.send",
    "application/json",
    "utf-8",
    "2",  # attempts
    "5",  # max_attempts
    "-3",  # priority
    "12.5",  # timeout
    "trace-1",
    "confidential",
    "flow-1",
    "parent-1",
    "1764928700000001",  # available
    "1764928600000002",  # created
    "collect",
    "continue",
    "1",  # flow_depth
    "3",  # stalls
    '{"step": 2}',
    "tenant-7",
    "4",  # snoozes
]
BARE: list[Any] = [*ROW[:11], *[False] * 5, ROW[16], ROW[17], *[False] * 7]


def reply(*rows: list[Any]) -> list[Any]:
    """As leasing.lua answers: each row ends with its payload's length; one bulk of payloads."""
    payloads = [b'{"n": %d}' % i for i in range(len(rows))]
    sized = [[*row, len(p)] for row, p in zip(rows, payloads, strict=True)]
    return [json.dumps(sized).encode(), b"".join(payloads)]


@pytest.mark.parametrize("row", [ROW, BARE, [*BARE[:11], "", *BARE[12:22], "", *BARE[23:]]])
def test_the_one_pass_reading_equals_the_field_by_field_reading(row: list[Any]) -> None:
    (fast,) = claimed_from(reply(row))
    assert fast == _claimed(row, b'{"n": 0}')
    assert fast.problem is None


def test_jobs_of_one_claim_share_their_times_but_not_their_fields() -> None:
    other = [*ROW[:3], "01JOTHER", *ROW[4:8], "1", *ROW[9:]]
    first, second = claimed_from(reply(ROW, other))
    assert first.lease_expires_at == second.lease_expires_at
    assert (first.job_id, first.attempt, second.job_id, second.attempt) == (
        "01JJOBID",
        2,
        "01JOTHER",
        1,
    )
    assert (first.payload.body, second.payload.body) == (b'{"n": 0}', b'{"n": 1}')


@pytest.mark.parametrize(
    ("index", "value", "words"),
    [
        (8, "many", "the stored attempts is not an integer"),
        (9, False, "the stored max_attempts is not an integer"),
        (11, "soon", "the stored timeout is not a number of seconds"),
        (11, "inf", "the stored timeout is not a number of seconds"),
        (17, "not a time", "the stored created is not a time"),
        (20, "deep", "the stored flow_depth is not an integer"),
    ],
)
def test_a_job_not_stored_as_the_api_stores_it_is_read_field_by_field(
    index: int, value: Any, words: str
) -> None:
    bad = list(ROW)
    bad[index] = value
    good, broken = claimed_from(reply(ROW, bad))
    assert good.problem is None
    assert broken.problem is not None and words in broken.problem, broken.problem
    assert broken.job_id == "01JJOBID" and broken.token == ROW[0]


def test_a_job_without_a_stored_payload_reads_empty_and_the_next_keeps_its_own() -> None:
    other = [*ROW[:3], "01JOTHER", *ROW[4:]]
    header = json.dumps([[*ROW, -1], [*other, 7]]).encode()
    missing, second = claimed_from([header, b'"seven"'])
    assert (missing.payload.body, missing.problem) == (b"", None)
    assert second.payload.body == b'"seven"'
