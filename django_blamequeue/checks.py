"""System checks (``manage.py check``): the problems ``conf`` finds, as ``blamequeue.E0xx``.

The check only reports; the same problems make ``conf.get_settings()`` refuse at run time, so a
project that passes ``check`` boots, and one that fails it is told the same thing either way.
Registered by ``apps.py``.
"""

from __future__ import annotations

import contextlib
import difflib
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from django.apps import AppConfig
from django.core import checks

from django_blamequeue import conf
from django_blamequeue.backends import get_backend, migration_state
from django_blamequeue.backends.base import Backend
from django_blamequeue.exceptions import QueueError
from django_blamequeue.jobs import registry, schedules

__all__ = [
    "check_backends",
    "check_handlers",
    "check_migrated",
    "check_queues_known",
    "check_queues_served",
    "check_schedule_calls",
    "check_schedule_jobs",
    "check_settings",
    "job_databases",
    "used_queues",
]


def check_settings(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """One ``checks.Error`` or ``checks.Warning`` per problem in the configuration in force."""
    messages: list[checks.CheckMessage] = []
    for problem in conf.problems():
        kind = checks.Warning if problem.level == "warning" else checks.Error
        messages.append(
            kind(problem.message, hint=problem.hint or None, id=f"blamequeue.{problem.id}")
        )
    return messages


def check_backends(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """``manage.py check --deploy``: each backend's own look at its engine (``Backend.check``),
    e.g. a Redis that may evict jobs. An engine that cannot be reached is a warning, W006."""
    try:
        aliases = list(conf.get_settings().backends)
    except QueueError:  # invalid settings: check_settings reports them
        return []
    queues = registry.queues()
    messages: list[checks.CheckMessage] = []
    for alias in aliases:
        try:
            messages += list(get_backend(alias).check(queues))
        except Exception as exc:
            messages.append(
                checks.Warning(
                    f"backend {alias!r} could not be checked: {type(exc).__name__}: {exc}",
                    hint="Run the deployment checks where the engine is reachable.",
                    id="blamequeue.W006",
                )
            )
    return messages


def check_queues_served(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """W007: jobs that a plain ``runworker`` (no queue names, no ``--backend``) never claims.

    A plain ``runworker`` consumes every queue that has a registered job, on
    ``DEFAULT_BACKEND``. So a ``SCHEDULES`` entry whose ``queue`` no registered job uses, or a
    ``@job``/``@flow`` (or a schedule) stored on another backend, piles up unserved unless a
    worker is started for it by name. Schedules made in the admin are rows of the database,
    which a system check does not read.
    """
    from django_blamequeue.exceptions import QueueError
    from django_blamequeue.jobs import registry

    try:
        current = conf.get_settings()
    except QueueError:  # invalid settings: check_settings reports them
        return []
    default = current.default_backend
    messages: list[checks.CheckMessage] = []
    for name, definition in sorted(registry.registered().items()):
        backend = definition.backend or default
        if backend != default:
            what = f"@job {name!r} is stored on backend {backend!r}"
            messages.append(_unserved(what, definition.queue, backend, default))
    declared = {n: e for n, e in schedules.declared()[1].items() if n not in current.schedules}
    for name, entry in sorted({**declared, **current.schedules}.items()):
        messages += _schedule_unserved(name, entry, default)
    return messages


def check_schedule_calls(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """E043: a schedule (``SCHEDULES``, or declared in code) whose call cannot bind to its
    job's handler: it would fail at every fire, so it is an error now and never fired. An
    unknown job is W008's (``check --deploy``)."""
    try:
        current = conf.get_settings()
    except QueueError:  # invalid settings: check_settings reports them
        return []
    declared = {n: e for n, e in schedules.declared()[1].items() if n not in current.schedules}
    messages: list[checks.CheckMessage] = []
    for name, entry in sorted({**declared, **current.schedules}.items()):
        definition = registry.get(str(entry["job"]))
        if definition is None:
            continue
        why = schedules.call_problem(entry, definition)
        if why is not None:
            where = f'SCHEDULES["{name}"]' if name in current.schedules else f"schedule {name!r}"
            messages.append(
                checks.Error(
                    f"{where} {why}",
                    hint='Give "args" and "kwargs" the handler takes (a call), or "payload" '
                    "for a handler of one argument; neither calls a handler that needs none.",
                    id="blamequeue.E043",
                )
            )
    return messages


def _schedule_unserved(
    name: str, entry: Mapping[str, Any], default: str
) -> list[checks.CheckMessage]:
    """W007 for one ``SCHEDULES`` entry, resolved the way the scheduler resolves it."""
    from django_blamequeue.jobs import registry

    definition = registry.registered().get(str(entry["job"]))
    queue = entry.get("queue") or (definition.queue if definition else None)
    if entry.get("enabled") is False or queue is None:
        return []  # off, or an unknown job on its own queue: the scheduler logs that one
    backend = entry.get("backend") or (definition.backend if definition else None) or default
    from_settings = name in conf.get_settings().schedules
    label = f'SCHEDULES["{name}"]' if from_settings else f"schedule {name!r}"
    what = f"{label} fires {entry['job']!r} on queue {queue!r}"
    if backend != default:
        return [_unserved(f"{what} of backend {backend!r}", queue, backend, default)]
    if queue in registry.queues():
        return []
    hint = f'Start "manage.py runworker {queue}" too'
    if definition is not None:
        hint += f', or drop "queue" to use the job\'s own ({definition.queue!r})'
    message = (
        f"{what}, which no registered @job uses: a plain runworker does not consume it, so "
        "its jobs wait until a worker is started for that queue"
    )
    return [checks.Warning(message, hint=hint + ".", id="blamequeue.W007")]


def _unserved(what: str, queue: str, backend: str, default: str) -> checks.Warning:
    return checks.Warning(
        f"{what}, but a plain runworker consumes only DEFAULT_BACKEND {default!r}: its jobs "
        "wait until a worker is started for that backend",
        hint=f'Start "manage.py runworker {queue} --backend {backend}" too.',
        id="blamequeue.W007",
    )


def check_handlers(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """W008, ``check --deploy``: waiting jobs (pending, delayed, blocked) and schedules made in
    the admin whose job name no handler of this code answers, with counts. Run it with the
    code about to be deployed: a name it lacks would wait (workers hand it back) until it
    fails after ``MISSING_HANDLER_TIMEOUT``. Jobs named after their queue (enqueued without
    ``name=``, for a ``queue.consume(queue, handler)``) are not checked."""
    from django_blamequeue.models import Schedule

    try:
        current = conf.get_settings()
    except QueueError:  # invalid settings: check_settings reports them
        return []
    messages: list[checks.CheckMessage] = []
    for alias in current.backends:
        try:
            waiting = get_backend(alias).waiting_names()
        except Exception as exc:
            messages.append(_unreachable(alias, exc))
            continue
        for (q, name), n in sorted(waiting.items()):
            if name and name != q and registry.get(name) is None:
                messages.append(_no_handler(f"{n:,} waiting job(s) of backend {alias!r}", q, name))
    by_name: dict[str, str] = {}  # SCHEDULES entries are E041 errors of the plain check
    try:
        rows = Schedule.objects.filter(enabled=True).values_list("name", "job")
        by_name.update({n: j for n, j in rows if n not in current.schedules})
    except Exception as exc:  # no table yet (before migrate)
        messages.append(_unreachable("default", exc))
    for name, job in sorted(by_name.items()):
        if registry.get(job) is None:
            messages.append(
                checks.Warning(
                    f"schedule {name!r} fires job {job!r}, which no handler of this code answers",
                    hint="Deploy the code that defines it, or fix or disable the schedule.",
                    id="blamequeue.W008",
                )
            )
    return messages


def _no_handler(what: str, queue: str, name: str) -> checks.Warning:
    return checks.Warning(
        f"{what} on queue {queue!r} name job {name!r}, which no handler of this code answers: "
        "workers hand them back until one has it, and they fail after MISSING_HANDLER_TIMEOUT",
        hint="Deploy the code that defines it (a @job, @flow or @task) before these workers, "
        "or cancel / purge the jobs.",
        id="blamequeue.W008",
    )


def _unreachable(alias: str, exc: Exception) -> checks.Warning:
    return checks.Warning(
        f"backend {alias!r} could not be checked: {type(exc).__name__}: {exc}",
        hint="Run the deployment checks where the engine is reachable.",
        id="blamequeue.W006",
    )


# -- before migrate, and names that lead nowhere ------------------------------------------------
def job_databases(current: conf.Settings) -> list[str]:
    """The Django databases that hold this app's tables: each backend's ``DATABASE`` (the jobs,
    the SQS ledger, a Redis backend's outbox and audit rows) and ``default``."""
    found = {"default"}
    for entry in current.backends.values():
        found.add(str(entry.options.get("DATABASE") or "default"))
    return sorted(found)


def check_migrated(
    app_configs: Sequence[AppConfig] | None = None,
    databases: Sequence[str] | None = None,
    **kwargs: Any,
) -> list[checks.CheckMessage]:
    """E040: a database that holds jobs lacks this app's tables, or some of its migrations.

    Silent inside ``migrate``, which runs the checks just before it creates the tables and
    must not be stopped by a check that asks for it. A database that cannot be reached says
    nothing here (``check`` must work without a server)."""
    if _inside_migrate():
        return []
    try:
        current = conf.get_settings()
    except QueueError:  # invalid settings: check_settings reports them
        return []
    messages: list[checks.CheckMessage] = []
    for db in job_databases(current):
        try:
            lacking = migration_state.unmigrated(db)
        except Exception:
            continue
        if lacking is not None:
            messages.append(
                checks.Error(
                    lacking.sentence(),
                    hint="Every worker, enqueue and admin page needs them: run "
                    '"python manage.py migrate" (add --database for another alias).',
                    id="blamequeue.E040",
                )
            )
    return messages


#: Django's commands that must work before ``migrate`` (or are it): E040 keeps quiet in them.
#: ``runserver`` prints Django's own "unapplied migrations" line instead.
_MIGRATION_COMMANDS = frozenset(
    {
        "migrate",
        "makemigrations",
        "showmigrations",
        "sqlmigrate",
        "squashmigrations",
        "optimizemigration",
        "runserver",
    }
)


def _inside_migrate() -> bool:
    """Called by ``migrate``, ``makemigrations`` and the other commands of
    ``_MIGRATION_COMMANDS`` (or a command built on one, e.g. staticfiles' ``runserver``)?
    Django passes checks no command, so look at the callers for a ``self`` that is one."""
    from django.core.management.base import BaseCommand

    frame = sys._getframe(1)
    while frame is not None:
        caller = frame.f_locals.get("self")
        if isinstance(caller, BaseCommand) and any(
            cls.__module__.rpartition(".")[2] in _MIGRATION_COMMANDS for cls in type(caller).__mro__
        ):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def _near(name: str, known: Sequence[str]) -> str:
    found = difflib.get_close_matches(name, list(known), n=3, cutoff=0.6)
    return "Did you mean " + " or ".join(repr(n) for n in found) + "? " if found else ""


def _resolves(name: str) -> bool:
    try:
        return registry.get(name) is not None
    except Exception:  # a resolver's import failed: the job cannot run either
        return False


def check_schedule_jobs(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """E041: an enabled ``SCHEDULES`` entry whose job no ``@job``, ``@flow`` or ``@task`` of
    this code registers: it would fire on time and never run. (Schedules made in the admin
    are rows, checked by ``check --deploy``'s W008.)"""
    try:
        current = conf.get_settings()
    except QueueError:  # invalid settings: check_settings reports them
        return []
    known = sorted(registry.registered())
    messages: list[checks.CheckMessage] = []
    for name, entry in sorted(current.schedules.items()):
        job = str(entry["job"])
        if entry.get("enabled") is False or _resolves(job):
            continue
        messages.append(
            checks.Error(
                f'SCHEDULES["{name}"] fires job {job!r}, which no @job, @flow or @task of this '
                "code registers: it would never run",
                hint=_near(job, known) + 'A job is named "module.function" unless '
                "@job(name=...) gives it a name.",
                id="blamequeue.E041",
            )
        )
    return messages


def used_queues(current: conf.Settings) -> set[str]:
    """Every queue something of this project sends jobs to: registered jobs and flows,
    ``SCHEDULES`` entries, ``QUEUES`` limits and the ``TASKS`` that use this app. The one
    place a routing setting adds the queues it routes to."""
    from django.conf import settings as django_settings

    used = set(registry.queues()) | set(current.queues)
    for entry in current.schedules.values():
        definition = registry.registered().get(str(entry["job"]))
        used.add(str(entry.get("queue") or (definition.queue if definition else "")))
    for task in getattr(django_settings, "TASKS", {}).values():
        if str(task.get("BACKEND", "")).startswith("django_blamequeue."):
            used.update(str(q) for q in task.get("QUEUES") or ())
    used.discard("")
    return used


def check_queues_known(backend: Backend, queues: Sequence[str]) -> list[checks.CheckMessage]:
    """W041, at a worker's start: a queue it serves that no job, schedule, limit or task uses
    and that holds no job either (a typo: ``runworker emials``), with the nearest names.
    Schedules made in the admin count too: the worker reads their rows."""
    from django_blamequeue.models import Schedule

    used = used_queues(conf.get_settings())
    with contextlib.suppress(Exception):  # no table yet: the migrate check says so
        used.update(q for q in Schedule.objects.values_list("queue", flat=True) if q)
    messages: list[checks.CheckMessage] = []
    for q in queues:
        if q in used or _holds_jobs(backend, q):
            continue
        messages.append(
            checks.Warning(
                f"queue {q!r} is used by no job, schedule or task of this project and holds no "
                "job: this worker will wait on it for nothing",
                hint=_near(q, sorted(used)) + "Name a queue a @job uses (or leave QUEUE out "
                "to serve them all).",
                id="blamequeue.W041",
            )
        )
    return messages


def _holds_jobs(backend: Backend, q: str) -> bool:
    try:
        return backend.resilience.call(lambda: backend.size(q), idempotent=True) > 0
    except QueueError:
        return False
