"""Line charts of a pool's checkpoint figures (the `checkpoint_metrics` ledger listing), drawn on the
server as inline SVG: no script, no library, nothing the page's Content-Security-Policy refuses.

This module computes a chart's geometry from the listing's rows; `templates/pool.html` writes the
SVG from it, so every value goes through the templates' escaping. A point is a row: its version is
its x, the row's figure its y, and it carries the row's raw value (`data-value`, and a tooltip) as
the ledger API's CSV writes it, so the chart shows no number the API would not. A row without the
figure (not verified yet, or a figure its trainer does not report) breaks the line there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from proofpool.core.ledger_listings import csv_cell

Row = dict[str, Any]

WIDTH: Final = 480
"""SVG units across; the figure scales to the page (a phone shows it at about three quarters)."""
HEIGHT: Final = 220
LEFT: Final = 60
"""Room for the y axis' tick labels and its title."""
RIGHT: Final = 14
TOP: Final = 12
BOTTOM: Final = 44
"""Room for the x axis' tick labels and its title."""
TICKS: Final = 5
"""About how many ticks an axis gets."""

CHARTED: Final = (
    ("mean_reward", "Mean reward", "reward"),
    ("loss", "GRPO loss", "loss"),
    ("inner_loss", "Mean inner loss", "loss"),
)
"""(figure, title, y axis label) of each chart a pool page may show: the reward and loss curves of
a GRPO pool, the inner loss of a DiLoCo pool. A chart is drawn only when some row has its figure."""


@dataclass(frozen=True)
class Point:
    """One row of the listing on the chart."""

    x: float
    y: float
    version: int
    value: str
    """The figure as the API's CSV writes it."""


@dataclass(frozen=True)
class Tick:
    at: float
    """Position along its axis, in SVG units."""
    label: str


@dataclass(frozen=True)
class Chart:
    """Everything the template needs to draw one figure by checkpoint version."""

    figure: str
    title: str
    y_label: str
    points: tuple[Point, ...]
    path: str
    """The line: `M x,y L x,y ...`, a new `M` after each row without the figure."""
    x_ticks: tuple[Tick, ...]
    y_ticks: tuple[Tick, ...]
    summary: str
    """The chart in words (its accessible name): versions, first and last value, lowest and highest."""
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    right: int = WIDTH - RIGHT
    top: int = TOP
    bottom: int = HEIGHT - BOTTOM


def _nice_step(span: float, integer: bool) -> float:
    """A step of 1, 2 or 5 times a power of ten giving about `TICKS` ticks over `span`."""
    raw = span / TICKS if span > 0 else 1.0
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    return max(1.0, step) if integer else step


def _ticks(low: float, high: float, integer: bool) -> list[float]:
    step = _nice_step(high - low, integer)
    first = math.ceil(low / step - 1e-9) * step
    count = math.floor((high - first) / step + 1e-9) + 1
    return [first + i * step for i in range(max(count, 0))]


def _label(value: float) -> str:
    """A tick label: up to 4 significant digits, no trailing zeros, never `-0`."""
    text = f"{value:.4g}"
    return "0" if text in ("-0", "0") else text


def _span(values: Sequence[float], integer: bool) -> tuple[float, float]:
    """The axis' range: the values' range with a little room, never empty."""
    low, high = min(values), max(values)
    if integer:
        return (low - 1, high + 1) if low == high else (low, high)
    if low == high:
        pad = abs(low) * 0.1 or 1.0
        return low - pad, high + pad
    pad = (high - low) * 0.05
    return low - pad, high + pad


def line_chart(rows: Sequence[Row], figure: str, title: str, y_label: str) -> Chart | None:
    """The chart of `figure` over `rows` (the listing's rows, any order); None when no row has it."""
    ordered = sorted(rows, key=lambda row: row["version"])
    known = [row for row in ordered if row.get(figure) is not None]
    if not known:
        return None
    x_low, x_high = _span([row["version"] for row in known], integer=True)
    y_low, y_high = _span([float(row[figure]) for row in known], integer=False)

    def x_of(version: float) -> float:
        return round(LEFT + (version - x_low) / (x_high - x_low) * (WIDTH - RIGHT - LEFT), 2)

    def y_of(value: float) -> float:
        return round(HEIGHT - BOTTOM - (value - y_low) / (y_high - y_low) * (HEIGHT - BOTTOM - TOP), 2)

    points: list[Point] = []
    segments: list[str] = []
    pen_down = False
    for row in ordered:
        value = row.get(figure)
        if value is None:
            pen_down = False
            continue
        point = Point(x_of(row["version"]), y_of(float(value)), row["version"], csv_cell(value))
        segments.append(f"{'L' if pen_down else 'M'}{point.x},{point.y}")
        points.append(point)
        pen_down = True
    return Chart(
        figure=figure,
        title=title,
        y_label=y_label,
        points=tuple(points),
        path=" ".join(segments),
        x_ticks=tuple(Tick(x_of(v), _label(v)) for v in _ticks(x_low, x_high, integer=True)),
        y_ticks=tuple(Tick(y_of(v), _label(v)) for v in _ticks(y_low, y_high, integer=False)),
        summary=_summary(title, known, figure),
    )


def _summary(title: str, known: Sequence[Row], figure: str) -> str:
    lowest = min(known, key=lambda row: float(row[figure]))
    highest = max(known, key=lambda row: float(row[figure]))
    first, last = known[0], known[-1]
    versions = f"version {first['version']}" if len(known) == 1 else f"versions {first['version']} to {last['version']}"
    return (
        f"{title} by checkpoint version, {len(known)} {'checkpoint' if len(known) == 1 else 'checkpoints'} "
        f"({versions}): first {csv_cell(first[figure])}, last {csv_cell(last[figure])}, lowest "
        f"{csv_cell(lowest[figure])} (version {lowest['version']}), highest {csv_cell(highest[figure])} "
        f"(version {highest['version']})."
    )


def pool_charts(rows: Sequence[Row]) -> list[Chart]:
    """The charts of `CHARTED` that `rows` have figures for, in that order."""
    charts = (line_chart(rows, figure, title, y_label) for figure, title, y_label in CHARTED)
    return [chart for chart in charts if chart is not None]
