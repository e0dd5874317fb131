"""Signal objects only.

``audit_event`` is sent once per audit event, after commit. Receivers get ``event`` (an
``audit.Event``) and, for convenience, its ``action``, ``job_id``, ``queue``, ``backend`` and
``attempt`` as keyword arguments.

The lifecycle signals have one meaning each (docs/hooks.md) and are sent with ``sender`` the
job's definition (what ``@job`` returned; None where the process has no handler for the job)
and ``event``, a ``jobs.events.JobEvent``. Each is sent after the transition committed, in the
process that made it; a crash between the commit and the send skips it, it never comes for a
transition that did not happen.
"""

from django.dispatch import Signal

audit_event = Signal()

#: A worker is about to call the handler for an attempt (in the thread that runs it).
job_started = Signal()
#: The job reached ``done``.
job_succeeded = Signal()
#: An attempt failed and the job is pending again with attempts left (``event.retry_in``).
job_retrying = Signal()
#: The job reached ``failed`` (the dead-letter queue): once per trip there, never per attempt.
job_failed = Signal()
#: The job reached ``cancelled`` (while waiting, while running, by a cascade).
job_cancelled = Signal()
