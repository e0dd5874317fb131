"""Rolling deploys for ``django.tasks`` tasks : a worker that cannot import a
task's module hands the run back without spending an attempt; the run stays READY for a
worker that has it."""

from __future__ import annotations

from typing import Any

import pytest
from django.tasks import TaskResultStatus

from django_blamequeue import queue
from django_blamequeue.jobs import registry
from django_blamequeue.tasks import running
from django_blamequeue.testing import wait_until
from tests.tasks import sample

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def test_a_task_this_worker_cannot_import_is_handed_back_not_failed(
    tasks_backend: Any, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = sample.add.enqueue(1, 2)
    name = queue.get_job(result.id, backend=backend).name  # type: ignore[union-attr]
    # This worker runs older code: the task's module is not there to import.
    monkeypatch.setattr(running, "_import_task", lambda path: None)
    monkeypatch.delitem(registry._registry, name)
    consumer = queue.consume("tasks", None, backend=backend, poll_interval=0.05)
    try:
        assert wait_until(
            lambda: queue.get_job(result.id, backend=backend).reason == "no_handler",  # type: ignore[union-attr]
            10,
        )
        info = queue.get_job(result.id, backend=backend)
        assert info is not None
        assert (info.state, info.attempts, info.reason) == ("pending", 0, "no_handler")
    finally:
        consumer.cancel(grace=5)
        consumer.join(10)
    monkeypatch.undo()  # back to code that has the task: the run is still to do
    assert sample.add.get_result(result.id).status == TaskResultStatus.READY
