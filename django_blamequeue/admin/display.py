"""How values look on the console: state colours, relative times, progress bars, JSON.

Everything that reaches HTML goes through ``format_html`` / ``escape``: payloads, names and
errors are data, never markup.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from django_blamequeue.core.states import State


@dataclass(frozen=True, slots=True)
class StateStyle:
    fill: str  # node / badge background
    ink: str  # text on it
    mark: str  # a glyph, so colour is never the only cue


STATE_STYLES: dict[str, StateStyle] = {
    State.PENDING: StateStyle("#3b6fb6", "#ffffff", "·"),
    State.BLOCKED: StateStyle("#c9ccd1", "#1f2328", "‖"),
    State.INFLIGHT: StateStyle("#e8a317", "#1f2328", "▶"),
    State.WAITING_CHILDREN: StateStyle("#8e5fb5", "#ffffff", "⋯"),
    State.DONE: StateStyle("#2f8f46", "#ffffff", "✓"),
    State.FAILED: StateStyle("#c8372d", "#ffffff", "✗"),
    State.CANCELLED: StateStyle("#6e7076", "#ffffff", "⊘"),
}
UNKNOWN_STYLE = StateStyle("#ffffff", "#1f2328", "?")
STATES: list[str] = [s.value for s in State]


def style_of(state: str) -> StateStyle:
    return STATE_STYLES.get(state, UNKNOWN_STYLE)


def state_badge(state: str) -> SafeString:
    return format_html(
        '<span class="bq-badge bq-state-{}">{} {}</span>',
        state if state in STATE_STYLES else "unknown",
        style_of(state).mark,
        state.replace("_", " "),
    )


def progress_bar(progress: int) -> SafeString:
    pct = max(0, min(100, int(progress)))
    return format_html(
        '<progress class="bq-progress" max="100" value="{}" title="{}%">{}%</progress>',
        pct,
        pct,
        pct,
    )


def _span(seconds: float) -> str:
    s = abs(seconds)
    if s < 1:
        return "now"
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if s >= size:
            value = s / size
            return f"{value:.0f} {unit}" if value >= 10 or unit == "min" else f"{value:.1f} {unit}"
    return f"{s:.0f} s"


def relative(when: datetime | None, now: datetime | None = None) -> SafeString:
    """``3 min ago`` / ``in 12 s``, with the absolute time (UTC) as the tooltip."""
    if when is None:
        return mark_safe('<span class="quiet">–</span>')
    now = now or timezone.now()
    delta = (when - now).total_seconds()
    span = _span(delta)
    text = span if span == "now" else (f"in {span}" if delta > 0 else f"{span} ago")
    return format_html(
        '<time datetime="{}" title="{}">{}</time>',
        when.isoformat(),
        when.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        text,
    )


def waited(since: datetime, now: datetime | None = None) -> SafeString:
    """How long ago ``since`` was, without "ago": ``waiting 5 min``."""
    seconds = ((now or timezone.now()) - since).total_seconds()
    return format_html('<time datetime="{}">{}</time>', since.isoformat(), _span(seconds))


def age(seconds: float | None) -> str:
    return "–" if seconds is None else _span(seconds)


def pretty_json(value: Any) -> str:
    """Indented JSON text (to be autoescaped by the template); non-JSON values as repr."""
    try:
        return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(value)


def short(text: str | None, limit: int = 120) -> str:
    if not text:
        return ""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"
