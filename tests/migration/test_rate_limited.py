"""A rate-limited task (the shape of pretix's calls to a partner API that allows a few requests a
minute, re-written): ``@job(rate_limit="2/m")`` holds across workers and across the queues the
calls were routed to, and the other jobs of those queues are not held up behind it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from django_blamequeue import QueueLimits, job
from django_blamequeue.backends import get_backend
from django_blamequeue.jobs import registry

pytestmark = pytest.mark.django_db(transaction=True)
QUEUES = ["mail", "mail-bulk"]


@pytest.fixture(autouse=True)
def tasks() -> Iterator[tuple[Any, Any]]:
    @job(queue="mail", name="tix.tasks.notify_partner", rate_limit="2/m")
    def notify_partner(order_code: str) -> None: ...

    @job(queue="mail", name="tix.tasks.send_mail")
    def send_mail(to: str) -> None: ...

    yield notify_partner, send_mail
    registry.unregister("tix.tasks.notify_partner")
    registry.unregister("tix.tasks.send_mail")


def test_the_partner_api_gets_two_calls_a_minute_and_mail_goes_on(
    tasks: tuple[Any, Any],
) -> None:
    notify_partner, send_mail = tasks
    for code in ("A1", "A2"):
        notify_partner.delay(code)
    for code in ("B1", "B2"):
        notify_partner.apply_async([code], queue="mail-bulk")
    send_mail.delay("x@example.com")
    send_mail.delay("y@example.com")
    engine = get_backend(None)
    # what every worker with these jobs passes to its claims
    limits = {q: QueueLimits(name_rate_limits=registry.rate_limits()) for q in QUEUES}

    def claim(after: float) -> list[str]:
        now = start + timedelta(seconds=after)
        return sorted(
            c.name.rsplit(".", 1)[1] for c in engine.claim(QUEUES, 10, 30, now, limits=limits)
        )

    start = engine.now()
    assert claim(0) == ["notify_partner", "notify_partner", "send_mail", "send_mail"]
    assert claim(1) == []  # a second worker gets nothing of the partner's this minute
    assert claim(59) == []
    assert claim(61) == ["notify_partner", "notify_partner"]
