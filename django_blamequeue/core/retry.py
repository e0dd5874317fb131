"""Retry decisions: the delay before attempt n+1, whether an error is retried, and the policy
that holds a job's knobs for both.

Pure: the settings' values come from the caller (``RetrySettings`` is what ``conf.Settings``
already offers), so a policy is a function of two objects and is built once per pair.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from django_blamequeue.exceptions import Unrecoverable

if TYPE_CHECKING:
    from django_blamequeue.core.options import JobOptions

logger = logging.getLogger("django_blamequeue.lifecycle")

RetryPredicate = Callable[[BaseException], bool]


def backoff_seconds(
    attempt: int, *, base: float = 1.0, maximum: float = 300.0, jitter: bool = False
) -> float:
    """Delay before the next try after ``attempt`` (1-based) failed:
    ``min(base · 2^(attempt−1), maximum)``, with full jitter a uniform draw below it."""
    if attempt < 1:
        attempt = 1
    exponent = min(attempt - 1, 62)  # 2**62 · base is past any sane max; avoids overflow
    delay = min(base * (2.0**exponent), maximum)
    if jitter:
        delay = random.uniform(0.0, delay)
    return delay


def is_retryable(exc: BaseException, predicate: RetryPredicate | None) -> bool:
    """``Unrecoverable`` never retries; a predicate that itself raises counts as retryable."""
    if isinstance(exc, Unrecoverable):
        return False
    if predicate is None:
        return True
    try:
        return bool(predicate(exc))
    except Exception:
        logger.warning("retryable predicate raised; treating the error as retryable", exc_info=True)
        return True


class RetrySettings(Protocol):
    """The settings a policy reads (``conf.Settings`` has them)."""

    @property
    def backoff_base(self) -> float: ...
    @property
    def backoff_max(self) -> float: ...
    @property
    def backoff_jitter(self) -> bool: ...
    @property
    def max_snoozes(self) -> int: ...
    @property
    def missing_handler_timeout(self) -> float: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """The knobs that decide retries; from the settings and the job's own options."""

    backoff_base: float = 1.0
    backoff_max: float = 300.0
    backoff_jitter: bool = False
    retryable: RetryPredicate | None = None
    max_snoozes: int = 100
    missing_handler_timeout: float = 7 * 86400.0

    @classmethod
    def of(cls, options: JobOptions | None, settings: RetrySettings) -> RetryPolicy:
        """The job's own backoff options (``@job(backoff_base=, backoff_max=, jitter=)``,
        its ``retryable``, its ``max_snoozes``) win over the settings'."""
        o = options
        return cls(
            backoff_base=o.backoff_base
            if o and o.backoff_base is not None
            else settings.backoff_base,
            backoff_max=o.backoff_max if o and o.backoff_max is not None else settings.backoff_max,
            backoff_jitter=o.jitter if o and o.jitter is not None else settings.backoff_jitter,
            retryable=o.retryable if o else None,
            max_snoozes=o.max_snoozes if o and o.max_snoozes is not None else settings.max_snoozes,
            missing_handler_timeout=settings.missing_handler_timeout,
        )

    def delay(self, attempt: int) -> float:
        """Seconds before the next try after ``attempt`` (1-based) failed."""
        return backoff_seconds(
            attempt, base=self.backoff_base, maximum=self.backoff_max, jitter=self.backoff_jitter
        )


#: ``policy_for``'s answers: id(options) → (options, settings, policy). Checked by identity,
#: so a job registered again or new settings (``override_settings``) get a new policy;
#: bounded, since tests may register many jobs.
_policies: dict[int, tuple[JobOptions | None, RetrySettings, RetryPolicy]] = {}


def policy_for(options: JobOptions | None, settings: RetrySettings) -> RetryPolicy:
    """``RetryPolicy.of``, built once per job definition's options and settings object, not
    once per attempt (``None``: a job without a definition, the settings alone)."""
    cached = _policies.get(id(options))
    if cached is not None and cached[0] is options and cached[1] is settings:
        return cached[2]
    policy = RetryPolicy.of(options, settings)
    if len(_policies) >= 1024:
        _policies.clear()
    _policies[id(options)] = (options, settings, policy)
    return policy
