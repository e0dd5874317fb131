"""Jobs about model objects (``about=``, ``JobInfo.about``, ``jobs_about``) and the
blame trail (``JobInfo.origin``), on every backend, straight and through the outbox."""

from __future__ import annotations

from typing import Any

import pytest

from django_blamequeue import ABOUT, ErrorCode, QueueError, about_key, current_job, queue
from django_blamequeue.backends.base import Backend
from django_blamequeue.models import Schedule
from django_blamequeue.testing import wait_until

from .support import in_transaction, nothing_written, relay, row

ORDER = Schedule(pk=7, name="an object")  # any saved-looking model instance will do
OTHER = Schedule(pk=8, name="another")
HERE = "tests/conformance/test_about.py"


def test_a_job_enqueued_about_an_object_names_it(backend: str, engine: Backend) -> None:
    job_id = queue.enqueue("about", {}, about=ORDER, backend=backend).job_id
    assert row(engine, job_id)["about"] == "django_blamequeue.schedule:7" == about_key(ORDER)


def test_jobs_about_an_object_come_newest_first_up_to_the_limit(backend: str) -> None:
    ids = [queue.enqueue("about", {"i": i}, about=ORDER, backend=backend).job_id for i in range(3)]
    queue.enqueue("about", {}, about=OTHER, backend=backend)
    queue.enqueue("about", {}, backend=backend)
    found = queue.jobs_about(ORDER, backend=backend)
    assert [j.job_id for j in found] == ids[::-1]
    assert [j.job_id for j in queue.jobs_about(ORDER, limit=2, backend=backend)] == ids[:0:-1]
    by_key = queue.jobs_about("django_blamequeue.schedule:8", backend=backend)
    assert [j.about for j in by_key] == ["django_blamequeue.schedule:8"]


def test_enqueue_many_takes_one_object_for_all_or_one_per_payload(backend: str) -> None:
    shared = queue.enqueue_many("about", [1, 2], about=ORDER, backend=backend)
    each = queue.enqueue_many("about", [3, 4], abouts=[OTHER, None], backend=backend)
    assert {j.job_id for j in queue.jobs_about(ORDER, backend=backend)} == {
        e.job_id for e in shared
    }
    assert [j.job_id for j in queue.jobs_about(OTHER, backend=backend)] == [each[0].job_id]


def test_dedupe_key_about_keeps_one_live_job_per_object(backend: str) -> None:
    first = queue.enqueue("about", {}, about=ORDER, dedupe_key=ABOUT, backend=backend)
    again = queue.enqueue("about", {}, about=ORDER, dedupe_key=ABOUT, backend=backend)
    other = queue.enqueue("about", {}, about=OTHER, dedupe_key=ABOUT, backend=backend)
    assert (again.job_id, again.deduplicated) == (first.job_id, True)
    assert not other.deduplicated
    info = queue.get_job(first.job_id, backend=backend)
    assert info is not None and info.dedupe_key == "django_blamequeue.schedule:7"


@pytest.mark.parametrize(
    "about",
    [Schedule(name="unsaved"), "no-colon", "app:1", object(), "a.b:" + "x" * 300],
    ids=["unsaved", "no-colon", "no-model", "object", "too-long"],
)
def test_about_must_name_a_saved_model_instance_and_nothing_is_written(
    backend: str, engine: Backend, about: Any
) -> None:
    with pytest.raises(QueueError) as caught:
        queue.enqueue("about", {}, about=about, backend=backend)
    assert caught.value.code == ErrorCode.BAD_ARGUMENT
    assert nothing_written(engine)


def test_dedupe_key_about_needs_an_about(backend: str, engine: Backend) -> None:
    with pytest.raises(QueueError) as caught:
        queue.enqueue("about", {}, dedupe_key=ABOUT, backend=backend)
    assert caught.value.code == ErrorCode.BAD_ARGUMENT
    assert nothing_written(engine)


def test_origin_names_the_line_of_user_code_that_enqueued(backend: str, engine: Backend) -> None:
    job_id = queue.enqueue("origin", {}, backend=backend).job_id  # the site
    site = row(engine, job_id)["origin"]["site"]
    assert site.startswith(f"{HERE}:") and site.endswith(
        " in test_origin_names_the_line_of_user_code_that_enqueued"
    )


def test_origin_site_capture_can_be_turned_off(
    backend: str, engine: Backend, configure: Any
) -> None:
    configure(ORIGIN_SITE=False)
    job_id = queue.enqueue("origin", {}, backend=backend).job_id
    assert row(engine, job_id)["origin"] is None


def test_a_job_enqueued_by_a_job_names_its_parent(backend: str, engine: Backend) -> None:
    children: list[str] = []

    def handler(job: Any, ctx: Any) -> None:
        children.append(queue.enqueue("origin-child", {}, backend=backend).job_id)
        assert current_job().job_id == job.job_id

    parent = queue.enqueue("origin-parent", {}, backend=backend).job_id
    queue.consume("origin-parent", handler, backend=backend, poll_interval=0.05)
    assert wait_until(lambda: row(engine, parent)["state"] == "done", 15)
    origin = row(engine, children[0])["origin"]
    assert origin["parent_job"] == parent
    assert origin["site"].startswith(f"{HERE}:") and origin["site"].endswith(
        " in test_a_job_enqueued_by_a_job_names_its_parent.handler"
    )


def test_about_and_origin_survive_the_outbox(backend: str, engine: Backend) -> None:
    with in_transaction(engine):
        job_id = queue.enqueue("origin", {}, about=ORDER, backend=backend).job_id
    relay(engine)
    info = row(engine, job_id)
    assert info["about"] == "django_blamequeue.schedule:7"
    assert info["origin"]["site"].startswith(f"{HERE}:")
    assert [j.job_id for j in queue.jobs_about(ORDER, backend=backend)] == [job_id]


def test_flow_jobs_name_their_flow_and_what_they_are_about(backend: str, engine: Backend) -> None:
    flow = queue.enqueue_flow(
        "origin-flow",
        [{"name": "a", "about": ORDER}, {"name": "b", "depends_on": ["a"]}],
        backend=backend,
    )
    a, b = (j["job_id"] for j in flow["jobs"])
    assert row(engine, a)["origin"]["flow"] == row(engine, b)["origin"]["flow"] == flow["flow_id"]
    assert row(engine, a)["about"] == about_key(ORDER) and row(engine, b)["about"] is None
