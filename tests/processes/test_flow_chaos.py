"""Flow chaos : workers and sweepers SIGKILLed at random while 20 flows of 50
children run on PostgreSQL — "fail" flows (most with a failing child), "continue" flows (some
cancelled half way), and one flow of flows.

Afterwards: every flow settled; ``collect`` ran once per flow (a second run is only ever the
re-run of an attempt whose worker was killed between the collect's commit and its ack — the
at-least-once delivery every job has, absorbed by the effect's unique id); no child stored its
effect after a cascade reached it; every report was recorded; the outbox drained to empty.
"""

from __future__ import annotations

import random
import time
from typing import Any

import pytest
from django.db.models import Q

from django_blamequeue import queue
from django_blamequeue.models import AuditEvent, FlowDependency, Job, OutboxEntry
from tests.procapp.flowjobs import PAGES, PARENTS, Continue, FailFast, Nested
from tests.procapp.models import Redelivery, SideEffect

from .conftest import Proc, Processes, Report, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, databases="__all__")]

DB = "postgres"
CHILDREN = 50
KILL_EVERY = 1.0  # seconds at least between kills; a victim is one of the processes that are up
KILL_AFTER = 20  # jobs finished at least between kills
LEASE = "2"
OVERRIDES = {"MAX_STALLED_COUNT": 10_000, "SWEEP_INTERVAL": 0.5, "FLOW_SWEEP_INTERVAL": 1.0}
CASCADED = Q(
    action__in=["system.queue.cancel", "system.queue.cancel.requested"], data__cascade=True
)


@pytest.fixture
def needs_postgres() -> None:
    from tests.conftest import need_server

    need_server("postgres")


def tally() -> dict[str, Any]:
    jobs = Job.objects.using(DB).order_by()
    parents = jobs.filter(flow_phase__isnull=False).values_list("state", flat=True)
    children = jobs.filter(flow_phase__isnull=True).values_list("state", flat=True)
    return {
        "parents": {s: list(parents).count(s) for s in set(parents)},
        "children": {s: list(children).count(s) for s in set(children)},
        "outbox": OutboxEntry.objects.using(DB).count(),
        "unreported": FlowDependency.objects.using(DB).filter(status="pending").count(),
    }


def waiting(parent_ids: list[str]) -> bool:
    rows = Job.objects.using(DB).filter(id__in=parent_ids, state="waiting_children")
    return rows.count() == len(parent_ids)


def plan(rng: random.Random) -> dict[str, Any]:
    """20 flows: 9 "fail" (6 with a failing child), 10 "continue" (0-5 failing), 1 nested."""

    def pages(failing: int, n: int = CHILDREN) -> dict[str, Any]:
        return {
            "ms": [rng.randint(30, 150) for _ in range(n)],
            "fail": rng.sample(range(n), failing),
        }

    flows: dict[str, Any] = {}
    for i in range(9):
        flows[f"fail-{i}"] = (FailFast, pages(1 if i < 6 else 0))
    for i in range(10):
        flows[f"continue-{i}"] = (Continue, pages(rng.randint(0, 5)))
    flows["nested"] = (Nested, {"chunks": [pages(1 if c == 0 else 0, 10) for c in range(5)]})
    return flows


