"""A consumer's view of its queues' control state: which are paused, which are limited.

The worker claims with this view (paused queues left out; limited ones named with the
settings' defaults, for the engine to count), so an unlimited queue costs no extra round trip.
The view is re-read when a control message arrives (LISTEN/NOTIFY, pub/sub, or a change made
in this process), and every poll interval otherwise (every ``LISTENING_REFRESH`` seconds
while a listener is connected, in case a message was lost). A stale view is never unsafe: the
engine skips a paused or newly limited queue in an unlimited claim, and reads a limited
queue's live limits under its lock.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from django_blamequeue.backends import wakeup
from django_blamequeue.backends.base import Backend
from django_blamequeue.core.controls import ControlState
from django_blamequeue.core.limits import QueueLimits, in_force
from django_blamequeue.exceptions import QueueError

logger = logging.getLogger("django_blamequeue.worker")

LISTENING_REFRESH = 10.0


class ControlView:
    def __init__(
        self,
        backend: Backend,
        queues: Sequence[str],
        defaults: Mapping[str, QueueLimits],
        poll_interval: float,
        names: tuple[tuple[str, int, float], ...] = (),
    ) -> None:
        self.backend = backend
        self.queues = tuple(queues)
        self.defaults = {q: defaults[q] for q in self.queues if q in defaults}
        if names:  # job names' rate limits: a routed call may put their jobs in any queue
            self.defaults = {
                q: replace(self.defaults.get(q, QueueLimits()), name_rate_limits=names)
                for q in self.queues
            }
        self.poll_interval = poll_interval
        self.states: dict[str, ControlState] = {}
        self._next = 0.0
        self._epoch = -1
        self._read = False  # the first read is shown by the banner, not logged

    # -- reading -----------------------------------------------------------------------------
    def refresh(self, listener: Any = None, *, force: bool = False) -> bool:
        """Re-read the control state when due; answers whether it was read."""
        now = time.monotonic()
        listening = bool(getattr(listener, "listening", False))
        seen = bool(getattr(listener, "control_seen", False))
        epoch = wakeup.control_epoch()
        if not (force or seen or epoch != self._epoch or now >= self._next):
            return False
        if seen:
            listener.control_seen = False
        try:
            states = self.backend.resilience.call(
                lambda: self.backend.controls(self.queues), idempotent=True
            )
        except QueueError as exc:  # keep the last view; the engine enforces anyway
            logger.info("could not read the queues' control state: %s", exc)
            self._next = now + self.poll_interval
            return False
        self._epoch = epoch
        self._next = now + (LISTENING_REFRESH if listening else self.poll_interval)
        if self._read:
            self._log_changes(states)
        self.states, self._read = states, True
        return True

    def _log_changes(self, states: Mapping[str, ControlState]) -> None:
        for q in self.queues:
            old, new = self.states.get(q), states.get(q)
            was = bool(old and old.paused)
            now = bool(new and new.paused)
            if now and not was:
                reason = f" ({new.reason})" if new and new.reason else ""
                logger.warning("queue %r is paused%s: not claiming from it", q, reason)
            elif was and not now:
                logger.warning("queue %r was resumed", q)
            if (old.live if old else None) != (new.live if new else None):
                logger.warning("queue %r limits now: %s", q, self.limits(q, states).describe())

    # -- answers -----------------------------------------------------------------------------
    def paused(self) -> list[str]:
        return [q for q in self.queues if (s := self.states.get(q)) is not None and s.paused]

    def limits(self, queue: str, states: Mapping[str, ControlState] | None = None) -> QueueLimits:
        state = (self.states if states is None else states).get(queue)
        return in_force(state.live if state else None, self.defaults.get(queue))

    def claim_args(self) -> tuple[list[str], dict[str, QueueLimits] | None]:
        """The queues to claim from (not paused) and those to claim under limits, each with
        the settings' defaults (the engine uses a queue's live limits when it has some)."""
        queues = [q for q in self.queues if not ((s := self.states.get(q)) and s.paused)]
        limited = {
            q: self.defaults.get(q, QueueLimits()) for q in queues if not self.limits(q).empty
        }
        return queues, limited or None

    def rate_wait(self) -> float:
        """After a claim that left slots free: how soon a rate-limited queue may have room
        (its window's spacing), else infinity."""
        wait = float("inf")
        for q in self.queues:
            lim = self.limits(q)
            rates = [lim.rate_limit, lim.key_rate_limit, *lim.by_name.values()]
            for rate in rates:
                if rate is not None:
                    wait = min(wait, rate[1] / rate[0])
        return wait

    def describe(self) -> list[tuple[str, str]]:
        """Banner rows: paused queues and limits in force."""
        rows = []
        names: tuple[tuple[str, int, float], ...] = ()
        for q in self.queues:
            state = self.states.get(q)
            lim = self.limits(q)
            names = names or lim.name_rate_limits
            lim = replace(lim, name_rate_limits=())  # shown once, below
            if state is not None and state.paused:
                rows.append(("paused", f"{q}" + (f" ({state.reason})" if state.reason else "")))
            if not lim.empty:
                source = "live" if state is not None and state.live is not None else "settings"
                rows.append(("limits", f"{q}: {lim.describe()} ({source})"))
        if names:
            rows.append(("job rates", QueueLimits(name_rate_limits=names).describe()))
        return rows
