"""``@job(unique=...)``: the job's own spec, its key derived from the job's name and payload,
a call's ``unique=`` over it, and a spec refused at registration (docs/unique.md). What the
engines do with a key is the conformance suite's (tests/conformance/test_unique.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from django_blamequeue import QueueError, Unique, job, queue
from django_blamequeue.core.unique import derived_key
from django_blamequeue.exceptions import ErrorCode
from django_blamequeue.jobs import registry


@pytest.fixture
def names() -> Iterator[list[str]]:
    made: list[str] = []
    yield made
    for name in made:
        registry.unregister(name)


@pytest.mark.django_db(transaction=True)
def test_a_unique_job_holds_a_key_made_of_its_name_and_payload_and_a_call_may_opt_out(
    names: list[str],
) -> None:
    @job(queue="uj", name="tests.unit.unique_refresh", unique=True)
    def refresh(payload: Any) -> None:
        return None

    names.append(refresh.name)
    first = refresh.enqueue({"account": 3})
    again = refresh.enqueue({"account": 3})
    other = refresh.enqueue({"account": 4})
    assert (again.job_id, again.conflict) == (first.job_id, "skip")
    assert other.job_id != first.job_id
    info = queue.get_job(first.job_id)
    assert info is not None
    assert info.unique_key == derived_key("tests.unit.unique_refresh", {"account": 3})
    plain = refresh.enqueue({"account": 3}, unique=False)
    assert not plain.deduplicated and plain.job_id != first.job_id
    stricter = refresh.enqueue({"account": 3}, unique=Unique(key="own", on_conflict="reject"))
    assert not stricter.deduplicated  # the call's spec replaces the job's: another key


def test_a_bad_unique_spec_is_refused_when_the_job_is_registered() -> None:
    with pytest.raises(QueueError) as err:

        @job(queue="uj", name="tests.unit.unique_bad", unique={"on_conflict": "merge"})
        def bad(payload: Any) -> None:
            return None

    assert err.value.code == ErrorCode.INVALID_HANDLER
    assert "on_conflict must be one of skip, replace, debounce, reject" in err.value.message
