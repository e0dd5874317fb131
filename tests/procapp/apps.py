"""A tiny app for the process tests: job handlers worker subprocesses can import."""

from django.apps import AppConfig


class ProcAppConfig(AppConfig):
    name = "tests.procapp"
    label = "procapp"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The flow chaos test's flows, the Redis fault tests' handler and the worker fuzz's
        # hostile handlers (tests/processes).
        from . import flowjobs, hostile, redisjobs  # noqa: F401
