"""``JobTable``: where a backend's job rows live. The local backend and the SQS ledger each
hold one, over ``Job`` and ``SqsJob``; only the local one's wake-ups go out as NOTIFY."""

from __future__ import annotations

from datetime import UTC, datetime

from django_blamequeue.backends.jobtable.table import JobTable
from django_blamequeue.conf import BackendConfig
from django_blamequeue.models import Job, SqsJob
from tests.conftest import need_server


def config(database: str) -> BackendConfig:
    return BackendConfig(alias="here", protocol="local", options={"DATABASE": database})


def test_a_job_table_is_its_model_on_its_database_for_its_backend() -> None:
    local, ledger = JobTable(Job, config("default")), JobTable(SqsJob, config("default"))
    assert (local.name, ledger.name) == ("blamequeue_job", "blamequeue_sqs_job")
    assert (local.db, local.alias, local.model) == ("default", "here", Job)


def test_on_sqlite_no_statement_is_prepared_and_no_wake_up_is_a_notify() -> None:
    table = JobTable(Job, config("default"))
    assert (table.is_postgres, table.prepares, table.notifies) == (False, False, False)


def test_on_postgresql_wake_ups_are_notifies_unless_the_backend_holding_it_says_not() -> None:
    need_server("postgres")
    assert JobTable(Job, config("postgres")).notifies
    assert not JobTable(SqsJob, config("postgres"), notifies=False).notifies


def test_a_given_now_is_the_clock_without_asking_the_database() -> None:
    moment = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert JobTable(Job, config("default")).clock(moment) is moment
