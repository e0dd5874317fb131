"""Payloads, results and error text encrypted at rest (docs/encryption.md): stored as Fernet
tokens on every backend, opened by any of ``ENCRYPTION_KEYS``, and a job no key opens goes
to the DLQ as ``decrypt_failed`` without harming the worker."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from cryptography.fernet import Fernet
from django.core.management import CommandError, call_command

from django_blamequeue import current_job, queue
from django_blamequeue.backends.base import Backend
from django_blamequeue.core import lifecycle
from django_blamequeue.encryption import PREFIX

from .support import ack, claim_one, outcome, row

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


@pytest.mark.requires("supports_key_rotation")
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
    assert "2 re-encrypted of 2 read" in out  # the progress line of the first batch
    configure(ENCRYPTION_KEYS=[NEW_KEY])
    assert [row(engine, j)["payload"] for j in ids] == [{"card": f"4111-{i}"} for i in range(3)]
    assert row(engine, plain)["payload"] == {"n": 1}
    drain(backend, job.options.queue)
    assert [row(engine, j)["state"] for j in ids] == ["done"] * 3


@pytest.mark.requires("!supports_key_rotation")
def test_rotate_keys_on_a_backend_that_cannot_says_so_and_changes_nothing(
    backend: str, engine: Backend, register: Callable[..., Any], configure: Callable[..., None]
) -> None:
    configure(ENCRYPTION_KEYS=[OLD_KEY])
    job_id = register(charge, encrypted=True).enqueue(CARD, backend=backend).job_id
    configure(ENCRYPTION_KEYS=[NEW_KEY, OLD_KEY])
    with pytest.raises(CommandError, match="KEY_ROTATION_UNSUPPORTED"):
        _rotate(backend)
    configure(ENCRYPTION_KEYS=[OLD_KEY])
    assert row(engine, job_id)["payload"] == CARD


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
