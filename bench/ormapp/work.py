"""The body of the ORM job, the same function for every library's task.

``read_write(i)`` reads ``Account`` ``1 + i % ACCOUNTS`` by primary key and inserts one
``Entry`` (autocommit: the insert commits on its own, with fsync, as a view's save would).
The library's task only calls it; how the library manages Django's connection around it
(``CONN_MAX_AGE``, ``close_old_connections``) is what the workload compares.
"""

from __future__ import annotations

from django.utils import timezone

ACCOUNTS = 1000


def seed() -> None:
    """``ACCOUNTS`` accounts, once; entries of a previous phase are the caller's to delete."""
    from bench.ormapp.models import Account

    if not Account.objects.exists():
        Account.objects.bulk_create(
            Account(id=k, name=f"account {k}", balance=100 * k) for k in range(1, ACCOUNTS + 1)
        )


def read_write(i: int) -> None:
    from bench.ormapp.models import Account, Entry

    account = Account.objects.get(pk=1 + i % ACCOUNTS)
    Entry.objects.create(
        account=account, amount=account.balance % 97, job=i, created_at=timezone.now()
    )


def entries() -> int:
    """Rows written so far (each job writes one)."""
    from bench.ormapp.models import Entry

    return Entry.objects.count()


def reset() -> None:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("TRUNCATE bench_orm_entry")