def test_flows_survive_workers_and_sweepers_killed_at_random(
    needs_postgres: None, processes: Processes, report: Report
) -> None:
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    flows = plan(rng)
    ids = {name: cls.enqueue(payload, backend=DB).job_id for name, (cls, payload) in flows.items()}
    to_cancel = [ids["continue-8"], ids["continue-9"]]

    def worker() -> Proc:
        return processes.spawn(
            "runworker",
            PARENTS,
            PAGES,
            "--backend",
            DB,
            "--concurrency",
            "8",
            "--lease",
            LEASE,
            overrides=OVERRIDES,
        )

    def sweeper() -> Proc:
        return processes.spawn("runsweeper", overrides=OVERRIDES)

    pool = [worker(), worker(), worker(), sweeper()]
    killed: set[int] = set()
    kills = {"runworker": 0, "runsweeper": 0}
    roots = Job.objects.using(DB).filter(id__in=list(ids.values()))
    start = time.monotonic()
    cancelled: list[str] = []
    finished = Job.objects.using(DB).filter(state__in=["done", "failed", "cancelled"])
    next_kill, progress = start + KILL_EVERY, 0
    while roots.exclude(state__in=["done", "cancelled"]).exists():
        assert time.monotonic() - start < 150, f"flows did not settle (seed {seed}): {tally()}"
        time.sleep(0.1)
        if not cancelled and waiting(to_cancel) and SideEffect.objects.using(DB).count() > 200:
            cancelled = [p for p in to_cancel if queue.cancel(p, backend=DB)]
        # Self-paced: a kill needs the interval to pass and the flows to have moved on since
        # the last one, so a slow (shared, loaded) machine gets fewer kills, not a hang.
        if time.monotonic() < next_kill or finished.count() < progress + KILL_AFTER:
            continue
        up = [i for i, p in enumerate(pool) if p.name.split("-")[0] in p.stdout()]
        if not up:
            continue
        next_kill, progress = time.monotonic() + KILL_EVERY, finished.count()
        i = rng.choice(up)
        kind = pool[i].name.split("-")[0]
        pool[i].kill()
        killed.add(pool[i].pid)
        kills[kind] += 1
        pool[i] = worker() if kind == "runworker" else sweeper()
    settled = time.monotonic() - start

    # No more kills: what is left (late reports, cascades in flight) must drain by itself.
    deps = FlowDependency.objects.using(DB).filter(kind="child")
    drained = wait_for(
        lambda: (
            not OutboxEntry.objects.using(DB).exists()
            and not deps.filter(status="pending").exists()
            and not Job.objects.using(DB)
            .exclude(state__in=["done", "failed", "cancelled"])
            .exists()
        ),
        60,
        f"outbox / reports / children not drained (seed {seed})",
    )
    for p in pool:
        p.stop()

    parents = Job.objects.using(DB).filter(flow_phase__isnull=False)
    assert parents.count() == 20 + 5
    assert set(parents.values_list("state", flat=True)) <= {"done", "cancelled"}
    done = set(parents.filter(state="done").values_list("id", flat=True))
    gone = set(parents.filter(state="cancelled").values_list("id", flat=True))
    assert gone <= set(cancelled), f"only the cancelled flows may end cancelled (seed {seed})"

    # collect: one stored effect per collected flow, none for a cancelled one; a second run only
    # ever follows a kill of the worker whose run stored the effect.
    collected = set(
        SideEffect.objects.using(DB).filter(job_id__in=done | gone).values_list("job_id", flat=True)
    )
    assert collected == done
    recollects = list(Redelivery.objects.using(DB).filter(job_id__in=done))
    assert all(r.first_pid in killed for r in recollects), f"collect ran twice (seed {seed})"

    # outcomes: every planned failure is seen, nothing else fails
    for name, (_, payload) in flows.items():
        info = queue.get_job(ids[name], backend=DB)
        assert info is not None
        if info.state == "cancelled":
            continue
        r = info.result
        if name.startswith("continue"):
            assert (r["failed"], r["completed"], r["cancelled"], r["pending"]) == (
                len(payload["fail"]),
                CHILDREN - len(payload["fail"]),
                0,
                0,
            ), (name, seed)
        elif name.startswith("fail"):
            assert r["failed"] == len(payload["fail"]), (name, seed)
            if not payload["fail"]:
                assert r["completed"] == CHILDREN
        else:
            assert r["completed"] == 5 and r["results"]["c0"]["failed"] == 1, seed

    # no child stored its effect after a cascade reached it
    reached = {
        e.job_id: e.created_at.timestamp()
        for e in AuditEvent.objects.using(DB).filter(CASCADED).order_by("-id")
    }
    late = [
        e.job_id
        for e in SideEffect.objects.using(DB).filter(job_id__in=list(reached))
        if e.host_clock >= reached[e.job_id]
    ]
    assert late == [], f"children ran after their flow was cancelled (seed {seed})"
    assert (
        not Redelivery.objects.using(DB)
        .filter(job_id__in=list(reached))
        .exclude(first_pid__in=killed)
        .exists()
    )

    children = Job.objects.using(DB).filter(parent_id__isnull=False, flow_phase__isnull=True)
    reruns = Redelivery.objects.using(DB).exclude(job_id__in=done)
    rerun, unkilled = reruns.count(), reruns.exclude(first_pid__in=killed).count()
    report(
        "flow chaos[postgres]",
        flows=20,
        children=children.count(),
        kills=sum(kills.values()),
        worker_kills=kills["runworker"],
        sweeper_kills=kills["runsweeper"],
        cancelled_by_hand=len(cancelled),
        cascade_cancelled=len(reached),
        child_reruns_after_kills=rerun - unkilled,
        child_reruns_without_a_kill=unkilled,
        collect_reruns_after_kills=len(recollects),
        late_children=len(late),
        outbox_left=OutboxEntry.objects.using(DB).count(),
        settled_in=f"{settled:.1f} s",
        drained_after=f"{drained:.1f} s",
        seed=str(seed),
    )
