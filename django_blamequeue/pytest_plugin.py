"""pytest fixtures for projects that use django-blamequeue (needs pytest-django).

Enable in your top-level ``conftest.py``::

    pytest_plugins = ["django_blamequeue.pytest_plugin"]

- ``blamequeue_jobs``: a ``testing.CapturedJobs`` on the default backend (database access is
  requested for you).
- ``jobs_enqueued(queue=None, *, name=None, state=None)``: the jobs enqueued during the test.
- ``run_jobs(queue=None, *, handler=None, until=None, chaos=None)``: run them in the test's
  thread, with real retries (backoff recorded, not slept), the DLQ and flows; answers a
  ``RunReport``. ``chaos=`` plays a delivery fault on each job's first run.
- ``blamequeue_chaos``: a test that takes it runs once per fault ("duplicate", "takeover",
  "crash_before_ack"); pass it on as ``run_jobs(chaos=blamequeue_chaos)`` to prove a
  handler idempotent (docs/testing.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

try:
    import pytest_django  # noqa: F401  (the ``db`` fixture below comes from it)
except ImportError as exc:
    raise ImportError(
        "django_blamequeue.pytest_plugin needs pytest-django: "
        "pip install 'django-blamequeue[testing]'"
    ) from exc

from django_blamequeue.testing import CHAOS_MODES, CapturedJobs, capture_jobs


@pytest.fixture
def blamequeue_jobs(db: None) -> Iterator[CapturedJobs]:
    with capture_jobs() as captured:
        yield captured


@pytest.fixture
def jobs_enqueued(blamequeue_jobs: CapturedJobs) -> Callable[..., Any]:
    return blamequeue_jobs.jobs_enqueued


@pytest.fixture
def run_jobs(blamequeue_jobs: CapturedJobs) -> Callable[..., Any]:
    return blamequeue_jobs.run_jobs


@pytest.fixture(params=CHAOS_MODES)
def blamequeue_chaos(request: pytest.FixtureRequest) -> str:
    """Each delivery fault in turn: the test runs once per mode."""
    mode: str = request.param
    return mode
