"""The job table's parts behind expiry and job names' rate limits, on SQLite and PostgreSQL:
the expirer cancels a batch at a time, the earliest expiry first; a name's window is rows of
``blamequeue_rate_start`` under the blank queue, dropped once they leave the window."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction

from django_blamequeue import QueueLimits, job, queue
from django_blamequeue.backends import get_backend
from django_blamequeue.backends.jobtable.expiry import Expiry
from django_blamequeue.backends.jobtable.name_rates import NAME_WINDOW, NameRates
from django_blamequeue.jobs import registry
from django_blamequeue.models import RateStart

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def test_the_expirer_cancels_a_batch_at_a_time_earliest_expiry_first(backend: str) -> None:
    engine: Any = get_backend(backend)
    late = queue.enqueue("w", {}, expires=120, backend=backend).job_id
    soon = queue.enqueue("w", {}, expires=60, backend=backend).job_id
    expiry = Expiry(engine.jobtable, engine.flows)
    t = engine.now() + timedelta(seconds=121)
    assert expiry.expire(t, limit=1) == [soon]
    assert expiry.expire(t, limit=1) == [late]
    assert expiry.expire(t, limit=1) == []


def test_a_name_s_window_is_rows_under_the_blank_queue_dropped_after_the_window(
    backend: str,
) -> None:
    engine: Any = get_backend(backend)
    limits = QueueLimits(name_rate_limits=(("tests.windowed", 2, 60.0),))
    windowed = job(queue="w", name="tests.windowed", rate_limit="2/m")(lambda n: n)
    try:
        windowed.enqueue_many([1, 2, 3], backend=backend)
    finally:
        registry.unregister(windowed.name)
    t = engine.now()
    claimed = engine.claim(["w"], 10, 30, now=t, limits={"w": limits})
    assert len(claimed) == 2
    rows = RateStart.objects.using(engine.jobtable.db).filter(queue=NAME_WINDOW)
    assert sorted(rows.values_list("key", flat=True)) == ["tests.windowed"] * 2
    rates = NameRates(engine.jobtable)
    with transaction.atomic(using=engine.jobtable.db):
        assert rates.count(limits, t + timedelta(seconds=30)) == {"tests.windowed": 2}
        assert rates.count(limits, t + timedelta(seconds=61)) == {}  # and the rows are gone
    assert not rows.exists()
