"""Every optional import names the extra that installs it, instead of a bare
``ModuleNotFoundError`` (a package set to ``None`` in ``sys.modules`` cannot be imported)."""

from __future__ import annotations

import importlib
import io
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command
from pytest_django import Settings as SettingsWrapper

from django_blamequeue import backends, conf
from django_blamequeue.exceptions import ErrorCode, QueueError
from django_blamequeue.observability import metrics, tracing


def uninstall(monkeypatch: pytest.MonkeyPatch, *packages: str) -> None:
    """As if ``packages`` were not installed, and as if nothing had imported what needs them."""
    for name in list(sys.modules):
        if name.split(".")[0] in packages or name.startswith(
            ("django_blamequeue.backends.redis", "django_blamequeue.backends.sqs")
        ):
            monkeypatch.delitem(sys.modules, name)
    for package in packages:
        monkeypatch.setitem(sys.modules, package, None)


@pytest.mark.django_db
def test_metrics_port_without_prometheus_client_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    uninstall(monkeypatch, "prometheus_client")
    monkeypatch.setattr(metrics, "enabled", False)
    with pytest.raises(CommandError) as caught:
        call_command("runworker", "--metrics-port", "9464", "--burst", stdout=io.StringIO())
    assert str(caught.value) == (
        "--metrics-port 9464: metrics need prometheus_client: "
        "pip install 'django-blamequeue[prometheus]'"
    )


def test_tracing_without_opentelemetry_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    uninstall(monkeypatch, "opentelemetry")
    with pytest.raises(ImproperlyConfigured, match=r"pip install 'django-blamequeue\[otel\]'"):
        tracing.enable()


@pytest.mark.parametrize(
    ("entry", "package", "extra"),
    [
        ({"PROTOCOL": "redis", "URL": "redis://127.0.0.1:1/0"}, "redis", "redis"),
        ({"PROTOCOL": "sqs", "REGION": "eu-west-1"}, "botocore", "sqs"),
    ],
)
def test_a_backend_without_its_client_library_names_the_extra(
    settings: SettingsWrapper,
    monkeypatch: pytest.MonkeyPatch,
    entry: dict[str, str],
    package: str,
    extra: str,
) -> None:
    settings.BLAMEQUEUE = {"BACKENDS": {"default": {"PROTOCOL": "local"}, "other": entry}}
    conf.reset()
    backends.reset()
    uninstall(monkeypatch, package, "boto3" if package == "botocore" else "django_redis")
    with pytest.raises(QueueError) as caught:
        backends.get_backend("other")
    assert caught.value.code == ErrorCode.INVALID_CONFIG
    assert caught.value.message.endswith(f"pip install 'django-blamequeue[{extra}]'")
    assert f"needs the {package!r} package" in caught.value.message


def test_the_pytest_plugin_without_pytest_django_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delitem(sys.modules, "django_blamequeue.pytest_plugin", raising=False)
    monkeypatch.setitem(sys.modules, "pytest_django", None)
    with pytest.raises(ImportError, match=r"pip install 'django-blamequeue\[testing\]'"):
        importlib.import_module("django_blamequeue.pytest_plugin")
