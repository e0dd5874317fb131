"""What only the SQS backend has: queues made on demand with a DLQ, the MaximumMessageSize cap,
messages and the ledger disagreeing (duplicates, strays, parked delays, old receipts), the cost
of the ledger, and SQS going away. Real moto_server over HTTP; the ledger on SQLite and on
PostgreSQL. The lifecycle itself is the conformance suite's (tests/conformance)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connections, transaction
from django.test.utils import CaptureQueriesContext

from django_blamequeue import queue
from django_blamequeue.backends.sqs import SqsBackend
from django_blamequeue.backends.sqs import messages as sqs_messages
from django_blamequeue.backends.sqs.transport import sqs_name
from django_blamequeue.core.records import Ack, Transition
from django_blamequeue.core.states import State
from django_blamequeue.exceptions import ErrorCode, QueueError
from django_blamequeue.models import OutboxEntry
from django_blamequeue.relay.outbox import Relay
from django_blamequeue.testing import wait_until
from tests.servers import MotoServer

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

DONE = Transition(state=State.DONE)


# -- helpers ----------------------------------------------------------------------------------
def counts(b: SqsBackend, q: str, *, dlq: bool = False) -> dict[str, int]:
    """SQS's own view of a queue: visible, in flight (hidden) and delayed messages."""
    info = b.transport.queue(q)
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    names.append("ApproximateNumberOfMessagesDelayed")
    attrs = b.transport.client.get_queue_attributes(
        QueueUrl=info.dlq_url if dlq else info.url, AttributeNames=names
    )["Attributes"]
    visible, hidden, delayed = (int(attrs[n]) for n in names)
    return {"visible": visible, "hidden": hidden, "delayed": delayed}


def ledger(b: SqsBackend, job_id: str) -> dict[str, Any]:
    row: dict[str, Any] = b.jobtable.jobs().filter(id=job_id).values().get()
    return row


def create_queue(b: SqsBackend, q: str, **attributes: str) -> None:
    """Make ``q``'s SQS queue ourselves, as an operator would, before the backend uses it."""
    b.transport.client.create_queue(
        QueueName=sqs_name(b.transport.prefix, q), Attributes=attributes
    )


def send_copy(b: SqsBackend, job_id: str) -> None:
    """A second message of a job, as a relay or send step that ran twice would send."""
    row = b.jobtable.jobs().filter(id=job_id).values_list(*sqs_messages.SEND_COLUMNS).get()
    b.transport.send(row[1], [sqs_messages.outgoing(sqs_messages.of_row(row), job_id)])


# -- queues -----------------------------------------------------------------------------------
def test_queues_are_created_on_demand_with_the_prefix_a_dlq_and_a_redrive_policy(
    configure_sqs: Any,
) -> None:
    b = configure_sqs(MAX_RECEIVE_COUNT=7)
    queue.enqueue("made", {}, backend="sqs")
    client, prefix = b.transport.client, b.transport.prefix
    names = {u.rsplit("/", 1)[-1] for u in client.list_queues(QueueNamePrefix=prefix)["QueueUrls"]}
    assert names == {f"{prefix}made", f"{prefix}made-dlq"}
    url = client.get_queue_url(QueueName=f"{prefix}made")["QueueUrl"]
    attrs = client.get_queue_attributes(QueueUrl=url, AttributeNames=["RedrivePolicy"])
    policy = json.loads(attrs["Attributes"]["RedrivePolicy"])
    assert int(policy["maxReceiveCount"]) == 7
    assert policy["deadLetterTargetArn"].endswith(f":{prefix}made-dlq")


def test_queue_names_sqs_cannot_hold_map_to_valid_deterministic_names(sqs: SqsBackend) -> None:
    assert sqs_name("app-", "emails") == "app-emails"
    odd = ["reports.v2:high", "x" * 200, "mail-dlq", "a.b", "a_b"]
    names = [sqs_name("app-", q) for q in odd]
    assert names == [sqs_name("app-", q) for q in odd]  # the same in every process
    assert len(set(names)) == len(odd)  # "a.b" and "a_b" do not collide
    for name in names:
        assert len(name + "-dlq") <= 80 and name.startswith("app-")
        assert all(c.isalnum() or c in "-_" for c in name)
    job_id = queue.enqueue("reports.v2:high", {"n": 1}, backend="sqs").job_id
    [c] = sqs.claim(["reports.v2:high"], 10, 30)
    assert (c.job_id, c.queue) == (job_id, "reports.v2:high")


