"""Modules that moved into feature packages stay importable by their old public names, with a
``DeprecationWarning`` that names the new path."""

from __future__ import annotations

import pytest

import django_blamequeue
from django_blamequeue.core import schedules
from django_blamequeue.observability import metrics, tracing


@pytest.mark.parametrize(
    ("old", "module"), [("metrics", metrics), ("tracing", tracing), ("schedules", schedules)]
)
def test_an_old_name_answers_the_moved_module_and_warns(old: str, module: object) -> None:
    with pytest.warns(DeprecationWarning, match=f"moved to {module.__name__}"):  # type: ignore[attr-defined]
        assert getattr(django_blamequeue, old) is module


def test_from_import_of_an_old_name_works() -> None:
    with pytest.warns(DeprecationWarning):
        from django_blamequeue import metrics as old

    assert old is metrics


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError):
        django_blamequeue.registry_of_nothing  # noqa: B018
