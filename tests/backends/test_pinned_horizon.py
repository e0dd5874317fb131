"""PostgreSQL while the xmin horizon is pinned: claims, acks and renewals read only their rows.

A session idle in a transaction keeps every claimed job's dead entry in the claim index, and
every acked job's in the inflight index. A claim that reads the claim index from the start
reads all of them: once a claim from the start is slow (here: any,
``CLAIM_ONWARD_AFTER_MS = 0``), the next claims start after the last job claimed, and a
claim from the start still comes at least every second for what sorts before. Acks and
renewals find their rows by key, never through the inflight index.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import connections, transaction
from django.utils import timezone

from django_blamequeue import queue
from django_blamequeue.backends import get_backend
from django_blamequeue.backends.database import DatabaseBackend
from django_blamequeue.core.records import Ack, Claimed, EnqueuedJob, Transition
from django_blamequeue.core.states import State
from django_blamequeue.sweeper import services_for
from django_blamequeue.sweeper.claim_scout import ClaimScout
from tests.backends.pg_stats import index_entries_read
from tests.conftest import need_server

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

Q = "onward"


@pytest.fixture
def backend(settings: Any) -> DatabaseBackend:
    need_server("postgres")
    options = {**settings.BLAMEQUEUE["BACKENDS"]["postgres"], "CLAIM_ONWARD_AFTER_MS": 0}
    settings.BLAMEQUEUE = {
        **settings.BLAMEQUEUE,
        "BACKENDS": {**settings.BLAMEQUEUE["BACKENDS"], "postgres": options},
    }
    built = get_backend("postgres")
    assert isinstance(built, DatabaseBackend)
    return built


@pytest.fixture
def pinned_horizon() -> Iterator[None]:
    """A second session holds an xid in an open transaction: no dead row can be vacuumed,
    and no index scan may mark an entry dead, while it lasts."""
    other = connections.create_connection("postgres")
    other.set_autocommit(False)
    with other.cursor() as cur:
        cur.execute("SELECT txid_current()")
    try:
        yield
    finally:
        other.rollback()
        other.close()


def hold_onward(backend: DatabaseBackend) -> None:
    """No claim from the start falls due during the next claims, however slow this machine."""
    backend.claim_start.full_due_at = time.monotonic() + 3600


def done(backend: DatabaseBackend, claimed: list[Claimed]) -> None:
    ok = Transition(state=State.DONE)
    acks = [Ack(job_id=c.job_id, token=c.token, transition=ok) for c in claimed]
    assert all(r.ok for r in backend.apply_many(acks))


def a_job_behind_the_point(backend: DatabaseBackend) -> EnqueuedJob:
    """20 jobs, 10 claimed from the start (the point is set, claims go onward), then a job
    due an hour ago: it sorts before the point."""
    queue.enqueue_many(Q, [{"i": i} for i in range(20)], backend="postgres")
    done(backend, backend.claim([Q], 10, 30))
    assert backend.claim_start.onward
    earlier = timezone.now() - timedelta(hours=1)
    behind = queue.enqueue(Q, {"behind": True}, run_at=earlier, backend="postgres")
    hold_onward(backend)
    return behind


def entries_read_by_one_claim(backend: DatabaseBackend, n: int) -> tuple[int, list[Claimed]]:
    with transaction.atomic(using="postgres"):
        before = index_entries_read("postgres", "bq_job_claim")
        claimed = backend.claim([Q], n, 30)
        return index_entries_read("postgres", "bq_job_claim") - before, claimed


def test_claims_start_after_the_last_job_claimed_while_the_horizon_is_pinned(
    backend: DatabaseBackend, pinned_horizon: None
) -> None:
    queue.enqueue_many(Q, [{"i": i} for i in range(600)], backend="postgres")
    for _ in range(5):  # 500 claimed and done, their claim index entries dead but kept
        done(backend, backend.claim([Q], 100, 30))
    assert backend.claim_start.onward
    hold_onward(backend)

    onward, claimed = entries_read_by_one_claim(backend, 3)
    assert len(claimed) == 3
    backend.claim_start.full_due_at = 1.0  # due: the next claim reads from the start
    from_start, claimed_too = entries_read_by_one_claim(backend, 3)
    assert len(claimed_too) == 3
    print(f"\nclaim of 3: {onward} index entries read onward, {from_start} from the start")
    assert onward <= 3 + 3  # what it claims, and a few more at most
    assert from_start >= 500  # every dead entry of the 500 jobs before it
    done(backend, claimed + claimed_too)


def test_a_job_sorting_before_the_point_waits_for_the_next_claim_from_the_start(
    backend: DatabaseBackend, pinned_horizon: None
) -> None:
    behind = a_job_behind_the_point(backend)

    onward = backend.claim([Q], 5, 30)
    assert len(onward) == 5 and behind.job_id not in {c.job_id for c in onward}
    backend.claim_start.full_due_at = 1.0  # the claim from the start, a second later
    from_start = backend.claim([Q], 20, 30)
    assert from_start[0].job_id == behind.job_id  # it sorts first
    assert len(from_start) == 6
    done(backend, onward + from_start)


def test_the_sweepers_scout_finds_a_job_before_the_point_and_the_round_claims_onward_only(
    backend: DatabaseBackend, pinned_horizon: None
) -> None:
    """The read from the start moves off the worker's round: the scout (the sweeper's thread,
    its own connection, no lock) finds the job sorting before the point and moves the point
    back, and the next claim, onward as every claim of the round, takes it first."""
    behind = a_job_behind_the_point(backend)
    done(backend, backend.claim([Q], 2, 30))  # onward: past it

    scout = next(s for s in services_for([backend]) if isinstance(s, ClaimScout))
    moved: list[int] = []

    def sweeper_thread() -> None:
        try:
            moved.append(scout.run_once())
        finally:
            connections.close_all()

    thread = threading.Thread(target=sweeper_thread)
    thread.start()
    thread.join()
    assert moved == [1]
    assert backend.claim_start.points([Q]) is not None  # the round still claims onward
    first, *rest = backend.claim([Q], 20, 30)
    assert first.job_id == behind.job_id
    assert len(rest) == 8
    done(backend, [first, *rest])


def test_a_more_urgent_job_still_goes_first(backend: DatabaseBackend, pinned_horizon: None) -> None:
    queue.enqueue_many(Q, [{"i": i} for i in range(20)], backend="postgres")
    done(backend, backend.claim([Q], 10, 30))
    assert backend.claim_start.onward
    urgent = queue.enqueue(Q, {"urgent": True}, priority=5, backend="postgres")
    [first] = backend.claim([Q], 1, 30)
    assert first.job_id == urgent.job_id  # higher priorities are read from the start
    rest = backend.claim([Q], 20, 30)  # then the lower ones, from the start once
    assert len(rest) == 10
    done(backend, [first, *rest])
    assert queue.size(Q, backend="postgres") == 0


def test_a_drain_claiming_onward_runs_every_job_once(backend: DatabaseBackend) -> None:
    """Priorities, jobs due an hour ago and a few each round: every job claimed exactly
    once, as the claims from the start (forced every third round) sweep up what sorts
    before the point."""
    earlier = timezone.now() - timedelta(hours=1)
    queue.enqueue_many(Q, [{"i": i} for i in range(150)], backend="postgres")
    queue.enqueue_many(Q, [{"p": i} for i in range(30)], priority=3, backend="postgres")
    seen: list[str] = []
    for round_no in range(200):
        if round_no % 7 == 3:
            queue.enqueue(Q, {"behind": round_no}, run_at=earlier, backend="postgres")
        if round_no % 3 == 0:
            backend.claim_start.full_due_at = min(backend.claim_start.full_due_at, 1.0)
        claimed = backend.claim([Q], 7, 30)
        seen += [c.job_id for c in claimed]
        done(backend, claimed)
        if not claimed and round_no > 40:
            break
    assert len(seen) == len(set(seen)) == 180 + len(range(3, round_no + 1, 7))
    assert queue.size(Q, backend="postgres") == 0


def test_acks_and_renewals_find_their_rows_by_key_not_through_the_inflight_index(
    backend: DatabaseBackend, pinned_horizon: None
) -> None:
    """A batch of acks was planned as a read of the whole inflight index (every acked job
    keeps its dead entry there while the horizon is pinned) hashed against the batch."""
    queue.enqueue_many(Q, [{"i": i} for i in range(400)], backend="postgres")
    for _ in range(3):
        done(backend, backend.claim([Q], 100, 30))
    held = backend.claim([Q], 5, 30)
    with transaction.atomic(using="postgres"):
        before = index_entries_read("postgres", "bq_job_inflight")
        assert backend.renew_leases([(c.job_id, c.token) for c in held], 60) == frozenset()
        done(backend, held)
        read = index_entries_read("postgres", "bq_job_inflight") - before
    print(f"\nrenewal and ack of 5: {read} inflight index entries read")
    assert read == 0
