"""What an ORM job touches: it reads one ``Account`` and writes one ``Entry``."""

from __future__ import annotations

from django.db import models


class Account(models.Model):
    """Read by primary key, never written during a run (seeded once, ``work.seed``)."""

    name = models.CharField(max_length=50)
    balance = models.IntegerField(default=0)


class Entry(models.Model):
    """Inserted by each job: one row, with an index on its foreign key, as a ledger has."""

    account = models.ForeignKey(Account, on_delete=models.CASCADE)
    amount = models.IntegerField()
    job = models.IntegerField()  # the job's argument: each job writes its own row
    created_at = models.DateTimeField()
