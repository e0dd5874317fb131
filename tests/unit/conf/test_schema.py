"""conf/schema: the shape of the ``BLAMEQUEUE`` setting — its keys agree with the ``Settings``
they fill and the queue limits they set, and a problem names its place the way the user wrote
it (a settings path, or an environment variable). Each protocol's options are a row of the
table of backends (test_engines.py)."""

from __future__ import annotations

import dataclasses

import pytest

from django_blamequeue.conf import Settings
from django_blamequeue.conf.schema import (
    AUDIT_LEVELS,
    QUEUE_KEYS,
    RETENTION_KEYS,
    SETTINGS_WHERE,
    TOP_KEYS,
    UNSAFE_CONTENT,
    Problem,
    Where,
    content_type_of,
)
from django_blamequeue.core.limits import QueueLimits

SETTINGS_FIELDS = {f.name for f in dataclasses.fields(Settings)}


def test_the_top_keys_and_the_fields_of_settings_correspond_one_to_one() -> None:
    """Each key fills the field of its name (``RETENTION`` one per retention key), and no
    field of ``Settings`` is left without a key to set it."""
    filled = {k.lower() for k in TOP_KEYS if k != "RETENTION"}
    filled |= {f"retention_{k.lower()}" for k in RETENTION_KEYS}
    assert "RETENTION" in TOP_KEYS
    assert filled == SETTINGS_FIELDS


def test_the_queue_keys_are_the_queue_limits() -> None:
    from_settings = [f.name for f in dataclasses.fields(QueueLimits)]
    from_settings.remove("name_rate_limits")  # from @job(rate_limit=...), not QUEUES
    assert [k.lower() for k in QUEUE_KEYS] == from_settings


def test_the_default_audit_level_is_one_of_the_levels() -> None:
    assert Settings(backends={}).audit in AUDIT_LEVELS


def test_a_settings_path_is_written_as_the_user_writes_it() -> None:
    assert SETTINGS_WHERE() == "BLAMEQUEUE"
    assert SETTINGS_WHERE("BACKENDS", "fast", "PROTOCOL") == (
        'BLAMEQUEUE["BACKENDS"]["fast"]["PROTOCOL"]'
    )
    assert SETTINGS_WHERE("ACCEPT_CONTENT", 1) == 'BLAMEQUEUE["ACCEPT_CONTENT"][1]'


def test_a_place_set_from_the_environment_is_named_by_its_variable() -> None:
    where = Where({("BACKENDS", "default", "URL"): "BLAMEQUEUE_REDIS_URL"})
    assert where("BACKENDS", "default", "URL") == "BLAMEQUEUE_REDIS_URL"
    assert where("BACKENDS", "default", "LISTEN") == (
        'BACKENDS["default"]["LISTEN"] (BLAMEQUEUE_* environment)'
    )
    assert Where({}).environment and not SETTINGS_WHERE.environment


def test_a_problem_is_an_error_without_a_hint_unless_told() -> None:
    problem = Problem(id="E001", message="BLAMEQUEUE must be a dict, not list")
    assert (problem.level, problem.hint) == ("error", "")
    with pytest.raises(dataclasses.FrozenInstanceError):
        problem.id = "E002"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("name", "content_type"),
    [
        ("json", "application/json"),
        ("pickle", "application/x-python-serialize"),
        ("application/x-custom", "application/x-custom"),  # a content type already
        ("no-such-serializer", None),
    ],
)
def test_content_type_of_a_serializer_name_or_content_type(
    name: str, content_type: str | None
) -> None:
    assert content_type_of(name) == content_type


def test_the_unsafe_content_types_are_those_of_pickle_and_yaml() -> None:
    assert UNSAFE_CONTENT["application/x-python-serialize"] == "pickle"
    assert content_type_of("pickle") in UNSAFE_CONTENT
    assert set(UNSAFE_CONTENT.values()) == {"pickle", "yaml"}
