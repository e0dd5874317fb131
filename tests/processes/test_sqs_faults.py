"""SQS under faults, with worker processes on a real moto_server: a duplicate delivery, the
outbox relay killed after its send (and a committing process killed before it), moto stopped
and restarted empty mid-run, and workers SIGKILLed at random while they drain.

The ledger is what keeps each job run once: SQS redelivers (visibility ran out, a relay sent
twice, a queue was recreated), and every second delivery meets the ledger's lease token.
"""

from __future__ import annotations

import itertools
import json
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db.models import Count, Sum
from pytest_django import Settings as SettingsWrapper

from django_blamequeue import audit, queue
from django_blamequeue.backends import get_backend
from django_blamequeue.backends.sqs import SqsBackend
from django_blamequeue.exceptions import ErrorCode, QueueError
from django_blamequeue.models import AuditEvent, OutboxEntry, SqsJob
from django_blamequeue.relay.outbox import Relay
from tests.conftest import need_server
from tests.procapp.jobs import QUEUE
from tests.procapp.models import SideEffect
from tests.servers import MotoServer

from .conftest import Proc, Processes, Report, redeliveries, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, databases="__all__")]

_runs = itertools.count()


@pytest.fixture
def sqs(settings: SettingsWrapper) -> Iterator[dict[str, Any]]:
    """Settings for this test and its workers: the "sqs" backend on a queue prefix of its
    own, sweeping often. Yields the ``BLAMEQUEUE`` overrides to hand to worker processes."""
    need_server("sqs")
    yield _configure(settings)


@pytest.fixture
def sqs_on_postgres(settings: SettingsWrapper) -> Iterator[dict[str, Any]]:
    """As ``sqs``, with the ledger on PostgreSQL (row locks, not SQLite's one write lock)."""
    need_server("sqs")
    need_server("postgres")
    yield _configure(settings, DATABASE="postgres")


def _configure(settings: SettingsWrapper, **options: Any) -> dict[str, Any]:
    entry = dict(settings.BLAMEQUEUE["BACKENDS"]["sqs"])
    entry.update(QUEUE_PREFIX=f"{entry['QUEUE_PREFIX']}f{next(_runs)}-", SEND_GRACE=1.0, **options)
    overrides = {
        "BACKENDS": {**settings.BLAMEQUEUE["BACKENDS"], "sqs": entry},
        "SWEEP_INTERVAL": 0.5,
    }
    settings.BLAMEQUEUE = {**settings.BLAMEQUEUE, **overrides}
    return overrides


def backend() -> SqsBackend:
    b = get_backend("sqs")
    assert isinstance(b, SqsBackend)
    return b


def ledger(db: str | None = None) -> Any:
    return SqsJob.objects.using(db or backend().db).filter(queue=QUEUE)


def states() -> dict[str, int]:
    return dict(ledger().order_by().values_list("state").annotate(n=Count("id")))


def messages(dlq: bool = False) -> int:
    """Messages SQS holds for the queue (visible, hidden and delayed)."""
    t = backend().transport
    info = t.queue(QUEUE)
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    names.append("ApproximateNumberOfMessagesDelayed")
    attrs = t.client.get_queue_attributes(
        QueueUrl=info.dlq_url if dlq else info.url, AttributeNames=names
    )["Attributes"]
    return sum(int(attrs[n]) for n in names)


def worker(processes: Processes, overrides: dict[str, Any], *args: str) -> Proc:
    return processes.worker("sqs", "--poll", "0.2", *args, overrides=overrides)


def run(processes: Processes, overrides: dict[str, Any], *args: str) -> str:
    """A command to completion, with this test's settings."""
    env = {"BLAMEQUEUE_TEST_OVERRIDES": json.dumps(overrides)}
    return processes.run(*args, extra_env=env, timeout=300)


def breaker() -> str:
    return next(b["breaker_state"] for b in queue.list_backends() if b["name"] == "sqs")


