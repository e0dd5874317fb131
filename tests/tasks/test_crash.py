"""A task whose worker is SIGKILLed runs again: lease expiry and the sweeper, real processes.

The worker is ``manage.py runworker`` in a subprocess that nothing imports the task module
for: it resolves ``tests.tasks.sample.crash_once`` by its module path. The same crash under
django-tasks-db's ``db_worker`` (the reference database backend) leaves the task RUNNING.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.tasks import TaskResultStatus

from django_blamequeue import queue
from django_blamequeue.testing import wait_until
from tests.tasks import sample

pytestmark = [pytest.mark.django_db(transaction=True, databases="__all__"), pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def start_worker(tmp_path: Path, backend: str) -> Iterator[Any]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str) -> subprocess.Popen[bytes]:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.tasks.worker_settings",
            "BLAMEQUEUE_TEST_SUBPROCESS": "1",
            "BLAMEQUEUE_TEST_TASKS_BACKEND": backend,
        }
        log = (tmp_path / f"{name}.log").open("wb")
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "django",
                "runworker",
                "crash",
                "--backend",
                backend,
                "--lease",
                "1",
                "--poll",
                "0.1",
                "--grace",
                "0",
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


def test_a_task_whose_worker_is_killed_is_run_again(
    tasks_backend: Any, backend: str, tmp_path: Path, start_worker: Any
) -> None:
    result = sample.crash_once.enqueue(str(tmp_path))
    first = start_worker("first")
    assert wait_until(lambda: (tmp_path / "attempt-1").exists(), timeout=30), (
        tmp_path / "first.log"
    ).read_text()
    result.refresh()
    assert result.status == TaskResultStatus.RUNNING
    os.kill(first.pid, signal.SIGKILL)
    first.wait(10)

    start_worker("second")
    assert wait_until(lambda: result.task.get_result(result.id).is_finished, timeout=30), (
        tmp_path / "second.log"
    ).read_text()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 2
    assert result.attempts == 2  # the crash does not give the attempt back
    info = queue.get_job(result.id, backend=backend)
    assert info is not None and info.stalls == 1


@pytest.mark.django_db(transaction=True)
def test_the_reference_database_backend_leaves_a_killed_task_running(
    tmp_path: Path, settings: Any
) -> None:
    """The contrast: nothing there expires a dead worker's claim, so no worker retries it."""
    pytest.importorskip("django_tasks_db")
    from django.db import connection
    from django.test.utils import override_settings

    from tests.tasks.config import reference_tasks

    apps_ = [*settings.INSTALLED_APPS, "django_tasks_db"]
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.tasks.reference_settings",
        "BLAMEQUEUE_TEST_SUBPROCESS": "1",
    }
    command = [
        sys.executable,
        "-m",
        "django",
        "db_worker",
        "--backend",
        "reference",
        "--queue-name",
        "crash",
        "--interval",
        "0.1",
        "--no-startup-delay",
        "--no-reload",
    ]
    procs: list[subprocess.Popen[bytes]] = []
    with override_settings(INSTALLED_APPS=apps_, TASKS=reference_tasks()):
        from django_tasks_db.models import DBTaskResult

        with connection.schema_editor() as editor:
            editor.create_model(DBTaskResult)
        try:
            from tests.tasks.reference_sample import crash_once

            result = crash_once.enqueue(str(tmp_path))
            log = (tmp_path / "reference.log").open("wb")
            procs.append(subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=log))
            assert wait_until(lambda: (tmp_path / "attempt-1").exists(), timeout=30), (
                tmp_path / "reference.log"
            ).read_text()
            os.kill(procs[0].pid, signal.SIGKILL)
            procs[0].wait(10)
            procs.append(subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=log))
            # Our worker re-ran the same crash within ~2 s (lease 1 s, sweep 0.2 s); give the
            # reference several times that.
            assert not wait_until(lambda: (tmp_path / "attempt-2").exists(), timeout=8)
            result.refresh()
            assert result.status == TaskResultStatus.RUNNING
            assert procs[1].poll() is None  # its worker is alive, idle
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                proc.wait(10)
            with connection.schema_editor() as editor:
                editor.delete_model(DBTaskResult)
