"""The worker fuzz: handlers end in every hostile way (a ``__str__`` that raises or
exits, NUL, lone surrogates, ten-megabyte messages, ``SystemExit``, ``KeyboardInterrupt``,
``GeneratorExit``, a ``BaseException`` of their own, cyclic and 500-deep chains, the worker's
own interrupts raised by hand, results that cannot be stored) while good jobs flow through one
``runworker`` process. It must stay up, finish every good job, fail each hostile one alone with
a bounded, NUL-free error that names it, and exit 0.

The mix is drawn from a seed (shown in the figures), so a failing run can be repeated.
"""

from __future__ import annotations

import os
import random
import time

import pytest

from django_blamequeue import queue
from django_blamequeue.core.texts import MAX_ERROR, MAX_TRACEBACK
from django_blamequeue.models import Job
from tests.procapp.hostile import HOSTILE_QUEUE, KINDS

from .conftest import Processes, Report, engine

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, databases="__all__")]

GOOD = 200
#: What each kind's stored error starts with.
ERRORS = {
    "str-raises": "StrRaises: (str() failed) StrRaises('boom')",
    "str-exits": "StrExits: (str() failed)",
    "str-and-repr-raise": "BothRaise: (str() and repr() failed)",
    "nul": "ValueError: a\\x00b",
    "lone-surrogate": "ValueError: half a pair: \\udc80",
    "ten-megabyte-message": "ValueError: yyyy",
    "ten-megabyte-str": "HugeStr: zzzz",
    "system-exit": "SystemExit: 2",
    "keyboard-interrupt": "KeyboardInterrupt",
    "generator-exit": "GeneratorExit",
    "base-exception": "Fatal: a BaseException subclass",
    "cyclic-cause": "ValueError: its own cause",
    "deep-chain": "ValueError: link 499",
    "odd-notes": "ValueError: with odd notes",
    "impostor-timeout": "JobTimeout",
    "impostor-lease-lost": "LeaseLost",
    "unencodable-result": "QueueError: [BAD_PAYLOAD]",
    "nan-result": "QueueError: [BAD_PAYLOAD]",
}


def test_hostile_handlers_fail_alone_while_good_jobs_finish_on_one_worker(
    backend: str, processes: Processes, report: Report
) -> None:
    seed = int(os.environ.get("BLAMEQUEUE_FUZZ_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    hostile = [*KINDS, *rng.choices(sorted(KINDS), k=len(KINDS))]  # each kind at least once
    payloads: list[dict[str, object]] = [{"kind": None, "n": i} for i in range(GOOD)]
    for kind in hostile:
        payloads.insert(rng.randrange(len(payloads) + 1), {"kind": kind})
    jobs = queue.enqueue_many(HOSTILE_QUEUE, payloads, name="procapp.hostile", backend=backend)

    start = time.monotonic()
    worker = processes.spawn(
        "runworker", HOSTILE_QUEUE, "--backend", backend, "--burst", "--concurrency", "4",
        "--no-sweep",
    )  # fmt: skip
    code = worker.wait(120)
    elapsed = time.monotonic() - start

    rows = {r.id: r for r in Job.objects.using(backend).filter(queue=HOSTILE_QUEUE)}
    by_kind = [(p["kind"], rows[j.job_id]) for p, j in zip(payloads, jobs, strict=True)]
    done = sum(1 for k, r in by_kind if k is None and r.state == "done")
    failed_alone = sum(
        1 for k, r in by_kind if k is not None and (r.state, r.attempts) == ("failed", 1)
    )
    errors = [r.error or "" for k, r in by_kind if k is not None]
    traces = [r.traceback or "" for k, r in by_kind if k is not None]
    report(
        f"worker fuzz[{engine(backend)}]",
        seed=str(seed),
        good_jobs_done=f"{done} of {GOOD}",
        hostile_failed_alone=f"{failed_alone} of {len(hostile)} ({len(KINDS)} kinds)",
        longest_error=f"{max(map(len, errors)):,} chars",
        longest_traceback=f"{max(map(len, traces)):,} chars",
        worker_exit=str(code),
        s=elapsed,
    )
    assert code == 0, worker.tail()
    assert done == GOOD
    assert failed_alone == len(hostile)
    for kind, row in by_kind:
        if kind is None:
            continue
        assert (row.error or "").startswith(ERRORS[str(kind)]), (kind, row.error)
        assert row.reason == "error", (kind, row.reason)
    assert all("\x00" not in t for t in errors + traces)
    assert max(map(len, errors)) <= MAX_ERROR and max(map(len, traces)) <= MAX_TRACEBACK
    assert "main loop died" not in worker.stderr()
    assert worker.stdout().count("runworker") == 1  # one process, never restarted