# -- (1) duplicate delivery -------------------------------------------------------------------
def test_a_duplicate_delivery_refuses_the_late_ack_and_a_job_always_stalling_ends_in_the_dlq(
    sqs_on_postgres: dict[str, Any], processes: Processes, report: Report
) -> None:
    """Lease 1 s (visibility 2 s); the handler holds its worker 4 s without a heartbeat. The
    lease is rescued and another worker runs the job; the first worker's late ack is refused.
    ``once`` stalls on its first attempt only; ``always`` on every one, until the stall cap
    (``MAX_STALLED_COUNT`` 2 here: a loaded machine may stall a quick attempt on a 1 s lease
    too) fails it into the DLQ.

    A held handler keeps its whole worker from running Python (the GIL), the worker's own
    sweeper included, and all three workers may be held at once: were no process left to
    rescue an expired lease, a held attempt would ack with its still-current token and the
    job would end done. So a ``runsweeper`` process, up before the first job, rescues them
    (as in a deployment that runs one): every held attempt is rescued in the 3 s between
    its lease's end and its hold's. The ledger is on PostgreSQL: on SQLite a worker frozen
    while one of its threads (the registry's, say) is inside a write holds the database's
    only write lock, and nothing can be rescued until it thaws (docs/operations.md)."""
    overrides = {**sqs_on_postgres, "MAX_STALLED_COUNT": 2}
    sweeper = processes.spawn("runsweeper", overrides=overrides)
    pool = [worker(processes, overrides, "--concurrency", "1", "--lease", "1") for _ in range(3)]
    wait_for(lambda: "runsweeper" in sweeper.stdout(), 60, "the sweeper's banner")
    for w in pool:
        w.wait_started(60)
    hold = {"hold_gil": 4}
    once = queue.enqueue(
        QUEUE, {**hold, "hold_attempts": 1}, name="procapp.effect", backend="sqs", max_attempts=5
    ).job_id
    always = queue.enqueue(
        QUEUE, {**hold, "hold_attempts": 99}, name="procapp.effect", backend="sqs", max_attempts=5
    ).job_id
    start = time.monotonic()

    def row(job_id: str) -> dict[str, Any]:
        return dict(ledger().filter(id=job_id).values().get())

    wait_for(lambda: row(once)["state"] == "done", 120, "the first job done")
    wait_for(lambda: row(always)["state"] == "failed", 120, "the second job in the DLQ")
    # The stale worker either acks late and is refused (LOCK_LOST), or its heartbeat finds the
    # lease gone first and it abandons the run: which comes first after the 3 s hold is a race,
    # and neither lets it change the job.
    refused, abandoned = f"ack refused for job {once}", f"lost the lease of job {once}"

    def stale_noticed() -> bool:
        return processes.stderr_count(refused) + processes.stderr_count(abandoned) >= 1

    wait_for(stale_noticed, 30, "the stale worker to be refused or to abandon its run")
    wait_for(lambda: messages(dlq=True) == 1, 10, "the DLQ copy in SQS")
    elapsed = time.monotonic() - start
    first, last = row(once), row(always)
    effects = list(SideEffect.objects.using(backend().db).filter(job_id__in=[once, always]))
    lock_lost = AuditEvent.objects.using(backend().db).filter(action=audit.LOCK_LOST)
    report(
        "sqs-duplicate-delivery",
        lease="1 s (visibility 2 s)",
        handler="4 s without a heartbeat",
        runs_of_the_job=first["attempts"],
        side_effects=sum(e.job_id == once for e in effects),
        late_acks_refused=processes.stderr_count("ack refused for job"),
        stale_runs_abandoned=processes.stderr_count("lost the lease of job"),
        stalling_job=f"{last['state']} ({last['reason']}) after {last['attempts']} runs",
        sqs_receives_of_its_message=last["receive_count"],
        dlq_copies_in_sqs=messages(dlq=True),
        s=elapsed,
    )
    assert first["attempts"] >= 2 and first["stalls"] >= 1
    assert [e.job_id for e in effects] == [once] and redeliveries(backend().db) == []
    if processes.stderr_count(refused):
        assert lock_lost.filter(job_id=once).count() >= 1
    assert (last["reason"], last["stalls"]) == ("stalled", 3)
    for w in [*pool, sweeper]:
        assert w.alive(), w.tail()
        assert w.stop() == 0


# -- (2) the relay killed after its send; a commit killed before its relay ----------------------
RELAY_KILLS = 100
COMMIT_KILLS = 20


