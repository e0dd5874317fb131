"""Payloads, results and error text encrypted at rest (docs/encryption.md): stored as Fernet
tokens on every backend, opened by any of ``ENCRYPTION_KEYS``, and a job no key opens goes
to the DLQ as ``decrypt_failed`` without harming the worker."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cryptography.fernet import Fernet
from django.core.management import call_command

from django_blamequeue import current_job, encryption, queue
from django_blamequeue.backends.base import Backend
from django_blamequeue.core import lifecycle
from django_blamequeue.core.payload import Encoded
from django_blamequeue.encryption import PREFIX, open_text
from django_blamequeue.exceptions import WaitTimeout
from django_blamequeue.models import WorkflowEvent

from .support import ack, claim_one, fail, outcome, row

OLD_KEY, NEW_KEY = Fernet.generate_key().decode(), Fernet.generate_key().decode()
CARD = {"card": "4111-1111-1111-1111"}


def drain(backend: str, name: str) -> None:
    """A real worker in burst mode over the queue, until nothing is left to run."""
    consumer = queue.consume(name, None, backend=backend, poll_interval=0.05, burst=True)
    assert consumer.join(30), "the worker did not finish its burst"


def charge(payload: Any) -> dict[str, str]:
    return {"charged": payload["card"][-4:]}


def test_an_encrypted_job_is_stored_as_ciphertext_and_its_result_too(
    backend: str, engine: Backend, register: Callable[..., Any], configure: Callable[..., None]
) -> None:
    configure(ENCRYPTION_KEYS=[OLD_KEY])
    job = register(charge, encrypted=True)
    job_id = job.enqueue(CARD, backend=backend).job_id
    stored = claim_one(engine, job.options.queue)
    assert stored.payload.content_encoding.startswith(PREFIX)
    assert b"4111" not in stored.payload.body
    ack(engine, stored, outcome(stored, lifecycle.Released()))  # back to pending, unrun
    drain(backend, job.options.queue)
    info = queue.get_job(job_id, backend=backend)
    assert info is not None and info.state == "done" and info.encrypted
    assert (info.payload, info.result) == (CARD, {"charged": "1111"})
    configure(ENCRYPTION_KEYS=[NEW_KEY])  # a key that never saw this job opens nothing
    sealed = row(engine, job_id)
    assert (sealed["payload"], sealed["result"]) == (None, None)


def test_an_encrypted_job_keeps_its_error_text_encrypted(
    backend: str, engine: Backend, register: Callable[..., Any], configure: Callable[..., None]
) -> None:
    configure(ENCRYPTION_KEYS=[OLD_KEY])

    def decline(payload: Any) -> None:
        raise ValueError(f"card {payload['card']} declined")

    job = register(decline, encrypted=True, max_attempts=1)
    job_id = job.enqueue(CARD, backend=backend).job_id
    drain(backend, job.options.queue)
    failed = row(engine, job_id)
    assert failed["state"] == "failed"
    assert failed["error"] == "ValueError: card 4111-1111-1111-1111 declined"
    assert "declined" in failed["traceback"]
    configure(ENCRYPTION_KEYS=[NEW_KEY])
    sealed = row(engine, job_id)
    assert "4111" not in sealed["error"] and "4111" not in sealed["traceback"]


def test_a_new_first_key_encrypts_while_the_old_one_still_opens_waiting_jobs(
    backend: str, engine: Backend, register: Callable[..., Any], configure: Callable[..., None]
) -> None:
    configure(ENCRYPTION_KEYS=[OLD_KEY])
    job = register(charge, encrypted=True)
    job_id = job.enqueue(CARD, backend=backend).job_id
    configure(ENCRYPTION_KEYS=[NEW_KEY, OLD_KEY])  # rotation: deployed with no downtime
    drain(backend, job.options.queue)
    assert row(engine, job_id)["result"] == {"charged": "1111"}
    configure(ENCRYPTION_KEYS=[NEW_KEY])  # the result was written with the new key
    assert row(engine, job_id)["result"] == {"charged": "1111"}


def test_a_job_no_key_opens_goes_to_the_dlq_as_decrypt_failed_and_the_worker_goes_on(
    backend: str, engine: Backend, register: Callable[..., Any], configure: Callable[..., None]
) -> None:
    configure(ENCRYPTION_KEYS=[OLD_KEY])
    ran: list[Any] = []
    job = register(lambda p: ran.append(p), encrypted=True, max_attempts=3)
    locked = job.enqueue(CARD, backend=backend).job_id
    configure(ENCRYPTION_KEYS=[NEW_KEY])  # the old key was dropped too early
    beside = register(lambda p: ran.append(p), queue=job.options.queue)
    plain = beside.enqueue({"n": 1}, backend=backend).job_id
    drain(backend, job.options.queue)
    failed = row(engine, locked)
    assert (failed["state"], failed["reason"], failed["attempts"]) == (
        "failed",
        "decrypt_failed",
        1,
    )
    assert "none of the 1 ENCRYPTION_KEYS opens it" in failed["error"]
    assert row(engine, plain)["state"] == "done" and ran == [{"n": 1}]


def test_rotate_keys_re_encrypts_stored_jobs_so_the_old_key_can_go(
    backend: str, engine: Backend, register: Callable[..., Any], configure: Callable[..., None]
) -> None:
    configure(ENCRYPTION_KEYS=[OLD_KEY])
    job = register(charge, encrypted=True)
    ids = [job.enqueue({"card": f"4111-{i}"}, backend=backend).job_id for i in range(3)]
    plain = queue.enqueue(job.options.queue, {"n": 1}, backend=backend).job_id
    configure(ENCRYPTION_KEYS=[NEW_KEY, OLD_KEY])
    out = _rotate(backend, "--batch", "2")
    assert "3 job(s) re-encrypted with the first key" in out
    assert " re-encrypted of " in out  # a progress line per batch
    configure(ENCRYPTION_KEYS=[NEW_KEY])
    assert [row(engine, j)["payload"] for j in ids] == [{"card": f"4111-{i}"} for i in range(3)]
    assert row(engine, plain)["payload"] == {"n": 1}
    drain(backend, job.options.queue)
    assert [row(engine, j)["state"] for j in ids] == ["done"] * 3


def test_after_rotate_keys_nothing_stored_needs_the_removed_key(
    backend: str, engine: Backend, register: Callable[..., Any], configure: Callable[..., None]
) -> None:
    configure(ENCRYPTION_KEYS=[OLD_KEY], BACKOFF_BASE=3600, BACKOFF_MAX=3600)

    def bill(payload: Any) -> dict[str, str]:
        current_job().checkpoint({"at": payload["card"]})
        if payload.get("decline"):
            raise ValueError(f"card {payload['card']} declined")
        return charge(payload)

    once = register(bill, encrypted=True, max_attempts=1)
    twice = register(bill, encrypted=True, max_attempts=2, queue=once.options.queue)
    done = once.enqueue(CARD, backend=backend).job_id
    failed = once.enqueue({**CARD, "decline": True}, backend=backend).job_id
    retried = twice.enqueue({**CARD, "decline": True}, backend=backend).job_id
    drain(backend, once.options.queue)
    waiting = once.enqueue({"card": "5500-0000"}, backend=backend).job_id
    configure(ENCRYPTION_KEYS=[NEW_KEY, OLD_KEY], BACKOFF_BASE=3600, BACKOFF_MAX=3600)
    out = _rotate(backend)
    assert "4 job(s) re-encrypted with the first key" in out
    # SQS: the waiting job's sent message keeps its old body (nothing reads it), and says so
    assert ("1 unfinished job(s) keep a sent message" in out) == (engine.protocol == "sqs")
    configure(ENCRYPTION_KEYS=[NEW_KEY])  # the old key is gone
    declined = "ValueError: card 4111-1111-1111-1111 declined"
    got = {j: row(engine, j) for j in (done, failed, retried, waiting)}
    assert (got[done]["state"], got[done]["payload"]) == ("done", CARD)
    assert (got[done]["result"], got[done]["checkpoint"]) == (
        {"charged": "1111"},
        {"at": CARD["card"]},
    )
    for j in (failed, retried):
        assert (got[j]["state"], got[j]["error"]) == (
            "failed" if j == failed else "pending",
            declined,
        )
        assert "declined" in got[j]["traceback"] and got[j]["checkpoint"] == {"at": CARD["card"]}
        kept = engine.attempts(j)
        assert [open_text(a.error) for a in kept] == [declined]
        assert all("declined" in (open_text(a.traceback) or "") for a in kept)
    assert got[waiting]["payload"] == {"card": "5500-0000"}


def test_an_ack_between_the_rotations_read_and_its_write_wins(
    backend: str, engine: Backend, register: Callable[..., Any], configure: Callable[..., None]
) -> None:
    configure(ENCRYPTION_KEYS=[OLD_KEY])
    job = register(charge, encrypted=True, max_attempts=3)
    job_id = job.enqueue(CARD, backend=backend).job_id
    configure(ENCRYPTION_KEYS=[NEW_KEY, OLD_KEY])
    raced: list[str] = []

    def rotate_after_an_ack(encoded: Encoded) -> Encoded:
        if not raced:  # between the read and the write: a worker claims it and fails it
            c = claim_one(engine, job.options.queue)
            assert fail(engine, c, ValueError("declined by the bank")).ok
            raced.append(c.job_id)
        return encryption.rotate(encoded) or encoded

    seen = rewritten = 0
    after: str | None = ""
    while after is not None:  # every batch (a SCAN's may hold none of this test's jobs)
        step = engine.rotate_keys(rotate_after_an_ack, lambda t: t, after=after, limit=50)
        seen, rewritten, after = seen + step.seen, rewritten + step.rewritten, step.last_id
    assert raced == [job_id] and (seen, rewritten) == (1, 0)
    stored = row(engine, job_id)
    assert (stored["state"], stored["attempts"]) == ("pending", 1)
    assert stored["error"] == "ValueError: declined by the bank"  # the ack's write survived
    configure(ENCRYPTION_KEYS=[OLD_KEY])  # the payload is still the one the old key sealed
    assert row(engine, job_id)["payload"] == CARD


def test_an_encrypted_jobs_checkpoint_is_stored_sealed_and_resumed_from(
    backend: str, engine: Backend, register: Callable[..., Any], configure: Callable[..., None]
) -> None:
    configure(ENCRYPTION_KEYS=[OLD_KEY], BACKOFF_BASE=0.01, BACKOFF_MAX=0.01)
    seen: list[Any] = []
    handed: list[str | None] = []  # the text the engine handed over with each claim

    def resume(payload: Any) -> Any:
        ctx = current_job()
        handed.append(ctx.previous_checkpoint)
        seen.append(ctx.last_checkpoint)
        if ctx.attempt == 1:
            ctx.checkpoint({"card": payload["card"], "at": 3}, wait=True)
            raise RuntimeError("step 4 failed")
        return ctx.last_checkpoint

    job = register(resume, encrypted=True, max_attempts=2)
    job_id = job.enqueue(CARD, backend=backend).job_id
    drain_until_done(backend, job.options.queue, job_id)
    stored = {"card": CARD["card"], "at": 3}
    assert seen == [None, stored] and row(engine, job_id)["result"] == stored
    token = handed[1]
    assert token is not None and token.startswith("fernet:") and "4111" not in token
    configure(ENCRYPTION_KEYS=[NEW_KEY])  # a key that never saw it opens nothing: sealed
    assert row(engine, job_id)["checkpoint"] is None


def drain_until_done(backend: str, name: str, job_id: str) -> None:
    """Burst workers over the queue until the job is done (a retry may come due after one)."""
    for _ in range(50):
        drain(backend, name)
        info = queue.get_job(job_id, backend=backend)
        if info is not None and info.state == "done":
            return
    raise AssertionError(f"job {job_id} did not finish")


def _rotate(backend: str, *args: str) -> str:
    from io import StringIO

    out, err = StringIO(), StringIO()
    call_command("blamequeue", "--backend", backend, "rotate-keys", *args, stdout=out, stderr=err)
    return out.getvalue()


def test_an_encrypted_workflow_keeps_its_step_results_encrypted_too(
    backend: str, engine: Backend, register: Callable[..., Any], configure: Callable[..., None]
) -> None:
    configure(ENCRYPTION_KEYS=[OLD_KEY])

    def checkout(payload: Any) -> list[Any]:
        ctx = current_job()
        card = ctx.step("tokenize", lambda: {"card": payload["card"]})
        return [card, ctx.step("charge", charge, card)]

    job = register(checkout, durable=True, encrypted=True)
    job_id = job.enqueue(CARD, backend=backend).job_id
    drain(backend, job.options.queue)
    assert row(engine, job_id)["result"] == [CARD, {"charged": "1111"}]
    steps = queue.workflow_steps(job_id, backend)
    assert [s.status for s in steps] == ["done", "done"]
    assert all(s.preview.startswith("fernet:") and "4111" not in s.preview for s in steps)


def test_events_are_sealed_where_encrypt_is_on_and_an_encrypted_workflow_keeps_them_sealed(
    backend: str, engine: Backend, register: Callable[..., Any], configure: Callable[..., None]
) -> None:
    configure(ENCRYPTION_KEYS=[OLD_KEY], ENCRYPT=["billing"])  # this deployment encrypts

    def ship(payload: Any) -> Any:
        ctx = current_job()
        try:
            ctx.wait_for_event("never", key="o-0", timeout=0.001)
        except WaitTimeout as exc:
            late = str(exc)
        return [ctx.wait_for_event("paid", key="o-9", timeout=3600), late]

    events = WorkflowEvent.objects.using(engine.effects_database)
    sealed = queue.send_event("paid", key="o-9", payload=CARD, backend=backend)
    plain = queue.send_event("paid", key="o-8", payload=CARD, backend=backend, encrypted=False)
    assert events.get(id=sealed).payload.startswith("fernet:")
    assert "4111" not in events.get(id=sealed).payload
    assert events.get(id=plain).payload == '{"card":"4111-1111-1111-1111"}'
    job = register(ship, durable=True, encrypted=True)
    job_id = job.enqueue({}, backend=backend).job_id
    drain_until_done(backend, job.options.queue, job_id)
    paid, late = row(engine, job_id)["result"]
    assert paid == CARD and "WaitTimeout: no event 'never'" in late
    steps = queue.workflow_steps(job_id, backend)
    assert [s.status for s in steps] == ["timed_out", "done"]
    assert steps[0].error is not None and steps[0].error.startswith("fernet:")  # timeout text
    assert steps[1].preview.startswith("fernet:") and "4111" not in steps[1].preview


def test_rotate_keys_re_encrypts_workflow_steps_and_waiting_events(
    backend: str, engine: Backend, register: Callable[..., Any], configure: Callable[..., None]
) -> None:
    configure(ENCRYPTION_KEYS=[OLD_KEY], ENCRYPT=True)

    def checkout(payload: Any) -> list[Any]:
        ctx = current_job()
        card = ctx.step("tokenize", lambda: {"card": payload["card"]})
        return [card, ctx.wait_for_event("paid", key="o-7", timeout=3600)]

    job = register(checkout, durable=True, encrypted=True)
    job_id = job.enqueue(CARD, backend=backend).job_id
    drain(backend, job.options.queue)  # the step is recorded; the wait parks it
    assert row(engine, job_id)["state"] == "pending"
    queue.send_event("paid", key="o-7", payload={"ok": True}, backend=backend)  # sealed
    configure(ENCRYPTION_KEYS=[NEW_KEY, OLD_KEY], ENCRYPT=True)
    assert "workflow step(s) and " in _rotate(backend)
    configure(ENCRYPTION_KEYS=[NEW_KEY], ENCRYPT=True)  # the replay opens both with the new key
    drain_until_done(backend, job.options.queue, job_id)
    assert row(engine, job_id)["result"] == [CARD, {"ok": True}]
