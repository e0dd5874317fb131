"""django.tasks tests: the ``blamequeue`` TASKS alias exists before ``sample`` is imported."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.test.utils import override_settings

from tests.tasks.config import tasks_setting

# Module-level ``@task`` declarations in ``sample`` look their backend up at import time.
_override = override_settings(TASKS=tasks_setting())
_override.enable()


@pytest.fixture
def tasks_backend(settings: Any, backend: str) -> Iterator[Any]:
    """The ``blamequeue`` task backend on the blamequeue backend under test (short backoff)."""
    from django.tasks import task_backends

    settings.TASKS = tasks_setting(backend)
    settings.BLAMEQUEUE = {**settings.BLAMEQUEUE, "BACKOFF_BASE": 0.01, "BACKOFF_MAX": 0.05}
    yield task_backends["blamequeue"]
