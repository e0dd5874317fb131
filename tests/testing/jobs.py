"""Jobs the testing-helper tests enqueue, as a project's jobs.py would declare them."""

from __future__ import annotations

from typing import Any

from django_blamequeue import Child, current_job, flow, job

CALLS: list[tuple[str, Any]] = []


@job(queue="emails", name="tests.testing.send_welcome")
def send_welcome(payload: dict[str, Any]) -> dict[str, Any]:
    CALLS.append(("send_welcome", payload))
    return {"sent": payload["to"]}


@job(queue="emails", name="tests.testing.flaky", max_attempts=3)
def flaky(payload: dict[str, Any]) -> str:
    attempt = current_job().attempt
    CALLS.append(("flaky", attempt))
    if attempt < payload["succeed_on"]:
        raise ConnectionError(f"attempt {attempt} failed")
    return f"ok on {attempt}"


@job(queue="emails", name="tests.testing.chain")
def chain(payload: dict[str, Any]) -> None:
    """Enqueues a follow-up job: run_jobs runs it in the same call."""
    CALLS.append(("chain", payload["n"]))
    if payload["n"] > 0:
        chain.enqueue({"n": payload["n"] - 1})


@job(queue="reports", name="tests.testing.step")
def step(payload: dict[str, Any]) -> str:
    CALLS.append(("step", payload["name"]))
    return payload["name"]


@job(queue="reports", name="tests.testing.page", max_attempts=1)
def page(payload: dict[str, Any]) -> int:
    CALLS.append(("page", payload["page"]))
    return int(payload["page"]) * 10


@flow(queue="reports", name="tests.testing.report")
class Report:
    def fan_out(self, payload: dict[str, Any]) -> list[Child]:
        return [Child(page, {"page": i}, key=f"p{i}") for i in range(payload["pages"])]

    def collect(self, payload: dict[str, Any], state: Any) -> dict[str, Any]:
        return {"total": sum(state.results.values()), "completed": state.completed}


# -- handlers for the chaos runs (tests/testing/test_chaos.py) -------------------------------
def _write(tag: str) -> dict[str, int]:
    from tests.procapp.models import Write

    ctx = current_job()
    db = ctx.backend.effects_database  # the job's own database: the one atomic=True covers
    Write.objects.using(db).create(job_id=ctx.job_id, attempt=ctx.attempt, token=ctx.token, tag=tag)
    return {"attempt": ctx.attempt}


@job(queue="chaos", name="tests.testing.naive_charge")
def naive_charge(payload: dict[str, Any]) -> dict[str, int]:
    """Writes every time it runs: a redelivery doubles its effect."""
    return _write("naive")


@job(queue="chaos", name="tests.testing.atomic_charge", atomic=True)
def atomic_charge(payload: dict[str, Any]) -> dict[str, int]:
    """The same write, committed only with the job's completion."""
    return _write("atomic")


@job(queue="chaos", name="tests.testing.idempotent_charge")
def idempotent_charge(payload: dict[str, Any]) -> dict[str, int]:
    """Writes once per job id, whatever the deliveries (a plain handler made idempotent)."""
    from tests.procapp.models import Write

    ctx = current_job()
    Write.objects.using(ctx.backend.effects_database).get_or_create(
        job_id=ctx.job_id, tag="idempotent", defaults={"attempt": ctx.attempt, "token": ctx.token}
    )
    return {"attempt": ctx.attempt}


@job(queue="pages", name="tests.testing.resumable", max_attempts=3)
async def resumable(payload: dict[str, Any]) -> dict[str, Any]:
    """An async job that checkpoints, fails its first attempt and resumes in the second."""
    from django_blamequeue.models import AuditEvent

    ctx = current_job()
    CALLS.append(("resumable", ctx.last_checkpoint))
    seen = await AuditEvent.objects.filter(job_id=ctx.job_id).acount()  # the async ORM
    if ctx.attempt == 1:
        await ctx.acheckpoint({"page": 1})
        ctx.checkpoint({"page": 2})  # held: stored with the attempt's end
        raise ConnectionError("page 3 timed out")
    return {"resumed_at": ctx.last_checkpoint, "audit_rows": seen}


HOOKED: list[tuple[str, str, int | None]] = []


def _record_success(event: Any) -> None:
    HOOKED.append(("success", event.job_id, event.attempt))


def _record_failure(event: Any) -> None:
    HOOKED.append(("failure", event.job_id, event.attempt))


@job(queue="chaos", name="tests.testing.hooked", on_success=_record_success)
def hooked(payload: dict[str, Any]) -> str:
    return "ok"


@job(queue="chaos", name="tests.testing.hooked_fail", max_attempts=2, on_failure=_record_failure)
def hooked_fail(payload: dict[str, Any]) -> None:
    raise ValueError("declined")
