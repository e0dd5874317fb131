"""App config: registers checks and imports job modules (``jobs.py`` / ``tasks.py``)."""

from __future__ import annotations

import logging

from django.apps import AppConfig
from django.core import checks
from django.utils.module_loading import autodiscover_modules

AUTODISCOVER_MODULES = ("jobs", "tasks")


class BlameQueueConfig(AppConfig):
    name = "django_blamequeue"
    label = "django_blamequeue"
    verbose_name = "Blame queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.core.signals import request_finished, request_started

        from django_blamequeue.checks import (
            check_backends,
            check_handlers,
            check_migrated,
            check_queues_served,
            check_schedule_calls,
            check_schedule_jobs,
            check_settings,
        )
        from django_blamequeue.context import JobContextFilter
        from django_blamequeue.jobs import events, origin, waiting
        from django_blamequeue.relay import outbox

        outbox.install()  # the backends' hooks: relay, settle and cascade through the services
        waiting.install()  # EnqueuedJob.info() / .wait() / .result() poll the backends
        events.install()  # lifecycle signals of transitions no worker acked (stalled, cancels)
        # JobInfo.origin["request"] with no setup: the method and path of the request served
        request_started.connect(origin.request_started, dispatch_uid="blamequeue.origin")
        request_finished.connect(origin.request_finished, dispatch_uid="blamequeue.origin")
        checks.register(check_settings, "blamequeue")
        checks.register(check_queues_served, "blamequeue")
        checks.register(check_schedule_jobs, "blamequeue")
        checks.register(check_migrated, "blamequeue")
        checks.register(check_schedule_calls, "blamequeue")
        checks.register(check_backends, "blamequeue", deploy=True)
        checks.register(check_handlers, "blamequeue", deploy=True)
        for name in AUTODISCOVER_MODULES:
            autodiscover_modules(name)
        # Logger filters apply only to records of that very logger: put it on each of ours.
        names = ["django_blamequeue"] + [
            n for n in logging.root.manager.loggerDict if n.startswith("django_blamequeue.")
        ]
        for name in names:
            logger = logging.getLogger(name)
            if not any(isinstance(f, JobContextFilter) for f in logger.filters):
                logger.addFilter(JobContextFilter())
