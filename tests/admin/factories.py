"""Jobs in any state, reached through the backend's own verbs (enqueue, claim, ack) as a
worker would, never by writing rows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django_blamequeue import queue
from django_blamequeue.backends import get_backend
from django_blamequeue.core.records import Ack, Transition
from django_blamequeue.core.states import Reason, State
from django_blamequeue.serializers import encode

XSS = "<script>window.__xss = 1; alert('x')</script>"
SVG_XSS = '"><svg onload="window.__xss=2"><a href="javascript:alert(1)">x</a></svg>'


def settle(
    queue_name: str,
    outcomes: Sequence[str],
    *,
    backend: str | None = None,
    error: str = "ConnectionError: refused",
    result: Any = None,
) -> None:
    """Claim ``len(outcomes)`` jobs of the queue and ack them as ``done`` / ``failed`` /
    ``inflight`` (left claimed), in claim order."""
    b = get_backend(backend)
    claimed = b.claim([queue_name], len(outcomes), 30)
    assert len(claimed) == len(outcomes)
    acks = []
    for c, outcome in zip(claimed, outcomes, strict=True):
        if outcome == "done":
            acks.append(
                Ack(
                    job_id=c.job_id,
                    token=c.token,
                    transition=Transition(
                        state=State.DONE,
                        result=encode(result if result is not None else {"ok": True}),
                    ),
                )
            )
        elif outcome == "failed":
            acks.append(
                Ack(
                    job_id=c.job_id,
                    token=c.token,
                    transition=Transition(
                        state=State.FAILED,
                        error=error,
                        reason=Reason.ERROR,
                        traceback=f'Traceback (most recent call last):\n  File "job.py"\n{error}',
                    ),
                )
            )
        else:
            assert outcome == "inflight"
    b.apply_many(acks)


def make_jobs(queue_name: str, n: int, *, backend: str | None = None, **options: Any) -> list[str]:
    payloads = options.pop("payloads", None) or [{"n": i} for i in range(n)]
    return [e.job_id for e in queue.enqueue_many(queue_name, payloads, backend=backend, **options)]


def make_failed(
    queue_name: str, n: int, *, backend: str | None = None, name: str | None = None, **kw: Any
) -> list[str]:
    ids = make_jobs(queue_name, n, backend=backend, max_attempts=1, name=name)
    settle(queue_name, ["failed"] * n, backend=backend, **kw)
    return ids
