"""The job table's unique upsert (``jobtable/uniques.py``): a batch folded by key, the
statement naming the one-holder index, and the same rule as ``core.unique.holds``."""

from __future__ import annotations

import pytest

from django_blamequeue.backends.jobtable import uniques
from django_blamequeue.core.payload import Encoded
from django_blamequeue.core.records import NewJob
from django_blamequeue.exceptions import ErrorCode, QueueError


def job(job_id: str, key: str, mode: str, body: bytes = b"{}") -> NewJob:
    return NewJob(
        job_id=job_id,
        queue="q",
        name="n",
        payload=Encoded("application/json", "utf-8", body),
        unique_key=key,
        unique_states=",pending,",
        unique_mode=mode,
    )


def test_a_batch_folds_by_key_and_replace_keeps_the_last_payload() -> None:
    calls = uniques.fold(
        [job("1", "a", "replace", b"1"), job("2", "b", "replace"), job("3", "a", "replace", b"3")]
    )
    assert [(c.job.job_id, c.job.payload.body, [x.job_id for x in c.calls]) for c in calls] == [
        ("1", b"3", ["3"]),
        ("2", b"{}", []),
    ]
    skip = uniques.fold([job("1", "a", "skip", b"1"), job("2", "a", "skip", b"2")])
    assert skip[0].job.payload.body == b"1"


def test_a_batch_that_repeats_a_key_it_may_not_absorb_is_refused() -> None:
    with pytest.raises(QueueError) as err:
        uniques.fold([job("1", "a", "reject"), job("2", "a", "reject")])
    assert err.value.code == ErrorCode.DUPLICATE


def test_the_upsert_names_the_holder_index_and_leaves_a_job_whose_id_exists() -> None:
    columns = (("id", "varchar(26)"), ("unique_key", "varchar(255)"))
    for statement in (
        uniques.upsert_postgresql(
            columns, (True, True, False, False), 0, "blamequeue_job", "debounce"
        ),
        uniques.upsert_sqlite(("id", "unique_key"), "blamequeue_job", "debounce"),
    ):
        assert "ON CONFLICT (unique_key) WHERE unique_states IS NOT NULL DO UPDATE" in statement
        assert "WHERE NOT EXISTS (SELECT 1 FROM blamequeue_job e WHERE e.id = " in statement
        assert (
            "available_at = CASE WHEN blamequeue_job.state IN ('pending', 'blocked')" in statement
        )
    reject = uniques.upsert_sqlite(("id",), "blamequeue_job", "reject")
    assert "SET unique_calls = blamequeue_job.unique_calls WHERE" in reject  # counts nothing
