"""The inline SVG line charts of `pobo report`'s pages, drawn from the numbers (the page
loads nothing): curves, their colours and dashes, axes with round ticks, a legend."""
from __future__ import annotations

import math
from dataclasses import dataclass

from pobo.html_page import _e


COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2",
           "#17becf", "#7f7f7f", "#bcbd22")
DASHES = (None, "7 4", "2 3", "9 3 2 3")  # with COLOURS: 40 curves drawn apart


@dataclass(frozen=True)
class Curve:
    """One line of a chart: y against t = 1, 2, ... (dash: an SVG stroke-dasharray)."""

    label: str
    ys: tuple[float, ...]
    dash: str | None = None
    colour: str | None = None


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering [low, high] (about `count` of them)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return [0.0, 1.0]
    if high <= low:
        high = low + (abs(low) or 1.0)
    raw = (high - low) / max(count - 1, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(low / step) * step
    # as many ticks as cover [low, high], counted up front: a loop until one reached
    # `high` never ended when rounding made every tick 0 (a curve of values ~1e-20)
    n = max(2, math.ceil((high - start) / step - 1e-9) + 1)
    digits = max(0, 2 - math.floor(math.log10(step)))  # enough for the step's digits
    return [round(start + k * step, digits) for k in range(n)]


def svg_chart(curves: list[Curve], *, title: str, xlabel: str, ylabel: str,
              ident: str = "fig", width: int = 640, height: int = 340,
              xnames: list[str] | None = None) -> str:
    """An inline SVG line chart: axes with ticks and labels, one polyline per curve, and
    a legend below the plot; `xnames` labels x = 1, 2, ... by name (a categorical axis)."""
    curves = [c for c in curves if c.ys]
    left, right, top, bottom = 64, 16, 28, 44
    legend_h = 18 * len(curves) + 8
    full_h = height + legend_h
    pw, ph = width - left - right, height - top - bottom
    finite = [y for c in curves for y in c.ys if math.isfinite(y)] or [0.0, 1.0]
    yt = nice_ticks(min(min(finite), 0.0), max(finite))
    xmax = max((len(c.ys) for c in curves), default=1)
    xt = ([t for t in nice_ticks(1, max(xmax, 2)) if 1 <= t <= max(xmax, 2)] or [1]
          if not xnames else list(range(1, len(xnames) + 1)))
    x0, x1, y0, y1 = 1.0, float(max(xmax, 2)), yt[0], yt[-1]

    def X(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * pw

    def Y(y: float) -> float:
        return top + (1 - (y - y0) / (y1 - y0)) * ph

    parts = [f"<svg class='pobo-figure' id='{_e(ident)}' role='img' width='{width}' "
             f"height='{full_h}' viewBox='0 0 {width} {full_h}' "
             f"aria-label='{_e(title)}'>",
             f"<title>{_e(title)}</title>",
             f"<text x='{width / 2:.1f}' y='18' text-anchor='middle' class='title'>"
             f"{_e(title)}</text>",
             f"<rect x='{left}' y='{top}' width='{pw}' height='{ph}' fill='none' "
             "stroke='#999'/>"]
    for y in yt:
        parts.append(f"<line x1='{left}' x2='{left + pw}' y1='{Y(y):.1f}' y2='{Y(y):.1f}' "
                     f"stroke='#eee'/><text x='{left - 6}' y='{Y(y) + 4:.1f}' "
                     f"text-anchor='end' class='tick'>{_tick(y)}</text>")
    for x in xt:
        parts.append(f"<line x1='{X(x):.1f}' x2='{X(x):.1f}' y1='{top + ph}' "
                     f"y2='{top + ph + 5}' stroke='#999'/><text x='{X(x):.1f}' "
                     f"y='{top + ph + 18}' text-anchor='middle' class='tick'>"
                     f"{_e(xnames[x - 1]) if xnames else _tick(x)}</text>")
    parts.append(f"<text x='{left + pw / 2:.1f}' y='{top + ph + 36}' text-anchor='middle' "
                 f"class='axis'>{_e(xlabel)}</text>")
    parts.append(f"<text transform='translate(16 {top + ph / 2:.1f}) rotate(-90)' "
                 f"text-anchor='middle' class='axis'>{_e(ylabel)}</text>")
    for i, c in enumerate(curves):
        colour = c.colour or COLOURS[i % len(COLOURS)]
        dash = f" stroke-dasharray='{c.dash}'" if c.dash else ""
        points = " ".join(f"{X(t):.1f},{Y(y):.1f}" for t, y in enumerate(c.ys, 1)
                          if math.isfinite(y))
        parts.append(f"<polyline class='curve' data-label='{_e(c.label)}' points='{points}' "
                     f"fill='none' stroke='{colour}' stroke-width='2'{dash}/>")
        ly = height + 14 + 18 * i
        parts.append(f"<line x1='{left}' x2='{left + 28}' y1='{ly - 4}' y2='{ly - 4}' "
                     f"stroke='{colour}' stroke-width='2'{dash}/><text x='{left + 36}' "
                     f"y='{ly}' class='legend'>{_e(c.label)}</text>")
    parts.append("</svg>")
    return "\n".join(parts)


def _tick(v: float) -> str:
    return f"{v:.4g}"
