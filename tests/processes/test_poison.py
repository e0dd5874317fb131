"""Poison input : refused at enqueue where the API can tell; a stored row
that cannot run (undecodable body, disallowed content type) goes to the DLQ after one attempt,
and the worker goes on with the good jobs behind it. A row of a name this worker has no
handler for is not poison (a rolling deploy): it is handed back, no attempt spent,
and the burst worker still exits."""

from __future__ import annotations

import pickle
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings
from django.utils import timezone

from django_blamequeue import QueueError, queue
from django_blamequeue.core import ids
from django_blamequeue.exceptions import ErrorCode
from django_blamequeue.models import Job
from tests.procapp.jobs import QUEUE

from .conftest import Processes, Report, engine, states

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, databases="__all__")]

GOOD = 100


class Trap:
    """Unpickling this creates ``path``: proof that a pickle body was (not) loaded."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.mkdir, (self.path,))


def stored(
    db: str,
    *,
    name: str,
    body: bytes,
    content_type: str = "application/json",
    encoding: str = "utf-8",
) -> str:
    """A row written past the API, as another producer or a hand-edited table might."""
    now = timezone.now()
    job = Job(
        id=ids.new_id(),
        queue=QUEUE,
        name=name,
        payload=body,
        content_type=content_type,
        content_encoding=encoding,
        available_at=now - timedelta(seconds=1),
        max_attempts=5,
        created_at=now,
        updated_at=now,
    )
    job.save(using=db)
    return job.id


def refusals(backend: str) -> list[QueueError]:
    refused: list[QueueError] = []
    attempts: list[tuple[dict[str, Any], dict[str, Any]]] = [
        ({"payload": object(), "name": "procapp.effect"}, {}),  # kombu cannot encode it
        ({"payload": {}, "name": "procapp.gone"}, {}),  # no such @job
        ({"payload": {}, "name": "procapp.effect"}, {"SERIALIZER": "pickle"}),
    ]
    for kwargs, overrides in attempts:
        with (
            override_settings(BLAMEQUEUE={**settings.BLAMEQUEUE, **overrides}),
            pytest.raises(QueueError) as caught,
        ):
            queue.enqueue(QUEUE, backend=backend, **kwargs)
        refused.append(caught.value)
    return refused


def test_poison_is_refused_or_dead_lettered_and_the_good_jobs_behind_it_run(
    backend: str, processes: Processes, report: Report, tmp_path: Path
) -> None:
    refused = refusals(backend)
    codes = [e.code for e in refused]
    assert codes == [ErrorCode.BAD_PAYLOAD, ErrorCode.UNKNOWN_JOB, ErrorCode.INVALID_CONFIG]
    assert "SERIALIZER" in refused[2].message and "ACCEPT_CONTENT" in refused[2].message
    assert states(backend) == {}

    trap = tmp_path / "unpickled"
    poison = {
        "malformed": stored(backend, name="procapp.effect", body=b'{"unterminated": '),
        "unknown name": stored(backend, name="procapp.gone", body=b"{}"),
        "pickle": stored(
            backend,
            name="procapp.effect",
            body=pickle.dumps(Trap(trap)),
            content_type="application/x-python-serialize",
            encoding="binary",
        ),
    }
    queue.enqueue_many(
        QUEUE, [{"i": i} for i in range(GOOD)], name="procapp.effect", backend=backend
    )
    start = time.monotonic()
    worker = processes.worker(backend, "--burst", "--concurrency", "4", "--no-sweep")
    assert worker.wait(60) == 0, worker.tail()
    elapsed = time.monotonic() - start

    rows = {k: Job.objects.using(backend).get(id=v) for k, v in poison.items()}
    gone = rows.pop("unknown name")
    dead = {j.job_id for j in queue.dlq_list(QUEUE, backend=backend)}
    report(
        f"poison[{engine(backend)}]",
        refused_at_enqueue="/".join(str(c) for c in codes),
        dead_lettered=f"{len(dead)} of {len(rows)} after 1 attempt",
        unknown_name=f"{gone.state}, {gone.attempts} attempts spent",
        pickle_loaded="no" if not trap.exists() else "YES",
        good_jobs_done=f"{states(backend).get('done', 0)} of {GOOD}",
        s=elapsed,
    )
    assert dead == {j.id for j in rows.values()}
    for job in rows.values():
        assert (job.state, job.attempts, job.reason) == ("failed", 1, "bad_job"), job.error
    assert "cannot be decoded" in (rows["malformed"].error or "")
    assert (gone.state, gone.attempts, gone.reason) == ("pending", 0, "no_handler")
    assert "no handler for job name 'procapp.gone'" in (gone.error or "")
    assert "application/x-python-serialize" in (rows["pickle"].error or "")
    assert not trap.exists()
    assert states(backend) == {"done": GOOD, "failed": len(rows), "pending": 1}
    assert "Traceback" not in worker.stderr()
