"""checks: conf's problems surface as blamequeue.* system checks, worded as at run time."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.core import checks
from django.core.checks.registry import CheckRegistry
from pytest_django import Settings as SettingsWrapper

from django_blamequeue import conf
from django_blamequeue.checks import check_settings
from django_blamequeue.conf.engines import AVAILABLE
from django_blamequeue.exceptions import QueueError


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    conf.reset()
    yield
    conf.reset()


def run() -> list[checks.CheckMessage]:
    """The messages, less W002: that one depends on the test project's DATABASES."""
    return [m for m in check_settings(None) if m.id != "blamequeue.W002"]


def test_valid_settings_produce_no_messages(settings: SettingsWrapper) -> None:
    settings.BLAMEQUEUE = {}
    assert run() == []


def test_an_error_becomes_a_check_error_with_a_prefixed_id_and_the_hint(
    settings: SettingsWrapper,
) -> None:
    settings.BLAMEQUEUE = {"BACKENDS": {"default": {"PROTOCOL": "amqp"}}}
    (message,) = run()
    assert isinstance(message, checks.Error)
    assert message.id == "blamequeue.E004"
    assert "AMQP 0-9-1 (RabbitMQ etc.)" in message.msg
    assert message.hint == "Use one of: " + ", ".join(AVAILABLE) + "."  # local, redis, sqs


def test_a_warning_becomes_a_check_warning(settings: SettingsWrapper) -> None:
    settings.BLAMEQUEUE = {"ACCEPT_CONTENT": ["json", "pickle"]}
    (message,) = run()
    assert isinstance(message, checks.Warning)
    assert message.id == "blamequeue.W001"
    assert not message.is_serious()


def test_every_problem_is_reported_not_only_the_first(settings: SettingsWrapper) -> None:
    settings.BLAMEQUEUE = {"AUDIT": "loud", "MAX_PAYLOAD_BYTES": -1, "DEFAULT_BACKEND": "x"}
    ids = sorted(m.id or "" for m in run())
    assert ids == ["blamequeue.E002", "blamequeue.E009", "blamequeue.E010"]


def test_the_check_and_the_runtime_refusal_say_the_same_thing(settings: SettingsWrapper) -> None:
    settings.BLAMEQUEUE = {"BACKENDS": {"default": {"PROTOCOL": "redis"}}}
    (message,) = run()
    with pytest.raises(QueueError) as caught:
        conf.get_settings()
    assert f"blamequeue.{caught.value.message}" == f"{message.id}: {message.msg}"


def test_the_environment_boot_is_checked_too(
    settings: SettingsWrapper, monkeypatch: pytest.MonkeyPatch
) -> None:
    del settings.BLAMEQUEUE
    monkeypatch.setenv("BLAMEQUEUE_PROTOCOL", "sqs")
    monkeypatch.delenv("BLAMEQUEUE_SQS_REGION", raising=False)
    (message,) = run()
    assert message.id == "blamequeue.E007" and "BLAMEQUEUE_SQS_REGION" in message.msg


def test_it_runs_as_a_registered_django_check(settings: SettingsWrapper) -> None:
    settings.BLAMEQUEUE = {"AUDIT": "loud"}
    registry = CheckRegistry()
    registry.register(check_settings)
    assert "blamequeue.E010" in [m.id for m in registry.run_checks()]
