"""A control row's limit columns say the same limits back (``limit_fields`` / ``state_of``)."""

from __future__ import annotations

import pytest

from django_blamequeue.backends.jobtable.control_rows import limit_fields, state_of
from django_blamequeue.core.limits import QueueLimits
from django_blamequeue.models import QueueControl


@pytest.mark.parametrize(
    "limits",
    [
        QueueLimits(concurrency=3),
        QueueLimits(key_concurrency=1, rate_limit=(10, 1.0)),
        QueueLimits(key_rate_limit=(5, 60.0)),
    ],
)
def test_limits_stored_in_a_row_are_read_back_as_they_were(limits: QueueLimits) -> None:
    row = QueueControl(backend="here", queue="q", **limit_fields(limits))
    assert state_of(row).live == limits


def test_no_live_limits_leave_the_settings_defaults_in_force() -> None:
    row = QueueControl(backend="here", queue="q", **limit_fields(None))
    assert row.has_limits is False and state_of(row).live is None
