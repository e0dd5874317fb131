"""Retry delay: ``min(base · 2^(attempt−1), max)``, optionally with full jitter.

The rule lives with the other retry decisions in ``core/retry.py``; this name stays
importable for the code and tests that import it from here.
"""

from __future__ import annotations

from django_blamequeue.core.retry import backoff_seconds

__all__ = ["backoff_seconds"]
