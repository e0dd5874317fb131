"""Queue control on the redis backend: each change is one script (``control.lua``) that
updates the queue's control hash, bumps its version and publishes on ``P:ctlwake``; every
claim script reads the hash itself (``limits.lua``), so pause and limits hold for every worker
from the moment the script ran. The audit row (with the acting user) follows the script."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django_blamequeue import audit
from django_blamequeue.backends import wakeup
from django_blamequeue.backends.redis.base import RedisBase
from django_blamequeue.backends.redis.codec import control_from, limits_spec, text
from django_blamequeue.core.controls import ControlState, HandlerWait, QueueLimits

NAMES_CAP = 100_000  # jobs per queue ``waiting_names`` looks at


class Control(RedisBase):
    def controls(self, queues: Sequence[str] | None = None) -> dict[str, ControlState]:
        names = (
            list(queues)
            if queues is not None
            else sorted(text(q) or "" for q in self.client.smembers(self.keys.controls))
        )
        pipe = self.client.pipeline(transaction=False)
        for q in names:
            pipe.hgetall(self.keys.queue(q, "ctl"))
        return {
            q: control_from(q, raw) for q, raw in zip(names, pipe.execute(), strict=True) if raw
        }

    def pause(
        self, queue: str, *, reason: str = "", by: str | None = None, now: datetime | None = None
    ) -> ControlState:
        spec = ["pause", queue, reason, by if by is not None else False]
        return self._control(spec, audit.PAUSE, {"reason": reason}, by, now)

    def resume(
        self, queue: str, *, by: str | None = None, now: datetime | None = None
    ) -> ControlState:
        return self._control(["resume", queue], audit.RESUME, {}, by, now)

    def set_limits(
        self,
        queue: str,
        limits: QueueLimits | None,
        *,
        by: str | None = None,
        now: datetime | None = None,
    ) -> ControlState:
        data = {"limits": limits.describe() if limits is not None else None}
        return self._control(["limits", queue, limits_spec(limits)], audit.LIMITS, data, by, now)

    def _control(
        self,
        spec: list[Any],
        action: str,
        data: dict[str, Any],
        by: str | None,
        now: datetime | None,
    ) -> ControlState:
        queue = spec[1]
        reply = self._run("control", spec, now=now)
        event = audit.Event(action=action, queue=queue, backend=self.alias, user=by, data=data)
        audit.record([event], using=self.audit_db)
        wakeup.control_changed([queue])
        return control_from(queue, reply.result)

    def handler_waits(self, queues: Sequence[str] | None = None) -> list[HandlerWait]:
        rows = self._run("waits", [list(queues) if queues is not None else False]).result
        return [
            HandlerWait(queue=text(q) or "", name=text(n) or "", count=int(c)) for q, n, c in rows
        ]

    def waiting_names(self) -> dict[tuple[str, str], int]:
        rows = self._run("names", [NAMES_CAP]).result
        return {(text(q) or "", text(n) or ""): int(c) for q, n, c in rows}
