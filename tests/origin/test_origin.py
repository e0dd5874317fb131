"""The blame trail (docs/effects.md): where a job came from — the user's line of code, the request
and user it was enqueued for, the job, schedule or flow that enqueued it."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from typing import Any

import django
import pytest
from django.contrib.auth.models import User
from django.test import Client, override_settings

import django_blamequeue
from django_blamequeue import JobInfo, queue
from django_blamequeue.jobs import origin
from django_blamequeue.middleware import OriginMiddleware

pytestmark = pytest.mark.django_db
URLS = "tests.origin.urls"
WITH_USER = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django_blamequeue.middleware.OriginMiddleware",
]


def job_of(response: Any) -> JobInfo:
    info = queue.get_job(json.loads(response.content)["job_id"])
    assert info is not None
    return info


def test_library_django_and_standard_library_frames_are_never_the_site() -> None:
    assert origin._display(django_blamequeue.__file__) is None
    assert origin._display(django.__file__) is None
    assert origin._display(threading.__file__) is None
    assert origin._display(__file__) == "tests/origin/test_origin.py"


def test_the_site_is_the_nearest_frame_of_user_code() -> None:
    line = sys._getframe().f_lineno + 1
    found = [origin.site() for _ in range(1)]  # called from this test's own frame
    assert found == [
        f"tests/origin/test_origin.py:{line} in test_the_site_is_the_nearest_frame_of_user_code"
    ]


@override_settings(ROOT_URLCONF=URLS)
def test_a_job_enqueued_during_a_request_names_its_method_and_path_with_no_setup() -> None:
    info = job_of(Client().post("/orders/"))
    assert info.origin is not None
    assert info.origin["request"] == "POST /orders/"
    assert info.origin["site"].startswith("tests/origin/urls.py:")
    assert info.origin["site"].endswith(" in place_order")
    assert "user" not in info.origin  # the user needs OriginMiddleware


@override_settings(ROOT_URLCONF=URLS, MIDDLEWARE=WITH_USER)
def test_with_the_middleware_the_trail_names_the_authenticated_user() -> None:
    client = Client()
    client.force_login(User.objects.create_user("alice"))
    info = job_of(client.post("/orders/?x=1"))
    assert info.origin is not None
    assert (info.origin["request"], info.origin["user"]) == ("POST /orders/", "alice")
    assert origin.describe(info.origin).startswith(
        "POST /orders/ by alice at tests/origin/urls.py:"
    )


@override_settings(ROOT_URLCONF=URLS, MIDDLEWARE=WITH_USER)
def test_an_anonymous_request_records_no_user() -> None:
    info = job_of(Client().post("/orders/"))
    assert info.origin is not None and "user" not in info.origin


def test_outside_a_request_nothing_is_said_about_one() -> None:
    info = queue.get_job(queue.enqueue("orders", {}).job_id)
    assert info is not None and info.origin is not None
    assert set(info.origin) == {"site"}


def test_the_async_middleware_sets_the_request_for_the_view() -> None:
    seen: list[Any] = []

    async def view(request: Any) -> str:
        seen.append(origin.capture())
        return "ok"

    class Request:
        method, path = "PUT", "/things/3/"

    middleware = OriginMiddleware(view)
    assert asyncio.run(middleware(Request())) == "ok"
    assert seen[0]["request"] == "PUT /things/3/"


def test_describe_reads_as_a_sentence() -> None:
    assert origin.describe(None) == "unknown"
    assert origin.describe({"schedule": "nightly"}) == "schedule nightly"
    assert (
        origin.describe({"request": "POST /o/", "user": "bob", "site": "a.py:3 in f"})
        == "POST /o/ by bob at a.py:3 in f"
    )
