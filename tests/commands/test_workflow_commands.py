"""``blamequeue workflow show | rerun | cancel | send-event`` and ``blamequeue send-event``:
the timeline as text, a re-run from step N, an event delivered from the command line
(docs/workflows.md)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from django_blamequeue import current_job, job, queue
from django_blamequeue.backends import get_backend
from django_blamequeue.jobs import registry
from django_blamequeue.models import AuditEvent
from django_blamequeue.worker import chaos

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

QUEUE = "cli-wf"


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def run_next() -> None:
    """Claim the workflow's next attempt and run it here, as a worker would."""
    engine = get_backend("default")
    [claimed] = engine.claim([QUEUE], 1, 30)
    chaos.run_claimed(engine, claimed, None, engine.now())


def double(n: int) -> int:
    return 2 * n


@pytest.fixture
def order() -> Iterator[Any]:
    @job(queue=QUEUE, name="tests.cli.order", durable=True, max_attempts=3)
    def fulfil(payload: dict[str, Any]) -> Any:
        ctx = current_job()
        reserved = ctx.step("reserve", double, 1)
        charged = ctx.step("charge", double, reserved)
        picked = ctx.wait_for_event("carrier.picked_up", key=payload["order"], timeout=3600)
        return {"charged": charged, "picked": picked}

    yield fulfil
    registry.unregister("tests.cli.order")


def test_send_event_wakes_the_workflow_and_show_prints_its_timeline(order: Any) -> None:
    job_id = order.enqueue({"order": "o-9"}).job_id
    run_next()  # two steps, then parks on the wait
    out = run("blamequeue", "workflow", "show", job_id)
    assert f"workflow {job_id}  tests.cli.order" in out
    assert "1. ✓ reserve  step done" in out and "result 1 B: 2" in out
    assert "3. ⋯ event:carrier.picked_up  event waiting" in out
    assert "waits for event carrier.picked_up:o-9, until" in out
    sent = run(
        "blamequeue", "send-event", "carrier.picked_up", "--key", "o-9", "--payload", '"1Z9"'
    )
    assert "sent event 'carrier.picked_up' key 'o-9'" in sent
    run_next()
    assert queue.get_job(job_id).result == {"charged": 4, "picked": "1Z9"}  # type: ignore[union-attr]
    shown = run("blamequeue", "workflow", "show", job_id)
    assert "3. ✓ event:carrier.picked_up  event done" in shown
    [audited] = AuditEvent.objects.filter(action="system.queue.workflow.event")
    assert audited.user.startswith("cli")


def test_rerun_from_step_n_starts_a_new_job_and_is_audited_with_the_user(order: Any) -> None:
    job_id = order.enqueue({"order": "o-10"}).job_id
    run("blamequeue", "workflow", "send-event", "carrier.picked_up", "--key", "o-10")
    run_next()
    assert queue.get_job(job_id).state == "done"  # type: ignore[union-attr]
    out = run("blamequeue", "workflow", "rerun", job_id, "--from-step", "2")
    new_id = out.split(" as ")[1].split()[0]
    assert f"re-running {job_id} from step 2 as {new_id}" in out
    [audited] = AuditEvent.objects.filter(action="system.queue.workflow.rerun")
    assert audited.job_id == new_id and audited.user.startswith("cli")
    shown = run("blamequeue", "workflow", "show", new_id)
    assert "1. ✓ reserve" in shown and "charge" not in shown  # step 1 kept, 2.. to run again


def test_cancel_ends_a_waiting_workflow_and_bad_input_is_a_clear_error(order: Any) -> None:
    job_id = order.enqueue({"order": "o-11"}).job_id
    run_next()
    with pytest.raises(CommandError, match="re-run a workflow once it ended"):
        run("blamequeue", "workflow", "rerun", job_id, "--from-step", "1")
    assert f"{job_id}: cancelled" in run("blamequeue", "workflow", "cancel", job_id)
    with pytest.raises(CommandError, match="from_step must be from 1 to 4"):
        run("blamequeue", "workflow", "rerun", job_id, "--from-step", "9")
    with pytest.raises(CommandError, match="--payload is not JSON"):
        run("blamequeue", "send-event", "x", "--payload", "{nope")
    with pytest.raises(CommandError, match="no job"):
        run("blamequeue", "workflow", "show", "01J0000000000000000000000X")