# -- the size cap -----------------------------------------------------------------------------
def test_a_message_over_the_queues_maximum_size_is_refused_before_anything_is_written(
    sqs: SqsBackend,
) -> None:
    create_queue(sqs, "small", MaximumMessageSize="1024")
    ascii_payload, accented = "e" * 600, "é" * 600  # same characters, 600 vs 1200 bytes
    queue.enqueue("small", ascii_payload, backend="sqs")
    for attempt in ("direct", "in a transaction (outbox)"):
        with pytest.raises(QueueError) as caught:
            if attempt == "direct":
                queue.enqueue("small", accented, backend="sqs")
            else:
                with transaction.atomic(using=sqs.db):
                    queue.enqueue("small", accented, backend="sqs")
        assert caught.value.code == ErrorCode.PAYLOAD_TOO_LARGE
        assert "MaximumMessageSize" in str(caught.value)
    assert sqs.jobtable.jobs().filter(queue="small").count() == 1  # the ASCII one
    assert OutboxEntry.objects.using(sqs.db).count() == 0
    assert sum(counts(sqs, "small").values()) == 1


def test_a_queue_created_larger_takes_a_larger_payload(sqs: SqsBackend) -> None:
    create_queue(sqs, "narrow", MaximumMessageSize="2048")
    create_queue(sqs, "wide", MaximumMessageSize="8192")
    payload = "x" * 4000
    with pytest.raises(QueueError) as caught:
        queue.enqueue("narrow", payload, backend="sqs")
    assert caught.value.code == ErrorCode.PAYLOAD_TOO_LARGE
    job_id = queue.enqueue("wide", payload, backend="sqs").job_id
    [c] = sqs.claim(["wide"], 10, 30)
    assert c.job_id == job_id


def test_send_batches_stay_within_the_byte_cap(sqs: SqsBackend) -> None:
    create_queue(sqs, "bulk", MaximumMessageSize="262144")
    sizes: list[int] = []

    def measure(params: dict[str, Any], **_: Any) -> None:
        sizes.append(sum(len(e["MessageBody"].encode()) for e in params["Entries"]))

    sqs.transport.client.meta.events.register("provide-client-params.sqs.SendMessageBatch", measure)
    payloads = ["y" * 100_000 for _ in range(10)]  # 1 MB: a single batch would be refused
    ids = [e.job_id for e in queue.enqueue_many("bulk", payloads, backend="sqs")]
    assert len(sizes) >= 4 and max(sizes) <= 262_144
    claimed = sqs.claim(["bulk"], 10, 30)
    assert sorted(c.job_id for c in claimed) == sorted(ids)


# -- messages and the ledger ------------------------------------------------------------------
def test_two_messages_of_one_job_run_it_once(sqs: SqsBackend) -> None:
    job_id = queue.enqueue("twice", {}, backend="sqs").job_id
    send_copy(sqs, job_id)
    [c] = sqs.claim(["twice"], 10, 2)
    assert counts(sqs, "twice")["hidden"] == 2  # the copy is held for the lease, not deleted
    assert sqs.apply_many([Ack(job_id=job_id, token=c.token, transition=DONE)])[0].ok
    # The copy comes back when its hold ends, finds the job done, and is deleted.
    assert wait_until(
        lambda: not sqs.claim(["twice"], 10, 2) and sum(counts(sqs, "twice").values()) == 0, 15
    )
    row = ledger(sqs, job_id)
    assert (row["state"], row["attempts"]) == ("done", 1)


