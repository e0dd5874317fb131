"""The console's chart buckets (``record_samples``, ``buckets``, ``prune_buckets``): counts and
histograms added up per (queue, job name) in buckets of the engine's clock, at every
resolution, bounded by their window."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest

from django_blamequeue import queue
from django_blamequeue.audit import CONSUME_FAILURE, CONSUME_SUCCESS
from django_blamequeue.backends.base import Backend
from django_blamequeue.core.timeseries import (
    RESOLUTIONS,
    SLOTS,
    Bucket,
    Sample,
    floor,
    histogram,
)
from django_blamequeue.sweeper.depths import Depths
from django_blamequeue.testing import capture_events

from .support import later


def sample(queue: str = "emails", name: str = "send", **counts: int) -> Sample:
    return Sample(
        queue=queue,
        name=name,
        wait=histogram([0.02] * counts.get("done", 0)),
        run=histogram([3.0] * counts.get("done", 0)),
        **counts,
    )


def read(engine: Backend, step: int, t: datetime, **filters: str) -> list[Bucket]:
    since = floor(t, step)
    return engine.buckets(step, since, since + timedelta(seconds=step), **filters)


def test_samples_add_up_in_the_bucket_of_the_engines_now_at_every_resolution(
    backend: str, engine: Backend
) -> None:
    t = later(engine, 0)
    engine.record_samples([sample(done=3, failed=1)], now=t)
    engine.record_samples([sample(done=2, retried=4), sample(done=1)], now=t)
    for r in RESOLUTIONS:
        (b,) = read(engine, r.step, t)
        assert (b.queue, b.name, b.step, b.start) == ("emails", "send", r.step, floor(t, r.step))
        assert (b.done, b.failed, b.retried, b.cancelled) == (6, 1, 4, 0)
        assert b.wait == histogram([0.02] * 6) and b.run == histogram([3.0] * 6)
        assert len(b.wait) == SLOTS and b.depth is None


def test_a_later_minute_is_a_bucket_of_its_own(backend: str, engine: Backend) -> None:
    t = floor(later(engine, 0), 3600) + timedelta(minutes=10)
    engine.record_samples([sample(done=1)], now=t)
    engine.record_samples([sample(done=5)], now=t + timedelta(minutes=1))
    since = floor(t, 60)
    found = engine.buckets(60, since, since + timedelta(minutes=2))
    assert sorted((b.start - since, b.done) for b in found) == [
        (timedelta(0), 1),
        (timedelta(minutes=1), 5),
    ]
    (hourly,) = read(engine, 3600, t)
    assert hourly.done == 6


def test_a_queues_depth_is_replaced_not_added(backend: str, engine: Backend) -> None:
    t = later(engine, 0)
    engine.record_samples([Sample(queue="emails", depth=40)], now=t)
    engine.record_samples([Sample(queue="emails", depth=12)], now=t)
    (b,) = read(engine, 60, t)
    assert (b.name, b.depth, b.done) == ("", 12, 0)


def test_buckets_are_read_by_queue_and_name_with_the_queues_depth(
    backend: str, engine: Backend
) -> None:
    t = later(engine, 0)
    engine.record_samples(
        [
            sample("emails", "send", done=1),
            sample("emails", "bounce", done=2),
            sample("hooks", "send", done=4),
            Sample(queue="emails", depth=9),
        ],
        now=t,
    )
    by_queue = {(b.name, b.done, b.depth) for b in read(engine, 60, t, queue="emails")}
    assert by_queue == {("send", 1, None), ("bounce", 2, None), ("", 0, 9)}
    named = {(b.queue, b.name) for b in read(engine, 60, t, queue="emails", name="send")}
    assert named == {("emails", "send"), ("emails", "")}
    everywhere = {(b.queue, b.done) for b in read(engine, 60, t, name="send")}
    assert everywhere == {("emails", 1), ("hooks", 4)}
    assert len(read(engine, 60, t)) == 4


def test_empty_samples_write_nothing(backend: str, engine: Backend) -> None:
    t = later(engine, 0)
    engine.record_samples([Sample(queue="emails", name="send")], now=t)
    engine.record_samples([], now=t)
    assert read(engine, 60, t) == []


@pytest.mark.requires("!expires_buckets")
def test_prune_deletes_the_buckets_past_each_resolutions_window(
    backend: str, engine: Backend
) -> None:
    t = later(engine, 0)
    engine.record_samples([sample(done=1)], now=t)
    minute, ten, hour = RESOLUTIONS
    assert engine.prune_buckets(now=t + timedelta(seconds=minute.keep - 60)) == 0
    assert engine.prune_buckets(now=t + timedelta(seconds=minute.keep + 60)) == 1
    assert read(engine, minute.step, t) == [] and len(read(engine, ten.step, t)) == 1
    assert engine.prune_buckets(now=t + timedelta(seconds=hour.keep + 3600)) == 2
    assert read(engine, hour.step, t) == []


@pytest.mark.requires("expires_buckets")
def test_an_engine_that_expires_buckets_has_nothing_to_prune(backend: str, engine: Backend) -> None:
    t = later(engine, 0)
    engine.record_samples([sample(done=1)], now=t)
    assert engine.prune_buckets(now=t + timedelta(days=30)) == 0


def test_a_workers_acked_attempts_reach_the_chart_by_the_time_it_stops(
    backend: str, engine: Backend, register: Callable[..., Any]
) -> None:
    def sometimes(payload: Any) -> None:
        if payload["fail"]:
            raise ValueError("no")

    definition = register(sometimes, max_attempts=1)
    ids = [definition.enqueue({"fail": fail}, backend=backend).job_id for fail in (0, 1, 0)]
    with capture_events() as events:
        consumer = queue.consume(definition.queue, None, backend=backend, poll_interval=0.05)
        assert events.wait_for_action(CONSUME_FAILURE) and events.wait_for(
            lambda evs: sum(1 for e in evs if e.action == CONSUME_SUCCESS) >= 2
        )
        consumer.cancel()
        assert consumer.join(10)
    t = floor(engine.now(), 60)  # the flush may have landed in the minute before
    found = engine.buckets(60, t - timedelta(minutes=1), t + timedelta(minutes=1))
    assert {b.name for b in found} == {definition.name}
    assert sum(b.done for b in found) == 2 and sum(b.failed for b in found) == 1
    assert sum(sum(b.wait) for b in found) == 3 and sum(sum(b.run) for b in found) == 3
    (attempt,) = queue.attempts(ids[1], backend=backend)
    assert attempt.worker == consumer.registration.worker_id


def test_the_sweeper_records_each_queues_depth(backend: str, engine: Backend) -> None:
    for _ in range(3):
        queue.enqueue("deep", {}, backend=backend)
    queue.enqueue("deep", {}, delay=600, backend=backend)
    t = later(engine, 0)
    report = Depths(engine).run_once(now=t)
    assert report.queues == 1
    (b,) = read(engine, 60, t, queue="deep")
    assert (b.name, b.depth) == ("", 4)