def test_a_relay_killed_after_its_send_loses_nothing_and_duplicates_run_once(
    sqs: dict[str, Any], processes: Processes, report: Report
) -> None:
    start = time.monotonic()
    out = run(processes, sqs, "sqskill", "relay", "--times", str(RELAY_KILLS))
    assert f"kills={RELAY_KILLS}" in out
    db = backend().db
    unsent_outbox = OutboxEntry.objects.using(db).filter(sent_at__isnull=True).count()
    unmarked = ledger().filter(sent_at__isnull=True).count()
    assert (unsent_outbox, unmarked, ledger().count()) == (0, RELAY_KILLS, RELAY_KILLS)
    assert messages() == RELAY_KILLS  # each was sent, just not recorded as sent
    # The send step, past SEND_GRACE, sends every unrecorded one again: a duplicate each.
    wait_for(lambda: backend().send_due() == 0 and unrecorded() == 0, 30, "the send step")
    duplicates = messages() - RELAY_KILLS
    pool = [worker(processes, sqs, "--concurrency", "4", "--lease", "5") for _ in range(2)]
    wait_for(lambda: states() == {"done": RELAY_KILLS} and messages() == 0, 120, "the drain")
    effects = SideEffect.objects.using(db).filter(job_id__in=ledger().values("id")).count()
    runs = ledger().aggregate(n=Sum("attempts"))["n"]
    report(
        "sqs-relay-killed-after-send",
        kills=RELAY_KILLS,
        unsent_outbox_rows=unsent_outbox,
        duplicate_messages=duplicates,
        jobs_done=states().get("done", 0),
        runs=runs,
        done_twice=len(redeliveries(db)),
        s=time.monotonic() - start,
    )
    assert duplicates == RELAY_KILLS
    assert effects == RELAY_KILLS and runs == RELAY_KILLS and redeliveries(db) == []
    for w in pool:
        assert w.stop() == 0


def unrecorded() -> int:
    n: int = ledger().filter(state="pending", sent_at__isnull=True).count()
    return n


def test_a_process_killed_after_commit_before_its_relay_still_delivers_each_job_once(
    sqs: dict[str, Any], processes: Processes, report: Report
) -> None:
    out = run(processes, sqs, "sqskill", "commit", "--times", str(COMMIT_KILLS))
    assert f"kills={COMMIT_KILLS}" in out
    db = backend().db
    waiting = OutboxEntry.objects.using(db).filter(sent_at__isnull=True, backend="sqs")
    assert waiting.count() == COMMIT_KILLS and ledger().count() == 0  # committed, never relayed
    relayed = Relay().run_once()  # what the sweeper's relay does on its next pass
    assert (relayed.sent, waiting.count()) == (COMMIT_KILLS, 0)
    pool = [worker(processes, sqs, "--concurrency", "4", "--lease", "5")]
    wait_for(lambda: states() == {"done": COMMIT_KILLS}, 60, "the jobs done")
    runs = ledger().aggregate(n=Sum("attempts"))["n"]
    effects = SideEffect.objects.using(db).filter(job_id__in=ledger().values("id")).count()
    report(
        "sqs-commit-killed-before-relay",
        kills=COMMIT_KILLS,
        delivered=states().get("done", 0),
        runs=runs,
        done_twice=len(redeliveries(db)),
    )
    assert runs == COMMIT_KILLS and effects == COMMIT_KILLS and redeliveries(db) == []
    assert pool[0].stop() == 0


