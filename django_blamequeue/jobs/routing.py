"""``ROUTES``: the queue a job goes to when the call names none (Celery's ``task_routes``).

A route maps a job name, or a glob of names (``fnmatch``: ``"shop.webhooks.*"``), to a queue.
An exact name wins over a glob; globs are tried in the order the setting lists them. The
queue in force for an enqueue is the call's (``apply_async(queue=...)``, ``queue.enqueue``'s
first argument), else the route's, else the ``@job``'s own; ``runworker`` with no queue names
serves the routed queues of every registered job (``registry.queues``).
"""

from __future__ import annotations

from fnmatch import fnmatchcase

from django_blamequeue.conf import Settings, get_settings

#: The routes of the settings object last read: (settings, exact names, globs in order).
_table: list[tuple[Settings, dict[str, str], tuple[tuple[str, str], ...]]] = []


def route(name: str) -> str | None:
    """The queue ``ROUTES`` sends job ``name`` to, or None."""
    settings = get_settings()
    if not settings.routes:
        return None
    if not _table or _table[0][0] is not settings:
        exact = {p: q for p, q in reversed(settings.routes) if not _is_glob(p)}
        globs = tuple((p, q) for p, q in settings.routes if _is_glob(p))
        _table[:] = [(settings, exact, globs)]
    _, exact, globs = _table[0]
    found = exact.get(name)
    if found is not None:
        return found
    for pattern, queue in globs:
        if fnmatchcase(name, pattern):
            return queue
    return None


def _is_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")