def test_a_message_with_no_ledger_row_or_not_ours_is_deleted(sqs: SqsBackend) -> None:
    sqs.transport.send("stray", [sqs_messages.outgoing('{"job_id": "nope"}', "01NOSUCHJOB")])
    url = sqs.transport.queue("stray").url
    sqs.transport.client.send_message(QueueUrl=url, MessageBody="not a job")
    assert counts(sqs, "stray")["visible"] == 2
    assert sqs.claim(["stray"], 10, 30) == []
    assert counts(sqs, "stray") == {"visible": 0, "hidden": 0, "delayed": 0}


def test_a_delay_past_15_minutes_is_parked_in_the_ledger_and_sent_when_due(
    sqs: SqsBackend,
) -> None:
    job_id = queue.enqueue("parked", {}, delay=3600, backend="sqs").job_id
    row = ledger(sqs, job_id)
    assert (row["state"], row["sent_at"]) == ("pending", None)
    assert sum(counts(sqs, "parked").values()) == 0  # nothing in SQS yet
    due = row["available_at"]
    assert sqs.send_due(now=due - timedelta(seconds=901)) == 0  # still beyond 15 minutes
    assert sqs.send_due(now=due - timedelta(seconds=600)) == 1  # sent, SQS delays it 600 s
    assert counts(sqs, "parked")["delayed"] == 1
    assert ledger(sqs, job_id)["sent_at"] is not None
    # Sent again at its due time (as after a lost message): no delay left, claimable at once.
    sqs.jobtable.jobs().filter(id=job_id).update(sent_at=None)
    assert sqs.send_due(now=due) == 1
    [c] = sqs.claim(["parked"], 10, 30, now=due)
    assert c.job_id == job_id


def test_a_retry_backoff_past_15_minutes_parks_the_job(sqs: SqsBackend) -> None:
    job_id = queue.enqueue("slow-retry", {}, backend="sqs").job_id
    [c] = sqs.claim(["slow-retry"], 10, 30)
    retry = Transition(state=State.PENDING, delay=1800, error="later", reason=None)
    [r] = sqs.apply_many([Ack(job_id=job_id, token=c.token, transition=retry)])
    assert r.ok and r.state == State.PENDING
    assert sum(counts(sqs, "slow-retry").values()) == 0  # the message was deleted
    row = ledger(sqs, job_id)
    assert row["sent_at"] is None
    assert sqs.send_due(now=row["available_at"]) == 1
    assert sqs.claim(["slow-retry"], 10, 30, now=row["available_at"])[0].attempt == 2


def test_an_old_receipt_handle_cannot_ack_the_ledger_fence_refuses_it(sqs: SqsBackend) -> None:
    job_id = queue.enqueue("fence", {}, backend="sqs").job_id
    now = sqs.now()
    [first] = sqs.claim(["fence"], 1, 30, now=now)
    old_receipt = ledger(sqs, job_id)["receipt_handle"]
    later = now + timedelta(seconds=31)
    assert sqs.rescue_expired(now=later, max_stalled=5).repended == 1
    [second] = sqs.claim(["fence"], 1, 30, now=later)
    assert (second.attempt, second.token != first.token) == (2, True)
    # SQS itself still honours the old holder's receipt handle (moto accepts any old one):
    url = sqs.transport.queue("fence").url
    sqs.transport.client.change_message_visibility(
        QueueUrl=url, ReceiptHandle=old_receipt, VisibilityTimeout=30
    )
    before = ledger(sqs, job_id)
    [stale] = sqs.apply_many([Ack(job_id=job_id, token=first.token, transition=DONE)], now=later)
    assert not stale.ok and ledger(sqs, job_id) == before
    assert counts(sqs, "fence")["hidden"] == 1  # the message was not deleted either
    [fresh] = sqs.apply_many([Ack(job_id=job_id, token=second.token, transition=DONE)], now=later)
    assert fresh.ok and sum(counts(sqs, "fence").values()) == 0


