"""Time charts drawn as SVG on the server (no script, nothing fetched): stacked bars for
counts, lines for durations and depth, a labelled time axis and a value axis.

Pure functions over ``(start, values)`` points. Each bar or point carries a ``<title>`` (the
browser's tooltip) with its time and values; colour is never the only cue (the legend names
each series, and lines differ by dash). Every text goes through ``format_html``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

W, H = 760, 190
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 12, 26
TICKS = 4  # value-axis steps when ``top`` is not one of ``nice_top``'s


@dataclass(frozen=True, slots=True)
class Series:
    key: str  # data-series, for tests and styles
    label: str
    colour: str
    dash: str = ""  # stroke-dasharray of a line


@dataclass(frozen=True, slots=True)
class Column:
    """One x position: its time and a value per series (None: no data there)."""

    start: datetime
    values: tuple[float | None, ...]


def nice_top(value: float) -> float:
    """A round axis maximum at or above ``value`` (1, 2, 2.5, 5 × 10^n)."""
    if value <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    for m in (1.0, 2.0, 2.5, 5.0, 10.0):
        if value <= m * power:
            return m * power
    return 10.0 * power  # pragma: no cover - the loop ends at 10


def _n(value: float) -> str:
    """A coordinate as SVG text (``format_html`` escapes its arguments as strings)."""
    return f"{value:.1f}"


def ticks(top: float) -> list[float]:
    """Round values from 0 to ``top`` (a ``nice_top``) for the value axis."""
    mantissa = round(top / 10 ** math.floor(math.log10(top)), 1)
    count = {1.0: 5, 2.0: 4, 2.5: 5, 5.0: 5, 10.0: 5}.get(mantissa, TICKS)
    return [top * k / count for k in range(count + 1)]


def _x(i: int, n: int) -> float:
    return LEFT + (W - LEFT - RIGHT) * (i + 0.5) / max(n, 1)


def _y(v: float, top: float) -> float:
    return TOP + (H - TOP - BOTTOM) * (1 - min(v, top) / top)


def _axes(
    columns: Sequence[Column], top: float, fmt: Callable[[float], str], time_fmt: str
) -> SafeString:
    n = len(columns)
    grid = format_html_join(
        "",
        '<line class="bq-chart-grid" x1="{}" x2="{}" y1="{}" y2="{}" stroke="#d0d3d8"/>'
        '<text class="bq-chart-tick" x="{}" y="{}" text-anchor="end">{}</text>',
        (
            (LEFT, W - RIGHT, _n(_y(v, top)), _n(_y(v, top)), LEFT - 6, _n(_y(v, top) + 4), fmt(v))
            for v in ticks(top)
        ),
    )
    every = max(1, n // 6)
    labels = format_html_join(
        "",
        '<text class="bq-chart-tick" x="{}" y="{}" text-anchor="middle">{}</text>',
        (
            (_n(_x(i, n)), H - 8, c.start.astimezone(UTC).strftime(time_fmt))
            for i, c in enumerate(columns)
            if i % every == 0
        ),
    )
    return format_html("{}{}", grid, labels)


def _tip(column: Column, series: Sequence[Series], fmt: Callable[[float], str]) -> str:
    parts = [
        f"{s.label}: {'–' if v is None else fmt(v)}"
        for s, v in zip(series, column.values, strict=True)
    ]
    return f"{column.start.astimezone(UTC):%Y-%m-%d %H:%M} UTC — " + ", ".join(parts)


def _frame(
    key: str, title: str, body: SafeString, series: Sequence[Series], empty: bool
) -> SafeString:
    legend = format_html_join(
        "",
        '<li data-series="{}"><span class="bq-swatch" style="background:{}"></span>{}</li>',
        ((s.key, s.colour, s.label) for s in series),
    )
    note = (
        mark_safe('<p class="bq-note bq-chart-empty">No data in this range.</p>') if empty else ""
    )
    return format_html(
        '<figure class="bq-chart" data-chart="{}"><figcaption>{}</figcaption>'
        '<svg class="bq-chart-svg" viewBox="0 0 {} {}" width="{}" height="{}" role="img" '
        'aria-label="{}">{}</svg><ul class="bq-legend">{}</ul>{}</figure>',
        key, title, W, H, W, H, title, body, legend, note,
    )  # fmt: skip


def bars(
    key: str,
    title: str,
    series: Sequence[Series],
    columns: Sequence[Column],
    *,
    fmt: Callable[[float], str],
    time_fmt: str = "%H:%M",
) -> SafeString:
    """Stacked bars: one bar per column, one segment per series (in series order)."""
    totals = [sum(v or 0 for v in c.values) for c in columns]
    top = nice_top(max(totals, default=0))
    n = len(columns)
    width = max(1.0, (W - LEFT - RIGHT) / max(n, 1) - 1)
    parts = []
    for i, c in enumerate(columns):
        base = 0.0
        segments = []
        for s, v in zip(series, c.values, strict=True):
            if not v:
                continue
            y0, y1 = _y(base, top), _y(base + v, top)
            segments.append(
                format_html(
                    '<rect data-series="{}" x="{}" y="{}" width="{}" height="{}" fill="{}"/>',
                    s.key,
                    _x(i, n) - width / 2,
                    y1,
                    width,
                    max(0.5, y0 - y1),
                    s.colour,
                )
            )
            base += v
        if segments:
            parts.append(
                format_html(
                    '<g class="bq-chart-bar" data-i="{}"><title>{}</title>{}</g>',
                    i,
                    _tip(c, series, fmt),
                    mark_safe("".join(segments)),
                )
            )
    body = format_html("{}{}", _axes(columns, top, fmt, time_fmt), mark_safe("".join(parts)))
    return _frame(key, title, body, series, empty=not any(totals))


def lines(
    key: str,
    title: str,
    series: Sequence[Series],
    columns: Sequence[Column],
    *,
    fmt: Callable[[float], str],
    time_fmt: str = "%H:%M",
) -> SafeString:
    """A line per series; a gap where a column has no value for it. Each column with any
    value has an invisible hover target carrying its tooltip."""
    found = [v for c in columns for v in c.values if v is not None]
    top = nice_top(max(found, default=0))
    n = len(columns)
    paths = []
    for k, s in enumerate(series):
        runs: list[list[str]] = [[]]
        for i, c in enumerate(columns):
            v = c.values[k]
            if v is None:
                runs.append([])
            else:
                runs[-1].append(f"{_x(i, n):.1f},{_y(v, top):.1f}")
        points = " ".join(p for run in runs for p in run)
        d = " ".join(f"M{' L'.join(run)}" for run in runs if run)
        dash = format_html(' stroke-dasharray="{}"', s.dash) if s.dash else ""
        paths.append(
            format_html(
                '<path class="bq-chart-line" data-series="{}" data-points="{}" d="{}" '
                'stroke="{}" fill="none" stroke-width="2"{}/>',
                s.key,
                points,
                d,
                s.colour,
                dash,
            )
        )
    width = (W - LEFT - RIGHT) / max(n, 1)
    hovers = format_html_join(
        "",
        '<rect class="bq-chart-hover" x="{}" y="{}" width="{}" height="{}" fill="transparent">'
        "<title>{}</title></rect>",
        (
            (_n(_x(i, n) - width / 2), TOP, _n(width), H - TOP - BOTTOM, _tip(c, series, fmt))
            for i, c in enumerate(columns)
            if any(v is not None for v in c.values)
        ),
    )
    body = format_html(
        "{}{}{}", _axes(columns, top, fmt, time_fmt), mark_safe("".join(paths)), hovers
    )
    return _frame(key, title, body, series, empty=not found)


def seconds(value: float) -> str:
    """A duration for an axis or a tooltip: ``850 ms``, ``2.5 s``, ``4 min``."""
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 60:
        return f"{value:.3g} s"
    return f"{value / 60:.3g} min"


def count(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 or value == int(value) else f"{value:.2g}"


def sparkline(done: Sequence[int], failed: Sequence[int], title: str) -> SafeString:
    """A small bar per point (done up, failed down from the middle), for a table cell."""
    w, h, n = 120, 26, max(len(done), 1)
    top = max([*done, *failed, 1])
    step = w / n
    mid = h / 2
    up = format_html_join(
        "",
        '<rect x="{}" y="{}" width="{}" height="{}" fill="#2f8f46"/>',
        ((_n(i * step), _n(mid - mid * v / top), _n(max(step - 0.5, 0.5)), _n(mid * v / top))
         for i, v in enumerate(done) if v),
    )  # fmt: skip
    down = format_html_join(
        "",
        '<rect x="{}" y="{}" width="{}" height="{}" fill="#c8372d"/>',
        (
            (_n(i * step), _n(mid), _n(max(step - 0.5, 0.5)), _n(mid * v / top))
            for i, v in enumerate(failed)
            if v
        ),
    )
    return format_html(
        '<svg class="bq-spark" viewBox="0 0 {} {}" width="{}" height="{}" role="img" '
        'aria-label="{}"><title>{}</title><line x1="0" x2="{}" y1="{}" y2="{}" '
        'class="bq-chart-grid"/>{}{}</svg>',
        w, h, w, h, title, title, w, mid, mid, up, down,
    )  # fmt: skip