# -- (3) moto stopped mid-run -----------------------------------------------------------------
@pytest.fixture
def own_moto(tmp_path: Path) -> Iterator[MotoServer]:
    server = MotoServer(tmp_path / "moto")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_sqs_stopped_mid_run_opens_the_breaker_and_workers_recover_when_it_returns(
    settings: SettingsWrapper, own_moto: MotoServer, processes: Processes, report: Report
) -> None:
    need_server("sqs")
    overrides = _configure(settings, ENDPOINT_URL=own_moto.url)
    n_jobs = 300
    queue.enqueue_many(
        QUEUE, [{"sleep": 0.02}] * n_jobs, name="procapp.effect", backend="sqs", max_attempts=20
    )
    pool = [worker(processes, overrides, "--concurrency", "4", "--lease", "10") for _ in range(2)]
    wait_for(lambda: states().get("done", 0) >= 50, 60, "a first part drained")
    own_moto.stop(kill=True)
    down_at = time.monotonic()
    failures = 0
    while breaker() != "open":
        with pytest.raises(QueueError) as caught:
            queue.enqueue(QUEUE, {}, name="procapp.effect", backend="sqs")
        assert caught.value.code == ErrorCode.BACKEND_UNAVAILABLE
        failures += 1
        assert failures < 20
    t0 = time.monotonic()
    with pytest.raises(QueueError) as fast:
        queue.enqueue(QUEUE, {}, name="procapp.effect", backend="sqs")
    fast_ms = (time.monotonic() - t0) * 1000
    assert fast.value.code == ErrorCode.BACKEND_UNAVAILABLE and "circuit open" in str(fast.value)
    assert ledger().count() == n_jobs  # the refused enqueues wrote nothing
    wait_for(lambda: processes.stderr_count("backend 'sqs'") >= 2, 30, "workers backing off")
    time.sleep(2)  # an outage a few seconds long
    own_moto.start()  # empty: queues and messages are gone
    up_at = time.monotonic()
    wait_for(lambda: states() == {"done": n_jobs}, 180, "the drain after the restart")
    recovered = time.monotonic() - up_at
    db = backend().db
    effects = SideEffect.objects.using(db).filter(job_id__in=ledger().values("id")).count()
    report(
        "sqs-moto-restart",
        jobs=n_jobs,
        outage=f"{up_at - down_at:.1f} s",
        breaker_open_after=f"{failures} failed enqueues",
        fast_fail=f"{fast_ms:.1f} ms",
        workers_that_recreated_the_queue=processes.stderr_count("is gone; recreating"),
        drained_after_restart=f"{recovered:.1f} s",
        lost=n_jobs - effects,
        done_twice=len(redeliveries(db)),
    )
    assert effects == n_jobs and redeliveries(db) == []
    for w in pool:
        assert w.alive(), w.tail()
        assert w.stop() == 0


# -- (4) chaos --------------------------------------------------------------------------------
KILL_EVERY = 4  # jobs the fleet finishes between two kills (at most one kill per half second)
STUCK = 60.0  # seconds without a job done: the fleet is stuck, not slow


def test_workers_killed_at_random_on_sqs_lose_no_job_and_do_none_twice(
    sqs: dict[str, Any], processes: Processes, report: Report
) -> None:
    n_jobs, n_workers = 300, 2
    overrides = {**sqs, "MAX_STALLED_COUNT": 10_000}
    queue.enqueue_many(
        QUEUE,
        [{"i": i} for i in range(n_jobs)],
        name="procapp.effect",
        backend="sqs",
        max_attempts=10_000,
    )
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)

    def spawn() -> Proc:
        return worker(processes, overrides, "--concurrency", "4", "--lease", "2")

    pool = [spawn() for _ in range(n_workers)]
    killed: set[int] = set()
    start = progress_at = time.monotonic()
    n_done = done_at_kill = 0
    while n_done < n_jobs:
        time.sleep(0.5)
        now, was, n_done = time.monotonic(), n_done, states().get("done", 0)
        if n_done > was:
            progress_at = now
        assert now - progress_at < STUCK, f"no job done for {STUCK} s (seed {seed}): {states()}"
        # A kill every half second at most, and only once the fleet did more since the last
        # one: on a slow machine a worker takes seconds to start, and kills paced by the clock
        # alone would leave it no time to run anything (the test is about kills, not speed).
        i = rng.randrange(len(pool))
        if n_done < done_at_kill + KILL_EVERY or not pool[i].started():
            continue
        pool[i].kill()
        killed.add(pool[i].pid)
        done_at_kill = n_done
        pool[i] = spawn()
    elapsed = time.monotonic() - start
    for w in pool:
        w.kill()
    db = backend().db
    done = set(ledger().filter(state="done").values_list("id", flat=True))
    effect_ids = set(SideEffect.objects.using(db).values_list("job_id", flat=True))
    again = redeliveries(db)
    done_twice = [r for r in again if r.first_pid not in killed]
    rescued = ledger().aggregate(n=Sum("stalls"))["n"] or 0
    report(
        "chaos[sqs]",
        jobs=n_jobs,
        workers=n_workers,
        kills=len(killed),
        lost=n_jobs - len(done & effect_ids),
        done_twice=len(done_twice),
        redelivered_after_a_kill=len(again) - len(done_twice),
        leases_rescued=rescued,
        seed=str(seed),
        s=elapsed,
    )
    assert states() == {"done": n_jobs}
    assert len(done & effect_ids) == n_jobs
    assert done_twice == []
    assert len(killed) >= 3 and rescued > 0