def test_renewal_keeps_the_message_hidden_past_its_first_visibility(sqs: SqsBackend) -> None:
    kept = queue.enqueue("renew", {"keep": True}, backend="sqs").job_id
    [c] = sqs.claim(["renew"], 1, 1)  # hidden for 2 s
    assert sqs.renew_leases([(kept, c.token)], 30) == frozenset()
    assert sqs.extend_lease(kept, c.token, 40)
    dropped = queue.enqueue("renew", {"keep": False}, backend="sqs").job_id
    [d] = sqs.claim(["renew"], 1, 1)
    assert d.job_id == dropped
    # Only the unrenewed one comes back (a poll cannot show that the other does not: wait).
    assert wait_until(lambda: counts(sqs, "renew")["visible"] == 1, 10)
    time.sleep(1.5)
    assert counts(sqs, "renew") == {"visible": 1, "hidden": 1, "delayed": 0}
    assert ledger(sqs, kept)["state"] == "inflight"


def test_the_send_step_mends_a_crash_between_the_ledger_insert_and_the_send(
    sqs: SqsBackend,
) -> None:
    job_id = queue.enqueue("crash", {}, backend="sqs").job_id
    # What a crash right after the ledger's commit leaves: a row, no message, sent_at NULL.
    sqs.transport.client.purge_queue(QueueUrl=sqs.transport.queue("crash").url)
    sqs.jobtable.jobs().filter(id=job_id).update(sent_at=None)
    now = sqs.now()
    assert sqs.send_due(now=now) == 0  # within SEND_GRACE: its sender may still be at it
    assert sqs.send_due(now=now + timedelta(seconds=31)) == 1
    assert sqs.claim(["crash"], 10, 30)[0].job_id == job_id


def test_a_pending_job_whose_message_may_have_expired_is_sent_again(sqs: SqsBackend) -> None:
    create_queue(sqs, "retained", MessageRetentionPeriod="3600")
    job_id = queue.enqueue("retained", {}, backend="sqs").job_id
    # An hour later SQS has deleted the message, unreceived; the ledger still says sent.
    sqs.transport.client.purge_queue(QueueUrl=sqs.transport.queue("retained").url)
    sent_at = ledger(sqs, job_id)["sent_at"]
    assert sqs.send_due(now=sent_at + timedelta(minutes=30)) == 0  # well within retention
    assert sqs.send_due(now=sent_at + timedelta(minutes=46)) == 1  # 3/4 of it: sent again
    assert sqs.claim(["retained"], 10, 30)[0].job_id == job_id


# -- the cost of the ledger -------------------------------------------------------------------
def test_ledger_queries_per_batch_do_not_grow_with_the_batch(
    sqs: SqsBackend, ledger: str, capsys: pytest.CaptureFixture[str]
) -> None:
    def cost(n: int) -> dict[str, int]:
        q = f"cost{n}"
        found = {}
        with CaptureQueriesContext(connections[ledger]) as enq:
            queue.enqueue_many(q, [{"i": i} for i in range(n)], backend="sqs")
        found["enqueue"] = len(enq.captured_queries)
        with CaptureQueriesContext(connections[ledger]) as cl:
            claimed = sqs.claim([q], n, 30)
        assert len(claimed) == n
        found["claim"] = len(cl.captured_queries)
        acks = [Ack(job_id=c.job_id, token=c.token, transition=DONE) for c in claimed]
        with CaptureQueriesContext(connections[ledger]) as ac:
            assert all(r.ok for r in sqs.apply_many(acks))
        found["ack"] = len(ac.captured_queries)
        return found

    one, ten = cost(1), cost(10)
    with capsys.disabled():
        print(f"\n  sqs ledger queries [{ledger}] per batch of 1: {one}, of 10: {ten}")
    assert one == ten


# -- SQS going away ---------------------------------------------------------------------------
@pytest.fixture
def own_moto(tmp_path: Path) -> Iterator[MotoServer]:
    server = MotoServer(tmp_path / "moto")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_a_deleted_queue_is_recreated_and_its_pending_jobs_sent_again(sqs: SqsBackend) -> None:
    ids = [e.job_id for e in queue.enqueue_many("gone", [{}, {}, {}], backend="sqs")]
    info = sqs.transport.queue("gone")
    sqs.transport.client.delete_queue(QueueUrl=info.url)
    assert sqs.claim(["gone"], 10, 30) == []  # finds the queue gone: recreates it
    assert sqs.jobtable.jobs().filter(queue="gone", sent_at=None).count() == 3
    # The send step sends them again (these were enqueued just now: after SEND_GRACE).
    assert sqs.send_due(now=sqs.now() + timedelta(seconds=31)) == 3
    claimed = sqs.claim(["gone"], 10, 30)
    assert sorted(c.job_id for c in claimed) == sorted(ids)


