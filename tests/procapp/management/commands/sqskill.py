"""``manage.py sqskill relay|commit --times N``: SIGKILL at chosen points of an SQS enqueue.

Each round forks a child that dies by SIGKILL (the parent only forks and counts):

- ``relay``: the parent writes one enqueue to the outbox in a transaction; the child runs
  the outbox relay and is killed right after ``SendMessageBatch`` returned, before the send
  is recorded (the relay's window for a duplicate message).
- ``commit``: the child enqueues inside ``transaction.atomic()`` and is killed right after
  COMMIT, before its relay could send anything (the transactional-enqueue window).

The parent relays nothing itself: its commit nudge is switched off, so the only relays are
the children that die. Prints ``kills=N``.
"""

from __future__ import annotations

import os
import signal
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand
from django.db import connections, transaction

from django_blamequeue import backends, queue
from django_blamequeue.backends.sqs.transport import Transport
from django_blamequeue.relay import outbox
from django_blamequeue.relay.outbox import Relay

from ...jobs import QUEUE


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _enqueue_in_transaction(db: str, i: int) -> None:
    with transaction.atomic(using=db):
        queue.enqueue(QUEUE, {"i": i}, name="procapp.effect", backend="sqs")


class Command(BaseCommand):
    help = "Kill SQS enqueues at chosen points, N times (tests/processes/test_sqs_faults.py)."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("point", choices=["relay", "commit"])
        parser.add_argument("--times", type=int, required=True)

    def handle(self, *args: Any, **options: Any) -> None:
        outbox.nudge = lambda **_: None  # this process never relays: only its dying children do
        db = outbox.database_of(backends.get_backend("sqs"))
        kills = 0
        for i in range(options["times"]):
            if options["point"] == "relay":
                _enqueue_in_transaction(db, i)
            connections.close_all()
            backends.reset()  # the child builds its own boto3 client and connections
            pid = os.fork()
            if pid == 0:  # the child: it never returns
                try:
                    self._child(options["point"], db, i)
                finally:
                    os._exit(3)  # not killed where it should have been
            _, status = os.waitpid(pid, 0)
            kills += os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        self.stdout.write(f"kills={kills}")

    @staticmethod
    def _child(point: str, db: str, i: int) -> None:
        if point == "relay":
            send = Transport.send

            def send_then_die(self: Transport, *args: Any, **kwargs: Any) -> set[str]:
                sent = send(self, *args, **kwargs)
                if sent:
                    _die()  # sent, not yet recorded as sent
                return sent

            Transport.send = send_then_die  # type: ignore[method-assign]
            Relay().run_once()
        else:
            with transaction.atomic(using=db):
                transaction.on_commit(_die, using=db)  # runs before the outbox's nudge
                queue.enqueue(QUEUE, {"i": i}, name="procapp.effect", backend="sqs")
