"""A webhook fan-out routed per call (the shape of saleor's webhook delivery, re-written): one
event is delivered to every subscribed app, each delivery on the queue its app was given, with
the Celery options the call used to carry. ``ROUTES`` places the deliveries of apps with no
queue of their own, and a plain ``runworker`` serves that routed queue."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from pytest_django import Settings as SettingsWrapper

from django_blamequeue import EnqueuedJob, job
from django_blamequeue.exceptions import ErrorCode, QueueError
from django_blamequeue.jobs import registry
from django_blamequeue.models import Job
from django_blamequeue.testing import capture_jobs

pytestmark = pytest.mark.django_db(transaction=True)
delivered: list[tuple[str, str, str]] = []


@dataclass(frozen=True)
class Subscriber:
    app: str
    target_url: str
    queue: str | None  # the app's own delivery queue, if it was given one


@pytest.fixture(autouse=True)
def deliver() -> Iterator[Any]:
    delivered.clear()

    @job(queue="webhooks", name="shop.webhooks.deliver", max_attempts=5)
    def deliver(target_url: str, event: str, data: dict[str, Any]) -> int:
        delivered.append((target_url, event, data["order"]))
        return 200

    yield deliver
    registry.unregister("shop.webhooks.deliver")


def trigger_webhooks(deliver: Any, event: str, data: Any, subs: list[Subscriber]) -> list[Any]:
    """The project's caller, as it called Celery: per-call queue, expiry, compression."""
    return [
        deliver.apply_async(
            kwargs={"target_url": s.target_url, "event": event, "data": data},
            queue=s.queue,  # None: the route, else the job's own
            expires=600,
            compression="zlib",  # accepted, no meaning here
            headers={"app": s.app},
        )
        for s in subs
    ]


def test_each_delivery_goes_to_its_app_s_queue_or_the_route_and_runs(
    settings: SettingsWrapper, deliver: Any
) -> None:
    settings.BLAMEQUEUE = {**settings.BLAMEQUEUE, "ROUTES": {"shop.webhooks.*": "webhooks-out"}}
    subs = [
        Subscriber("erp", "https://erp.example/hook", "app-erp"),
        Subscriber("mailer", "https://mail.example/hook", None),
    ]
    with capture_jobs() as captured:
        handles: list[EnqueuedJob] = trigger_webhooks(
            deliver, "order.created", {"order": "A1"}, subs
        )
        assert [h.queue_name for h in handles] == ["app-erp", "webhooks-out"]
        assert "webhooks-out" in registry.queues()  # a plain runworker serves the route
        report = captured.run_jobs()
    assert sorted(delivered) == [
        ("https://erp.example/hook", "order.created", "A1"),
        ("https://mail.example/hook", "order.created", "A1"),
    ]
    assert [a.state for a in report.attempts] == ["done", "done"]
    assert all(h.info().expires_at is not None for h in handles)  # type: ignore[union-attr]


def test_a_celery_option_with_a_replacement_is_refused_by_name_and_nothing_is_sent(
    deliver: Any,
) -> None:
    with pytest.raises(QueueError) as caught:
        deliver.apply_async(
            kwargs={"target_url": "https://x.example", "event": "e", "data": {"order": "B"}},
            link_error="shop.webhooks.on_error",
        )
    assert caught.value.code == ErrorCode.BAD_ARGUMENT
    assert "link_error=" in caught.value.message and "@flow" in caught.value.message
    assert not Job.objects.exists()
