"""Tables of the local backend, plus the outbox and the audit log every backend uses.

One module per concern; every model is importable from here (``from django_blamequeue.models
import Job``), which is also where Django finds them. State changes go through the lifecycle
(``backends.database``), never through ``save()`` on these models: the admin shows them
read-only.
"""

from django_blamequeue.models.charts import TimeBucket
from django_blamequeue.models.control import QueueControl, RateStart, Schedule, WorkerRecord
from django_blamequeue.models.flows import FlowDependency, OutboxEntry, OutboxQuerySet
from django_blamequeue.models.jobs import (
    ACTIVE_STATES,
    STATE_CHOICES,
    Job,
    JobFields,
    JobQuerySet,
    SqsJob,
    traced,
)
from django_blamequeue.models.trail import AuditEvent, EffectMark, JobAttempt, TaskAttempt
from django_blamequeue.models.workflows import WorkflowEvent, WorkflowStep

__all__ = [
    "ACTIVE_STATES",
    "STATE_CHOICES",
    "AuditEvent",
    "EffectMark",
    "FlowDependency",
    "Job",
    "JobAttempt",
    "JobFields",
    "JobQuerySet",
    "OutboxEntry",
    "OutboxQuerySet",
    "QueueControl",
    "RateStart",
    "Schedule",
    "SqsJob",
    "TaskAttempt",
    "TimeBucket",
    "WorkerRecord",
    "WorkflowEvent",
    "WorkflowStep",
    "traced",
]
