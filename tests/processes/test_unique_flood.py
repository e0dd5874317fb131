"""Unique jobs under concurrent enqueuers in separate processes: 8 processes × 1,000
enqueues over 50 keys store exactly 50 jobs, on every backend, and every other call is
counted on the job that absorbed it (docs/unique.md).

SQLite makes each of 100 calls per process: every enqueue is a commit, and a commit (an
fsync of its journal) takes ~15 ms on the test machine's disk, so 8,000 of them would take
two minutes whatever the enqueue does. The SQS ledger is on PostgreSQL here for the same
reason. Replace (100 calls per process) runs on PostgreSQL only, where concurrent upserts of
one row really race (SQLite serializes its writers, a Redis script runs alone)."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path
from typing import Any

import pytest
from pytest_django import Settings as SettingsWrapper

from django_blamequeue import JobInfo, queue
from django_blamequeue.backends import get_backend
from tests.conftest import ALL_BACKENDS, backend_id, need_server

from .conftest import Processes, Report, engine

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, databases="__all__")]

PROCESSES, CALLS, KEYS = 8, 1_000, 50
REPLACE_CALLS = 100  # replace rewrites the holder's payload each call: the same race, cheaper
_runs = itertools.count()


@pytest.mark.parametrize(
    ("alias", "mode"),
    [*((a, "skip") for a in ALL_BACKENDS), ("postgres", "replace")],
    ids=lambda v: backend_id(v) if v in ALL_BACKENDS else v,
)
def test_eight_processes_enqueueing_fifty_keys_store_exactly_fifty_jobs(
    alias: str,
    mode: str,
    processes: Processes,
    tmp_path: Path,
    settings: SettingsWrapper,
    report: Report,
) -> None:
    need_server(alias)
    calls = 100 if alias == "default" else CALLS if mode == "skip" else REPLACE_CALLS
    overrides = _ledger_on_postgres(settings) if alias == "sqs" else None
    queue_name = f"flood-{next(_runs)}-{int(time.time())}"
    go = tmp_path / "go"
    procs = [
        processes.spawn(
            "uniqueflood",
            *("--backend", alias, "--queue", queue_name, "--mode", mode),
            *("--calls", str(calls), "--keys", str(KEYS), "--seed", str(i), "--go", str(go)),
            overrides=overrides,
        )
        for i in range(PROCESSES)
    ]
    start = time.monotonic()
    go.touch()
    for p in procs:
        assert p.wait(120) == 0, p.tail()
    elapsed = time.monotonic() - start
    counts = [json.loads(p.stdout().strip().splitlines()[-1]) for p in procs]
    stored = sum(c["stored"] for c in counts)
    absorbed = sum(c["absorbed"] for c in counts)
    jobs = sum(sum(s.counts.values()) for s in get_backend(alias).stats() if s.queue == queue_name)
    holders = _holders(alias, queue_name)
    report(
        f"unique {mode}[{engine(alias)}]",
        processes=PROCESSES,
        enqueues=PROCESSES * calls,
        keys=KEYS,
        jobs_stored=jobs,
        calls_absorbed=absorbed,
        s=elapsed,
    )
    assert (stored, jobs, len(holders)) == (KEYS, KEYS, KEYS)
    # Each holder counted the calls it absorbed (and the look-up's own call, one per key).
    assert absorbed == PROCESSES * calls - KEYS == sum(i.unique_calls for i in holders) - KEYS


def _ledger_on_postgres(settings: SettingsWrapper) -> dict[str, Any]:
    """The SQS backend with its ledger on PostgreSQL, here and in the enqueuing processes."""
    need_server("postgres")
    entry = dict(settings.BLAMEQUEUE["BACKENDS"]["sqs"])
    entry.update(DATABASE="postgres", QUEUE_PREFIX=f"{entry['QUEUE_PREFIX']}u{next(_runs)}-")
    overrides = {"BACKENDS": {**settings.BLAMEQUEUE["BACKENDS"], "sqs": entry}}
    settings.BLAMEQUEUE = {**settings.BLAMEQUEUE, **overrides}
    return overrides


def _holders(alias: str, queue_name: str) -> list[JobInfo]:
    """The holder of each key, found the way a caller finds it: a held key's enqueue answers
    its holder (and counts one more absorbed call)."""
    found = {}
    for k in range(KEYS):
        got = queue.enqueue(queue_name, {"k": k}, unique={"key": f"k{k}"}, backend=alias)
        assert got.deduplicated, f"key k{k} has no holder"
        info = queue.get_job(got.job_id, backend=alias)
        assert info is not None
        found[info.job_id] = info
    return list(found.values())
