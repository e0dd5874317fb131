"""Where the read-only listings read: a replica, when ``DATABASE_ROUTERS`` names one.

Claims, acks, lease renewals and every read inside a fenced transaction use the backend's own
``DATABASE`` (the primary): they must see the latest committed state. What an operator browses
(the admin's job list, its filters and search, the audit log, a flow's jobs) can lag a replica's
second and spares the primary the scans, so it asks the project's routers first, with the
backend's database as a hint: ``db_for_read(model, primary=<DATABASE>)``. The first router that
answers an alias wins; when none answers, the primary is read (not Django's own fallback,
``"default"``, which may be another backend's database). See docs/scaling.md.
"""

from __future__ import annotations

from django.db import router
from django.db.models import Model


def read_database(model: type[Model], primary: str) -> str:
    """The alias a read-only listing of ``model`` for the database ``primary`` reads."""
    for r in router.routers:
        ask = getattr(r, "db_for_read", None)
        if ask is None:
            continue
        chosen = ask(model, primary=primary)
        if chosen:
            return str(chosen)
    return primary
