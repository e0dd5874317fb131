"""System checks (``manage.py check``): the problems ``conf`` finds, as ``blamequeue.E0xx``.

The check only reports; the same problems make ``conf.get_settings()`` refuse at run time, so a
project that passes ``check`` boots, and one that fails it is told the same thing either way.
Registered by ``apps.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.core import checks

from . import conf, registry
from .backends import get_backend
from .exceptions import QueueError

__all__ = ["check_backends", "check_settings"]


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
