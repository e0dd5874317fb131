"""A failing job is visible in the worker's log. Every retry logs one WARNING line and every
move to the DLQ an ERROR on ``django_blamequeue``, with the job's id, name, queue and attempt
and the error; the traceback is logged once, with the final failure (``LOG_TRACEBACKS``) —
read here from a real ``runworker``'s stderr (tests/settings.py logs WARNING and up there),
for a handler that raises and for a job whose worker died (the rescuer, in the worker's
sweeper thread, moves it to the DLQ as stalled)."""

from __future__ import annotations

import re

import pytest

from django_blamequeue import queue
from django_blamequeue.backends import get_backend
from tests.procapp.hostile import FAILING_QUEUE

from .conftest import Processes, Report, engine

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, databases="__all__")]


def test_a_retry_is_one_warning_line_and_the_move_to_the_dlq_an_error_with_the_traceback(
    backend: str, processes: Processes, report: Report
) -> None:
    # A job whose worker died on its last attempt: leased here for 50 ms, left to expire.
    crashed = queue.enqueue(
        FAILING_QUEUE, {"n": 8}, name="procapp.fail", max_attempts=1, backend=backend
    ).job_id
    b = get_backend(backend)
    (held,) = b.claim([FAILING_QUEUE], 1, 0.05)
    assert held.job_id == crashed
    failing = queue.enqueue(
        FAILING_QUEUE, {"n": 7}, name="procapp.fail", max_attempts=2, backend=backend
    ).job_id

    worker = processes.spawn(
        "runworker", FAILING_QUEUE, "--backend", backend, "--burst", "--wait-delayed",
        overrides={"SWEEP_INTERVAL": 0.2},
    )  # fmt: skip
    assert worker.wait(60) == 0, worker.tail()
    err = worker.stderr()

    retry = re.search(
        rf"WARNING django_blamequeue\.worker: job {failing} \(procapp\.fail\) on {FAILING_QUEUE} "
        r"failed on attempt 1/2 and will be retried in 0\.01 s \(error\): ValueError: boom 7\n"
        r"(?!Traceback)",
        err,
    )
    dead = re.search(
        rf"ERROR django_blamequeue\.worker: job {failing} \(procapp\.fail\) on {FAILING_QUEUE} "
        r"failed on attempt 2/2 and moved to the DLQ \(error\): ValueError: boom 7\n"
        r"Traceback \(most recent call last\):\n(  .*\n)+ValueError: boom 7\n",
        err,
    )
    stalled = re.search(
        rf"ERROR django_blamequeue\.rescue: job {crashed} \(procapp\.fail\) on {FAILING_QUEUE} "
        r"moved to the DLQ: stalled, attempt 1/1, stall 1 \(the lease expired",
        err,
    )
    report(
        f"worker logs[{engine(backend)}]",
        retry_warning="yes" if retry else "MISSING",
        dlq_error="yes" if dead else "MISSING",
        stalled_dlq_error="yes" if stalled else "MISSING",
    )
    assert retry and dead and stalled, err
    assert err.count("Traceback (most recent call last)") == 1, err  # the final failure's
    assert queue.get_job(failing, backend=backend).state == "failed"  # type: ignore[union-attr]
    assert queue.get_job(crashed, backend=backend).reason == "stalled"  # type: ignore[union-attr]
