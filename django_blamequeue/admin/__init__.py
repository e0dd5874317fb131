"""The operator's console in the Django admin (docs/admin.md).

``jobs``: the job list and job page · ``console``: queue overview, DLQ, retry all, purge ·
``flows`` / ``graph``: flow graphs as server-rendered SVG · ``audit_log``: the audit log ·
``schedules``: recurring jobs · ``operations``: the audited actions ·
``provenance``: the blame trail, jobs about objects, ``JobTimelineMixin`` for your own admins ·
``filters`` / ``base`` / ``display``: shared parts.

Importing this package (Django's admin autodiscovery does) registers the model admins.
"""

from __future__ import annotations

from django_blamequeue.admin.audit_log import AuditEventAdmin
from django_blamequeue.admin.jobs import JobAdmin
from django_blamequeue.admin.provenance import JobTimelineMixin
from django_blamequeue.admin.schedules import ScheduleAdmin
from django_blamequeue.admin.tables import FlowDependencyAdmin, OutboxEntryAdmin

__all__ = [
    "AuditEventAdmin",
    "FlowDependencyAdmin",
    "JobAdmin",
    "JobTimelineMixin",
    "OutboxEntryAdmin",
    "ScheduleAdmin",
]
