"""What SQS is owed once the ledger commits a batch of acks (``Sender.owed_by_acks``): the
ledger decided each transition; this only says what becomes of each message."""

from __future__ import annotations

from typing import Any

from django_blamequeue.backends.jobtable.table import JobTable
from django_blamequeue.backends.sqs.sender import FollowUps, Sender
from django_blamequeue.backends.sqs.transport import MAX_DELAY, Transport
from django_blamequeue.conf import BackendConfig
from django_blamequeue.core.records import Ack, AckResult, Transition
from django_blamequeue.core.states import State
from django_blamequeue.models import SqsJob


def sender(max_receives: int = 10) -> Sender:
    options = {"DATABASE": "default", "MAX_RECEIVE_COUNT": max_receives}
    table = JobTable(
        SqsJob, BackendConfig(alias="sqs", protocol="sqs", options=options), notifies=False
    )
    return Sender(table, Transport(options), 30.0)


def owed(
    s: Sender, state: State, delay: float = 0.0, receives: int = 1, ok: bool = True
) -> tuple[FollowUps, list[str]]:
    ack = Ack(job_id="j1", token="t1", transition=Transition(state=state, delay=delay))
    held: dict[str, tuple[Any, ...]] = {"j1": ("t1", "r1", "q", receives)}
    result = AckResult(job_id="j1", ok=ok, state=state if ok else None)
    follow = FollowUps()
    return follow, s.owed_by_acks([ack], [result], held, follow)


def test_a_finished_job_has_its_message_deleted_and_a_failed_one_a_copy_in_the_dlq() -> None:
    done, unsent = owed(sender(), State.DONE)
    assert (done.delete, done.to_dlq, unsent) == ({"q": ["r1"]}, [], [])
    failed, _ = owed(sender(), State.FAILED)
    assert (failed.delete, failed.to_dlq) == ({"q": ["r1"]}, ["j1"])


def test_a_retry_hides_its_message_for_the_backoff() -> None:
    retry, unsent = owed(sender(), State.PENDING, delay=4.2)
    assert (retry.visibility, retry.delete, unsent) == ({"q": [("r1", 5)]}, {}, [])


def test_a_retry_past_sqs_delay_or_near_its_receive_cap_gets_a_fresh_message() -> None:
    for follow, unsent in (
        owed(sender(), State.PENDING, delay=MAX_DELAY + 1),
        owed(sender(max_receives=3), State.PENDING, receives=2),
    ):
        assert (follow.delete, follow.send, unsent) == ({"q": ["r1"]}, ["j1"], ["j1"])


def test_a_stale_ack_owes_nothing() -> None:
    follow, unsent = owed(sender(), State.DONE, ok=False)
    assert follow == FollowUps() and unsent == []
