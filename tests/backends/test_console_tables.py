"""The console's tables on a job table engine (local SQLite and PostgreSQL): chart upserts in
chunks, attempt rows that go with their job, bulk edits fenced by state."""

from __future__ import annotations

import pytest

from django_blamequeue import queue
from django_blamequeue.backends import get_backend
from django_blamequeue.backends.jobtable.attempts import Attempts
from django_blamequeue.backends.jobtable.bulk import DELETABLE
from django_blamequeue.backends.jobtable.timeseries import CHUNK
from django_blamequeue.core.records import Ack, Transition
from django_blamequeue.core.states import Reason, State
from django_blamequeue.core.timeseries import Sample
from django_blamequeue.models import FlowDependency, JobAttempt
from tests.conftest import need_server

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")
BACKENDS = ["default", "postgres"]


def engine(alias: str):  # type: ignore[no-untyped-def]
    if alias == "postgres":
        need_server("postgres")
    return get_backend(alias)


@pytest.mark.parametrize("alias", BACKENDS)
def test_more_pairs_than_one_insert_holds_are_all_recorded(alias: str) -> None:
    b = engine(alias)
    now = b.now()
    b.record_samples([Sample(queue="q", name=f"n{i}", done=1) for i in range(CHUNK + 7)], now)
    found = b.buckets(60, now.replace(second=0, microsecond=0), now.replace(year=now.year + 1))
    assert len(found) == CHUNK + 7 and all(x.done == 1 for x in found)


@pytest.mark.parametrize("alias", BACKENDS)
def test_deleting_a_job_takes_its_attempts_and_flow_edges_and_spares_a_running_one(
    alias: str,
) -> None:
    b = engine(alias)
    assert isinstance(b.history, Attempts)  # type: ignore[attr-defined]
    flow = queue.enqueue_flow(
        "f",
        [{"name": "a", "max_attempts": 1}, {"name": "b", "depends_on": ["a"]}, {"name": "c"}],
        backend=alias,
    )
    a, child, c = (j["job_id"] for j in flow["jobs"])
    claimed = {x.job_id: x for x in b.claim(["f"], 2, 30)}
    assert set(claimed) == {a, c}
    failed = Transition(state=State.FAILED, error="E: x", reason=Reason.ERROR)
    b.apply_many([Ack(job_id=a, token=claimed[a].token, transition=failed, worker="w-1")])
    rows = JobAttempt.objects.using(b.database).filter(job_id=a)
    assert list(rows.values_list("outcome", "worker")) == [("failed", "w-1")]
    assert State.INFLIGHT not in DELETABLE and State.WAITING_CHILDREN not in DELETABLE
    assert b.delete_jobs([a, child, c]) == 2  # c runs: it stays
    assert queue.get_job(c, backend=alias) is not None
    assert not JobAttempt.objects.using(b.database).filter(job_id=a).exists()
    assert not FlowDependency.objects.using(b.database).filter(job_id__in=[a, child]).exists()
