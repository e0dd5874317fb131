"""``bench/atomic_mix.py``: a plain job that waits (an HTTP call, say) and an atomic one that
writes a row and waits a little inside its transaction (a ledger entry)."""

from __future__ import annotations

import time
from typing import Any

from django_blamequeue import current_job, job
from django_blamequeue.models import Schedule

PLAIN = "mixplain"
ATOMIC = "mixledger"


@job(queue=PLAIN, name="bench.atomicapp.notify")
def notify(payload: dict[str, Any]) -> None:
    time.sleep(float(payload["seconds"]))


def write_and_wait(payload: dict[str, Any]) -> None:
    db = current_job().backend.effects_database
    Schedule.objects.using(db).filter(name="nothing").update(enabled=False)  # takes the lock
    time.sleep(float(payload["seconds"]))


@job(queue=ATOMIC, name="bench.atomicapp.ledger", atomic=True)
def ledger(payload: dict[str, Any]) -> None:
    write_and_wait(payload)


@job(queue=PLAIN, name="bench.atomicapp.ledger_beside", atomic=True)
def ledger_beside(payload: dict[str, Any]) -> None:
    """The atomic job on the plain jobs' own queue (``@job``'s default queue is shared)."""
    write_and_wait(payload)