def test_an_enqueue_while_sqs_is_down_fails_and_writes_nothing(
    configure_sqs: Any, own_moto: MotoServer
) -> None:
    b = configure_sqs(ENDPOINT_URL=own_moto.url)
    first = queue.enqueue("down", {}, backend="sqs").job_id
    own_moto.stop()
    for _ in range(3):
        with pytest.raises(QueueError) as caught:
            queue.enqueue("down", {}, backend="sqs")
        assert caught.value.code == ErrorCode.BACKEND_UNAVAILABLE
    assert list(b.jobtable.jobs().values_list("id", flat=True)) == [first]
    own_moto.start()  # empty, as moto always restarts: the queue and the first message are gone
    second = queue.enqueue("down", {}, backend="sqs").job_id  # recreates the queue
    # The send step sends the first again from the ledger (it waits SEND_GRACE for it).
    assert b.send_due(now=b.now() + timedelta(seconds=31)) == 1
    assert {c.job_id for c in b.claim(["down"], 10, 30)} == {first, second}


def test_an_enqueue_in_a_transaction_while_sqs_is_down_waits_in_the_outbox(
    configure_sqs: Any, own_moto: MotoServer
) -> None:
    b = configure_sqs(ENDPOINT_URL=own_moto.url)
    own_moto.stop()
    while b.resilience is not None and b.resilience.breaker.state != "open":
        with pytest.raises(QueueError):
            queue.enqueue("outage", {}, backend="sqs")
    with transaction.atomic(using=b.db):  # neither SQS nor the open breaker is asked
        job_id = queue.enqueue("outage", {"kept": True}, backend="sqs").job_id
    assert OutboxEntry.objects.using(b.db).filter(job_id=job_id, sent_at=None).count() == 1
    own_moto.start()
    assert Relay().run_once().sent == 1
    [c] = b.claim(["outage"], 10, 30)
    assert c.job_id == job_id and OutboxEntry.objects.using(b.db).count() == 0


# -- deployment check -------------------------------------------------------------------------
def test_w003_warns_when_max_payload_bytes_is_above_a_queues_maximum_size(
    configure_sqs: Any,
) -> None:
    b = configure_sqs(QUEUES=["tiny", "roomy", "absent"])
    create_queue(b, "tiny", MaximumMessageSize="1024")
    create_queue(b, "roomy", MaximumMessageSize="1048576")
    found = list(b.check())
    assert [m.id for m in found] == ["blamequeue.W003"]
    assert sqs_name(b.transport.prefix, "tiny") in found[0].msg


# -- settings ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("MAX_RECEIVE_COUNT", 0, "an int from 1 to 1000"),
        ("MAX_RECEIVE_COUNT", "10", "an int from 1 to 1000"),
        ("WAIT_TIME_SECONDS", 21, "an int from 0 to 20"),
        ("SEND_GRACE", 0, "seconds > 0"),
        ("QUEUE_PREFIX", "p" * 41, "at most 40"),
    ],
)
def test_sqs_options_out_of_range_are_e012(option: str, value: object, expected: str) -> None:
    from django_blamequeue.conf.validator import validate

    entry = {"PROTOCOL": "sqs", "REGION": "eu-west-1", option: value}
    found = validate({"BACKENDS": {"default": entry}})
    assert [(p.id, expected in p.message) for p in found] == [("E012", True)]
    assert option in found[0].message


def test_sqs_options_in_range_pass() -> None:
    from django_blamequeue.conf.validator import validate

    entry = {"PROTOCOL": "sqs", "REGION": "eu-west-1", "MAX_RECEIVE_COUNT": 5}
    entry |= {"WAIT_TIME_SECONDS": 20, "SEND_GRACE": 0.5}
    assert validate({"BACKENDS": {"default": entry}}) == []
