"""Which database a read-only listing reads: the first router's answer, else the primary."""

from __future__ import annotations

from typing import Any

from django.test import override_settings

from django_blamequeue.backends.replicas import read_database
from django_blamequeue.models import AuditEvent, Job

HERE = __name__


class QueueReplica:
    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return "queue_replica" if hints.get("primary") == "queue" else None


class JobsOnly:
    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return "jobs_replica" if model is Job else None


class WritesOnly:
    """A router that says nothing about reads."""

    def db_for_write(self, model: Any, **hints: Any) -> str:
        return "elsewhere"


class EveryRead:
    def db_for_read(self, model: Any, **hints: Any) -> str:
        return "default"


def test_without_routers_a_listing_reads_the_backends_database() -> None:
    with override_settings(DATABASE_ROUTERS=[]):
        assert read_database(Job, "queue") == "queue"


def test_a_router_is_told_the_backends_database_and_its_answer_is_read() -> None:
    with override_settings(DATABASE_ROUTERS=[f"{HERE}.QueueReplica"]):
        assert read_database(Job, "queue") == "queue_replica"
        assert read_database(AuditEvent, "queue") == "queue_replica"
        assert read_database(Job, "reports") == "reports"  # not Django's fallback "default"


def test_the_first_router_that_answers_wins_and_one_without_reads_is_passed_over() -> None:
    routers = [f"{HERE}.WritesOnly", f"{HERE}.JobsOnly", f"{HERE}.QueueReplica"]
    with override_settings(DATABASE_ROUTERS=routers):
        assert read_database(Job, "queue") == "jobs_replica"
        assert read_database(AuditEvent, "queue") == "queue_replica"
        assert read_database(AuditEvent, "reports") == "reports"


def test_a_router_that_sends_every_read_somewhere_is_obeyed() -> None:
    """Its author said so; docs/scaling.md says to look at the ``primary`` hint first."""
    with override_settings(DATABASE_ROUTERS=[f"{HERE}.EveryRead"]):
        assert read_database(Job, "queue") == "default"
