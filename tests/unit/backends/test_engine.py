"""The two engines over a job table share their hand-offs to its parts, written once."""

from __future__ import annotations

import inspect

from django_blamequeue.backends.base import Backend
from django_blamequeue.backends.database.backend import DatabaseBackend
from django_blamequeue.backends.jobtable.engine import JobTableBackend
from django_blamequeue.backends.sqs.backend import SqsBackend


def _own(cls: type) -> set[str]:
    return {name for name, value in vars(cls).items() if inspect.isfunction(value)}


def test_the_local_and_sqs_backends_are_job_table_engines() -> None:
    assert issubclass(DatabaseBackend, JobTableBackend)
    assert issubclass(SqsBackend, JobTableBackend)
    assert issubclass(JobTableBackend, Backend)


def test_a_verb_the_job_table_answers_is_not_written_again_by_an_engine() -> None:
    shared = _own(JobTableBackend) - {"__init__"}
    assert len(shared) > 40  # the listings, DLQ, bulk edits, control plane, flows …
    assert not shared & _own(DatabaseBackend)
    assert not shared & _own(SqsBackend)


def test_what_differs_stays_with_each_engine() -> None:
    for verb in ("enqueue_many", "claim", "apply_many", "renew_leases", "rescue_expired"):
        assert verb in _own(DatabaseBackend)
        assert verb in _own(SqsBackend)
    assert "listener" in _own(DatabaseBackend)
    assert "send_due" in _own(SqsBackend)
