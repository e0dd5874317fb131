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

from django_blamequeue import conf

__all__ = ["check_settings"]


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
