"""The console's listings read the replica ``DATABASE_ROUTERS`` names; claims and acks never do.

The "replica" is a second, real database of the same engine (a second SQLite file, a second
PostgreSQL database on the test server) holding a copy of the job table that lags the primary:
one job the primary has is missing from it, and one job only it has stands for a row the
primary has since deleted. What a page shows therefore proves which database it read.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps
from django.db import connections
from django.db.utils import load_backend
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext

from django_blamequeue import queue
from django_blamequeue.backends import get_backend
from django_blamequeue.models import Job
from tests.conformance.support import claim_one, succeed
from tests.conftest import need_server

pytestmark = pytest.mark.django_db(databases="__all__")

REPLICA = "replica_under_test"
JOB_TABLE = Job._meta.db_table


class ReplicaRouter:
    """Sends the reads blamequeue asks about ``PRIMARY`` to ``REPLICA``; nothing else."""

    primary = ""

    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return REPLICA if hints.get("primary") == self.primary else None


def _create_database(primary: str, tmp_path: Path) -> dict[str, Any]:
    """A new, empty database of ``primary``'s engine; its settings."""
    settings = copy.deepcopy(connections[primary].settings_dict)
    if connections[primary].vendor == "sqlite":
        settings["NAME"] = str(tmp_path / "replica.sqlite3")
        return settings
    settings["NAME"] = f"{settings['NAME']}_replica"
    with connections[primary]._nodb_cursor() as cursor:
        cursor.execute(f'DROP DATABASE IF EXISTS "{settings["NAME"]}"')
        cursor.execute(f'CREATE DATABASE "{settings["NAME"]}"')
    return settings


def _drop_database(primary: str, settings: dict[str, Any]) -> None:
    if connections[primary].vendor != "sqlite":
        with connections[primary]._nodb_cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{settings["NAME"]}"')


@pytest.fixture(params=["default", "postgres"], ids=["sqlite", "postgres"])
def primary(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A local backend's database, with a replica alias beside it that has its tables."""
    alias: str = request.param
    if alias != "default":
        need_server(alias)
    settings = _create_database(alias, tmp_path)
    # a connection of this thread only, made here: not an alias of DATABASES, so the test
    # case's guard against unlisted databases lets it through
    connections[REPLICA] = load_backend(settings["ENGINE"]).DatabaseWrapper(settings, REPLICA)
    try:
        with connections[REPLICA].schema_editor() as editor:
            for model in apps.get_app_config("django_blamequeue").get_models():
                if model._meta.managed and not model._meta.proxy:
                    editor.create_model(model)
        ReplicaRouter.primary = alias
        with override_settings(DATABASE_ROUTERS=[f"{__name__}.ReplicaRouter"]):
            yield alias
    finally:
        connections[REPLICA].close()
        del connections[REPLICA]
        _drop_database(alias, settings)


@pytest.fixture
def lagging(primary: str) -> dict[str, str]:
    """Three jobs on the primary; the replica has the first, not the second (it lags), and a
    third the primary no longer has."""
    ids = [queue.enqueue("replicated", {"i": i}, backend=primary).job_id for i in range(3)]
    rows = {j.id: j for j in Job.objects.using(primary).filter(id__in=ids)}
    Job.objects.using(REPLICA).bulk_create([rows[ids[0]], rows[ids[2]]])
    Job.objects.using(primary).filter(id=ids[2]).delete()
    return {"copied": ids[0], "not_yet_copied": ids[1], "only_on_replica": ids[2]}


def _job_queries(captured: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in captured.captured_queries if JOB_TABLE in q["sql"]]


def test_the_job_list_reads_the_replica_the_routers_name(
    primary: str, lagging: dict[str, str], admin_client_: Client
) -> None:
    with CaptureQueriesContext(connections[primary]) as on_primary:
        page = admin_client_.get(
            "/admin/django_blamequeue/job/", {"backend": primary, "queue": "replicated"}
        )
    assert page.status_code == 200
    html = page.content.decode()
    assert lagging["copied"] in html
    assert lagging["only_on_replica"] in html
    assert lagging["not_yet_copied"] not in html
    assert _job_queries(on_primary) == []


def test_the_overview_says_where_the_job_list_reads(primary: str, admin_client_: Client) -> None:
    page = admin_client_.get("/admin/django_blamequeue/job/overview/")
    assert page.status_code == 200
    assert f'data-reads="{REPLICA}"' in page.content.decode()


def test_claims_and_acks_stay_on_the_primary(primary: str, lagging: dict[str, str]) -> None:
    engine = get_backend(primary)
    with CaptureQueriesContext(connections[REPLICA]) as on_replica:
        claimed = claim_one(engine, "replicated")
        assert claimed.job_id == lagging["copied"]
        assert succeed(engine, claimed).state == "done"
        second = claim_one(engine, "replicated")  # the replica has not got this one yet
        assert second.job_id == lagging["not_yet_copied"]
        assert queue.get_job(second.job_id, backend=primary) is not None
    assert on_replica.captured_queries == []
    assert Job.objects.using(primary).get(id=lagging["copied"]).state == "done"
    assert Job.objects.using(REPLICA).get(id=lagging["copied"]).state == "pending"


def test_an_action_on_a_listed_filter_applies_to_the_primary_rows(
    primary: str, lagging: dict[str, str], admin_client_: Client
) -> None:
    answer = admin_client_.post(
        "/admin/django_blamequeue/job/bulk/",
        {
            "verb": "cancel",
            "filters": f"backend={primary}&queue=replicated",
            "bound": "2999-01-01T00:00:00+00:00",
            "count": "2",
        },
    )
    assert answer.status_code in (200, 302)
    states = dict(Job.objects.using(primary).values_list("id", "state"))
    assert states == {lagging["copied"]: "cancelled", lagging["not_yet_copied"]: "cancelled"}
    assert Job.objects.using(REPLICA).get(id=lagging["copied"]).state == "pending"


def test_without_a_router_every_listing_reads_the_primary(
    primary: str, lagging: dict[str, str], admin_client_: Client
) -> None:
    with override_settings(DATABASE_ROUTERS=[]):
        page = admin_client_.get(
            "/admin/django_blamequeue/job/", {"backend": primary, "queue": "replicated"}
        )
    html = page.content.decode()
    assert lagging["not_yet_copied"] in html
    assert lagging["only_on_replica"] not in html
