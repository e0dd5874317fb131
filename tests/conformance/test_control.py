"""Control plane: pause and limits hold at claim time, counted by the engine for every
worker (rules ``paused`` and ``limits``), on every backend.

Claims are driven through the interface with ``limits=`` as a worker passes them (the queues
it claims under limits, with the settings' defaults). On SQS a claim leases among the
messages SQS delivers and hides again for ``LIMIT_HOLD`` the ones its limits refuse, so the
helpers claim in a loop with a deadline instead of expecting one claim to see every job.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import pytest

from django_blamequeue import ErrorCode, QueueError, QueueLimits, queue
from django_blamequeue.audit import LIMITS, PAUSE, RESUME
from django_blamequeue.backends.base import Backend
from django_blamequeue.core import lifecycle
from django_blamequeue.core.records import Claimed

from .support import ack, audit_rows, claim_one, later, outcome, succeed

NONE = QueueLimits()
#: How long a check that nothing more is claimed lasts where refused jobs are hidden for a
#: while (SQS): past that hold, so they are received and refused again.
SETTLE = 1.5


@pytest.fixture(autouse=True)
def short_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    """SQS hides a message its limits refuse for ``LIMIT_HOLD`` (2 s): 1 s here."""
    try:
        from django_blamequeue.backends.sqs import receive
    except ImportError:  # boto3 not installed: no SQS backend to hurry
        return
    monkeypatch.setattr(receive, "LIMIT_HOLD", 1)


def claims(
    engine: Backend,
    q: str,
    *,
    want: int,
    limit: int = 10,
    limits: QueueLimits | None = NONE,
    timeout: float = 8.0,
) -> list[Claimed]:
    """Claim ``q`` (under limits unless ``limits`` is None) until ``want`` jobs came back or
    the deadline passed; answers every job claimed."""
    got: list[Claimed] = []
    deadline = time.monotonic() + timeout
    named = {q: limits} if limits is not None else None
    while len(got) < want and time.monotonic() < deadline:
        got += engine.claim([q], limit, 30, limits=named)
        if len(got) < want:
            time.sleep(0.1)
    return got


def settled_empty(engine: Backend, q: str, limits: QueueLimits | None = NONE) -> bool:
    """No claim of ``q`` gets anything for a while (longer than SQS's hold of refused jobs)."""
    return (
        claims(
            engine,
            q,
            want=1,
            limits=limits,
            timeout=3.0 if not engine.supports_time_travel else 0.3,
        )
        == []
    )


# -- pause ---------------------------------------------------------------------------------
def test_a_paused_queue_gives_nothing_to_any_claim_until_it_is_resumed(
    backend: str, engine: Backend
) -> None:
    ids = {e.job_id for e in queue.enqueue_many("mail", [1, 2, 3], backend=backend)}
    queue.pause("mail", backend=backend, reason="provider down")
    assert queue.is_paused("mail", backend=backend)
    assert engine.claim(["mail"], 10, 30) == []  # a worker that did not hear of the pause
    assert engine.claim(["mail"], 10, 30, limits={"mail": NONE}) == []
    queue.resume("mail", backend=backend)
    assert not queue.is_paused("mail", backend=backend)
    assert {c.job_id for c in claims(engine, "mail", want=3, limits=None)} == ids


def test_pausing_lets_jobs_in_flight_finish(backend: str, engine: Backend) -> None:
    queue.enqueue("mail", {}, backend=backend)
    running = claim_one(engine, "mail")
    queue.pause("mail", backend=backend)
    assert succeed(engine, running).state == "done"


def test_pause_resume_and_limits_are_audited_with_the_user_and_the_reason(
    backend: str, engine: Backend
) -> None:
    queue.pause("mail", backend=backend, reason="provider down", user="ops")
    queue.resume("mail", backend=backend, user="ops")
    queue.set_limits("mail", concurrency=2, backend=backend, user="ops")
    rows = list(audit_rows(engine).filter(queue="mail").order_by("id"))
    assert [(r.action, r.user) for r in rows] == [(PAUSE, "ops"), (RESUME, "ops"), (LIMITS, "ops")]
    assert rows[0].data == {"reason": "provider down"}
    assert rows[2].data == {"limits": "concurrency 2"}


def test_control_shows_who_paused_why_and_the_limits_in_force(
    backend: str, engine: Backend
) -> None:
    queue.pause("mail", backend=backend, reason="maintenance", user="ops")
    queue.set_limits("mail", concurrency=4, rate_limit=(10, 60), backend=backend)
    c = queue.control("mail", backend=backend)
    assert (c.paused, c.reason, c.paused_by, c.source) == (True, "maintenance", "ops", "live")
    assert c.limits == QueueLimits(concurrency=4, rate_limit=(10, 60.0))
    assert c.paused_at is not None and c.version == 2
    assert [x.queue for x in queue.controls(backend=backend)] == ["mail"]


# -- concurrency ---------------------------------------------------------------------------
def test_a_concurrency_limit_counts_the_jobs_in_flight_across_claims(
    backend: str, engine: Backend
) -> None:
    queue.enqueue_many("mail", list(range(6)), backend=backend)
    queue.set_limits("mail", concurrency=2, backend=backend)
    first = claims(engine, "mail", want=2)
    assert len(first) == 2
    assert settled_empty(engine, "mail")  # two in flight: full
    assert succeed(engine, first[0]).state == "done"  # an ack frees its slot at once
    assert len(claims(engine, "mail", want=1)) == 1
    assert settled_empty(engine, "mail")


def test_a_claim_that_does_not_know_of_the_limit_never_passes_it(
    backend: str, engine: Backend
) -> None:
    """A worker whose view is stale claims without ``limits``: the engine still holds the
    queue's live limits (the job table leaves the queue to a limited claim, the redis claim
    script applies them itself)."""
    queue.enqueue_many("mail", [1, 2, 3], backend=backend)
    queue.set_limits("mail", concurrency=1, backend=backend)
    wait = 0.5 if engine.supports_time_travel else SETTLE  # SQS: past LIMIT_HOLD
    stale = claims(engine, "mail", want=2, limits=None, timeout=wait)
    assert len(stale) <= 1
    limited = claims(engine, "mail", want=1 - len(stale), timeout=wait)
    assert len(stale) + len(limited) == 1
    assert settled_empty(engine, "mail")


def test_settings_defaults_hold_until_live_limits_replace_them(
    backend: str, engine: Backend, configure: Callable[..., None]
) -> None:
    configure(QUEUES={"mail": {"CONCURRENCY": 1}})
    defaults = QueueLimits(concurrency=1)
    queue.enqueue_many("mail", list(range(5)), backend=backend)
    assert queue.get_limits("mail", backend=backend) == defaults
    assert queue.control("mail", backend=backend).source == "settings"
    assert len(claims(engine, "mail", want=1, limits=defaults)) == 1
    assert settled_empty(engine, "mail", limits=defaults)
    queue.set_limits("mail", concurrency=3, backend=backend)
    assert len(claims(engine, "mail", want=2, limits=defaults)) == 2  # 3 in flight now
    assert queue.clear_limits("mail", backend=backend) == defaults
    assert queue.control("mail", backend=backend).source == "settings"


def test_lifting_every_limit_live_overrides_the_settings_defaults(
    backend: str, engine: Backend, configure: Callable[..., None]
) -> None:
    configure(QUEUES={"mail": {"CONCURRENCY": 1}})
    queue.enqueue_many("mail", list(range(3)), backend=backend)
    assert queue.set_limits("mail", backend=backend) == NONE
    assert queue.get_limits("mail", backend=backend) == NONE
    got = claims(engine, "mail", want=3, limits=QueueLimits(concurrency=1))
    assert len(got) == 3


@pytest.mark.requires("supports_time_travel")
def test_a_crashed_workers_slot_comes_back_when_its_lease_is_rescued(
    backend: str, engine: Backend
) -> None:
    queue.enqueue_many("mail", [1, 2], backend=backend)
    queue.set_limits("mail", concurrency=1, backend=backend)
    assert len(claims(engine, "mail", want=1)) == 1
    assert engine.claim(["mail"], 5, 30, limits={"mail": NONE}) == []
    moved = later(engine, 60)
    assert engine.rescue_expired(moved).repended == 1
    again = engine.claim(["mail"], 5, 30, now=moved, limits={"mail": NONE})
    assert len(again) == 1


def test_a_released_job_frees_its_slot_at_once(backend: str, engine: Backend) -> None:
    queue.enqueue("mail", {}, backend=backend)
    queue.set_limits("mail", concurrency=1, backend=backend)
    (held,) = claims(engine, "mail", want=1)
    assert ack(engine, held, outcome(held, lifecycle.Released())).state == "pending"
    (again,) = claims(engine, "mail", want=1)
    assert (again.job_id, again.attempt) == (held.job_id, 1)


# -- keys ----------------------------------------------------------------------------------
def test_key_concurrency_holds_per_key_and_never_for_jobs_without_a_key(
    backend: str, engine: Backend
) -> None:
    keys = ["a", "a", "a", "b", "b", None, None]
    queue.enqueue_many("mail", list(range(7)), concurrency_keys=keys, backend=backend)
    queue.set_limits("mail", key_concurrency=1, backend=backend)
    got = claims(engine, "mail", want=4)
    assert sorted((c.concurrency_key or "-") for c in got) == ["-", "-", "a", "b"]
    assert settled_empty(engine, "mail")
    done = next(c for c in got if c.concurrency_key == "a")
    succeed(engine, done)
    (next_a,) = claims(engine, "mail", want=1)
    assert next_a.concurrency_key == "a"


@pytest.mark.requires("supports_key_order")
def test_a_full_key_never_blocks_other_keys_queued_behind_it(backend: str, engine: Backend) -> None:
    """300 jobs of one tenant, then 2 of another: one claim takes the first tenant's head
    and the other tenant's job, though it is far past the first claim window."""
    queue.enqueue_many("mail", list(range(300)), concurrency_key="big", backend=backend)
    small = queue.enqueue_many("mail", [1, 2], concurrency_key="small", backend=backend)
    queue.set_limits("mail", key_concurrency=1, backend=backend)
    got = engine.claim(["mail"], 10, 30, limits={"mail": NONE})
    assert sorted(c.concurrency_key or "" for c in got) == ["big", "small"]
    assert small[0].job_id in {c.job_id for c in got}
    assert engine.claim(["mail"], 10, 30, limits={"mail": NONE}) == []


def test_concurrency_key_comes_from_the_job_definition(
    backend: str, engine: Backend, register: Callable[..., Any]
) -> None:
    by_tenant = register(lambda p: None, concurrency_key=lambda p: f"t{p['tenant']}")
    fixed = register(lambda p: None, concurrency_key="shared", queue=by_tenant.queue)
    a = by_tenant.enqueue({"tenant": 7}, backend=backend)
    b = fixed.enqueue({}, backend=backend)
    c = by_tenant.enqueue({"tenant": 7}, backend=backend, concurrency_key="override")
    keys = {
        i.job_id: i.concurrency_key for i in map(engine.get, [a.job_id, b.job_id, c.job_id]) if i
    }
    assert keys == {a.job_id: "t7", b.job_id: "shared", c.job_id: "override"}


@pytest.mark.parametrize("key", ["", 7, "x\x00y"])
def test_a_bad_concurrency_key_is_refused_and_writes_nothing(
    backend: str, engine: Backend, key: Any
) -> None:
    with pytest.raises(QueueError) as info:
        queue.enqueue("mail", {}, concurrency_key=key, backend=backend)
    assert info.value.code == ErrorCode.BAD_ARGUMENT
    assert engine.stats() == [] or all(sum(s.counts.values()) == 0 for s in engine.stats())


# -- rates ---------------------------------------------------------------------------------
def test_a_rate_limit_caps_the_starts_in_its_window(backend: str, engine: Backend) -> None:
    queue.enqueue_many("mail", list(range(6)), backend=backend)
    queue.set_limits("mail", rate_limit=(2, 60), backend=backend)
    first = claims(engine, "mail", want=2)
    assert len(first) == 2
    for c in first:
        succeed(engine, c)  # finishing frees no start: the window counts starts
    assert settled_empty(engine, "mail")


@pytest.mark.requires("supports_time_travel")
def test_a_rate_window_rolls(backend: str, engine: Backend) -> None:
    queue.enqueue_many("mail", list(range(6)), backend=backend)
    queue.set_limits("mail", rate_limit=(2, 10), backend=backend)
    t = engine.now()
    assert len(engine.claim(["mail"], 10, 30, now=t, limits={"mail": NONE})) == 2
    assert engine.claim(["mail"], 10, 30, now=later(engine, 9.9, t), limits={"mail": NONE}) == []
    assert (
        len(engine.claim(["mail"], 10, 30, now=later(engine, 10.1, t), limits={"mail": NONE})) == 2
    )


def test_a_key_rate_limit_holds_per_key(backend: str, engine: Backend) -> None:
    keys = ["a", "a", "a", "b", "b", "b"]
    queue.enqueue_many("mail", list(range(6)), concurrency_keys=keys, backend=backend)
    queue.set_limits("mail", key_rate_limit=(1, 60), backend=backend)
    got = claims(engine, "mail", want=2)
    assert sorted(c.concurrency_key or "" for c in got) == ["a", "b"]
    assert settled_empty(engine, "mail")


# -- bad input -----------------------------------------------------------------------------
BAD = [
    {"concurrency": 0},
    {"concurrency": -1},
    {"concurrency": True},
    {"concurrency": 1.5},
    {"key_concurrency": "3"},
    {"concurrency": 2**31},
    {"rate_limit": (0, 1)},
    {"rate_limit": (1, 0)},
    {"rate_limit": (1,)},
    {"rate_limit": 5},
    {"rate_limit": (1, "x")},
    {"key_rate_limit": (1, math.nan)},
    {"key_rate_limit": (1, math.inf)},
]


@pytest.mark.parametrize("bad", BAD, ids=lambda b: repr(b))
def test_a_bad_limit_is_refused_with_bad_limit_and_writes_nothing(
    backend: str, engine: Backend, bad: dict[str, Any]
) -> None:
    with pytest.raises(QueueError) as info:
        queue.set_limits("mail", backend=backend, **bad)
    assert info.value.code == ErrorCode.BAD_LIMIT
    assert engine.controls() == {}
    assert not audit_rows(engine).exists()
