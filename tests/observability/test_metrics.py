"""Prometheus metrics: counters from audit events, worker histograms, gauges at scrape time."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import RequestFactory
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest

from django_blamequeue import queue
from django_blamequeue.testing import wait_until
from tests.observability import handlers

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

ROOT = Path(__file__).resolve().parents[2]


def value(name: str, backend: str, queue_name: str = "obs", registry: Any = REGISTRY) -> float:
    found = registry.get_sample_value(name, {"backend": backend, "queue": queue_name})
    return float(found or 0.0)


@contextmanager
def worker(backend: str, queue_name: str = "obs", concurrency: int = 1) -> Iterator[None]:
    consumer = queue.consume(
        queue_name, None, backend=backend, poll_interval=0.05, concurrency=concurrency
    )
    try:
        yield
    finally:
        consumer.cancel(grace=5)
        consumer.join(10)


@pytest.fixture(autouse=True)
def _fast_retries(settings: Any) -> None:
    settings.BLAMEQUEUE = {**settings.BLAMEQUEUE, "BACKOFF_BASE": 0.01, "BACKOFF_MAX": 0.02}


NAMES = ["enqueued", "started", "succeeded", "failed", "retried", "dead_lettered"]


def counts(backend: str) -> dict[str, float]:
    found = {n: value(f"blamequeue_jobs_{n}_total", backend) for n in NAMES}
    found["run"] = value("blamequeue_job_run_seconds_count", backend)
    found["wait"] = value("blamequeue_job_wait_seconds_count", backend)
    return found


def total(name: str, backend: str) -> float:
    """A counter summed over every other label (flow events carry no queue)."""
    return sum(
        sample.value
        for family in REGISTRY.collect()
        for sample in family.samples
        if sample.name == name and sample.labels.get("backend") == backend
    )


FLOW_NAMES = ["fan_outs", "child_reports", "settles", "cascades"]


def test_flow_counters_follow_fan_out_reports_settle_and_cascade(
    metrics: Any, backend: str
) -> None:
    """One parent, four children: a refused child settles the flow fail-fast, which cascades
    a cancel to the child still running."""
    before = {n: total(f"blamequeue_flow_{n}_total", backend) for n in FLOW_NAMES}
    parent = handlers.Report.enqueue({}, backend=backend).job_id  # type: ignore[attr-defined]
    with worker(backend, concurrency=4):
        assert wait_until(
            lambda: getattr(queue.get_job(parent, backend=backend), "state", "") == "done", 20
        )
    delta = {n: total(f"blamequeue_flow_{n}_total", backend) - before[n] for n in FLOW_NAMES}
    info = queue.get_job(parent, backend=backend)
    assert info is not None and info.result["failed"] == 1
    assert (delta["fan_outs"], delta["settles"]) == (1, 1)
    assert delta["cascades"] >= 1
    assert 1 <= delta["child_reports"] <= 4  # the settle may come before the late reports


def test_a_skipped_outbox_row_is_counted(metrics: Any, backend: str) -> None:
    from django_blamequeue.backends import get_backend
    from django_blamequeue.models import OutboxEntry
    from django_blamequeue.relay.outbox import Relay, database_of

    db = database_of(get_backend(backend))
    name = "blamequeue_outbox_skipped_total"
    labels = {"backend": "nowhere", "kind": "report"}
    before = REGISTRY.get_sample_value(name, labels) or 0.0
    OutboxEntry.objects.using(db).create(kind="report", backend="nowhere", job_id="x", body={})
    assert Relay(databases=[db]).run_once().skipped == 1
    assert (REGISTRY.get_sample_value(name, labels) or 0.0) - before == 1


def test_counters_and_histograms_follow_the_lifecycle(metrics: Any, backend: str) -> None:
    before = counts(backend)
    handlers.ok.enqueue({"n": 1}, backend=backend)
    handlers.boom.enqueue({"n": 2}, backend=backend)  # two failed attempts, then the DLQ
    want = {
        "enqueued": 2,
        "started": 3,
        "succeeded": 1,
        "failed": 2,
        "retried": 1,
        "dead_lettered": 1,
        "run": 3,
        "wait": 3,
    }
    with worker(backend):
        done = wait_until(
            lambda: all(counts(backend)[k] - before[k] >= n for k, n in want.items()), timeout=15
        )
    delta = {k: counts(backend)[k] - before[k] for k in want}
    assert done and delta == want


def test_unique_conflicts_are_counted_by_what_they_did(metrics: Any, backend: str) -> None:
    outcomes = ("skip", "replace", "debounce")

    def seen() -> dict[str, float]:
        name = "blamequeue_unique_conflicts_total"
        labels = {"backend": backend, "queue": "obs"}
        return {
            o: REGISTRY.get_sample_value(name, {**labels, "outcome": o}) or 0.0 for o in outcomes
        }

    before = seen()
    specs = [
        {"key": "s"},
        {"key": "r", "on_conflict": "replace"},
        {"key": "d", "on_conflict": "debounce", "window": 60},
    ]
    for spec in specs:
        for n in range(2):  # the second call of each key is absorbed by the first
            queue.enqueue("obs", {"n": n}, unique=spec, backend=backend)
    assert {o: seen()[o] - before[o] for o in outcomes} == dict.fromkeys(outcomes, 1)


def test_a_lease_lost_or_a_refused_ack_counts_as_lock_lost(metrics: Any, backend: str) -> None:
    from django_blamequeue.backends import get_backend
    from django_blamequeue.core.records import Ack, Transition
    from django_blamequeue.core.states import State

    before = value("blamequeue_lock_lost_total", backend, "")
    job_id = handlers.ok.enqueue({}, backend=backend).job_id
    b = get_backend(backend)
    [claimed] = b.claim(["obs"], 1, 30)
    b.apply_many([Ack(job_id=job_id, token="stale", transition=Transition(state=State.DONE))])
    assert claimed.job_id == job_id
    assert value("blamequeue_lock_lost_total", backend, "") == before + 1


def test_gauges_report_depth_per_state_and_oldest_pending_age(metrics: Any, backend: str) -> None:
    for i in range(2):
        queue.enqueue("depth", {"i": i}, backend=backend)
    queue.enqueue("depth", {}, backend=backend, delay=3600)
    text = generate_latest(metrics.registry()).decode()
    line = f'blamequeue_queue_jobs{{backend="{backend}",queue="depth",state="pending"}} 3.0'
    assert line in text
    assert f'blamequeue_queue_jobs{{backend="{backend}",queue="depth",state="done"}} 0.0' in text
    age = REGISTRY.get_sample_value(
        "blamequeue_queue_oldest_pending_seconds", {"backend": backend, "queue": "depth"}
    )
    assert age is not None and 0.0 <= age < 60


def test_the_django_view_serves_the_exposition_format(metrics: Any, backend: str) -> None:
    handlers.ok.enqueue({}, backend=backend)
    response = metrics.metrics_view(RequestFactory().get("/metrics"))
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    body = response.content.decode()
    assert "blamequeue_jobs_enqueued_total" in body and "blamequeue_queue_jobs" in body


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_serve_answers_metrics_over_http(metrics: Any, backend: str) -> None:
    server = metrics.serve(0, "127.0.0.1")
    try:
        port = server.server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            body = r.read().decode()
    finally:
        server.shutdown()
        server.server_close()
    assert "blamequeue_jobs_started_total" in body or "blamequeue_job_run_seconds" in body
    assert "blamequeue_queue_jobs" in body


def test_runworker_metrics_port_serves_on_loopback_only_while_it_runs(backend: str) -> None:
    import io

    from django_blamequeue.observability import metrics

    handlers.ok.enqueue({}, backend=backend)
    port = free_port()
    out = io.StringIO()
    try:
        call_command(
            "runworker",
            "obs",
            "--backend",
            backend,
            "--burst",
            "--no-sweep",
            "--metrics-port",
            str(port),  # no --metrics-address: this host only
            stdout=out,
            stderr=io.StringIO(),
        )
    finally:
        metrics.disable()
    assert f"metrics  http://127.0.0.1:{port}/metrics" in out.getvalue()
    with pytest.raises(OSError):  # shut down with the worker
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)


@pytest.mark.slow
def test_worker_processes_share_counters_through_the_multiprocess_dir(
    backend: str, tmp_path: Path, settings: Any
) -> None:
    from prometheus_client import multiprocess

    from tests.tasks.config import tasks_setting

    settings.TASKS = tasks_setting(backend)
    from tests.tasks import sample

    directory = tmp_path / "prom"
    directory.mkdir()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.tasks.worker_settings",
        "BLAMEQUEUE_TEST_SUBPROCESS": "1",
        "BLAMEQUEUE_TEST_TASKS_BACKEND": backend,
        "PROMETHEUS_MULTIPROC_DIR": str(directory),
    }
    for batch in (3, 2):  # two worker processes, one after the other
        for i in range(batch):
            sample.add.enqueue(i, i)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "django",
                "runworker",
                "tasks",
                "--backend",
                backend,
                "--burst",
                "--no-sweep",
                "--metrics-port",
                str(free_port()),
                "--metrics-address",
                "127.0.0.1",
            ],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
            timeout=60,
        )
    assert len(list(directory.glob("counter_*.db"))) == 2  # one file per process
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(directory))  # type: ignore[no-untyped-call]
    assert value("blamequeue_jobs_succeeded_total", backend, "tasks", registry) == 5
    assert value("blamequeue_job_run_seconds_count", backend, "tasks", registry) == 5


def test_an_expired_job_and_a_skipped_schedule_fire_are_counted(metrics: Any, backend: str) -> None:
    from datetime import UTC, datetime, timedelta

    from django_blamequeue.backends import get_backend
    from django_blamequeue.models import Schedule
    from django_blamequeue.sweeper.scheduler import Scheduler

    engine = get_backend(backend)
    expired = value("blamequeue_jobs_expired_total", backend)
    skips = value("blamequeue_schedule_skips_total", backend)
    queue.enqueue("obs", {}, expires=60, backend=backend)
    assert len(engine.expire(now=engine.now() + timedelta(seconds=61))) == 1
    assert value("blamequeue_jobs_expired_total", backend) - expired == 1
    t0 = datetime(2024, 1, 1, tzinfo=UTC)
    Schedule.objects.using(engine.db).create(  # type: ignore[attr-defined]
        name="obs-hourly", job=handlers.ok.name, interval=3600.0, last_fired_at=t0, backend=backend
    )
    sched = Scheduler(database=engine.db)  # type: ignore[attr-defined]
    assert sched.run_once(t0 + timedelta(hours=1))["fired"] == 1
    assert sched.run_once(t0 + timedelta(hours=2))["skipped"] == 1  # the first still waits
    assert value("blamequeue_schedule_skips_total", backend) - skips == 1
