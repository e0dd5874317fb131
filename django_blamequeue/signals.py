"""Signal objects only. ``audit_event`` is sent once per audit event, after commit.

Receivers get ``event`` (an ``audit.Event``) and, for convenience, its ``action``, ``job_id``,
``queue``, ``backend`` and ``attempt`` as keyword arguments.
"""

from django.dispatch import Signal

audit_event = Signal()
