"""Inline SVG line charts of per-step curves (a suite test's loss and its difference)."""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pytest_accuracy.report.svg import COLOURS


@dataclass(frozen=True)
class Series:
    """One curve: its legend label, a value per step (None where the run has none), a colour."""

    label: str
    values: Sequence[float | None]
    colour: str
    dashed: bool = False


def line_chart(steps: Sequence[int], series: Sequence[Series], *, title: str, y_label: str,
               mark_step: int | None = None, width: int = 1100, height: int = 300) -> str:
    """The curves against step on linear axes, a legend above, the divergence step dashed."""
    left, right, top, bottom = 72, 16, 44, 44
    plot_w, plot_h = width - left - right, height - top - bottom
    finite = [v for s in series for v in s.values if v is not None and math.isfinite(v)]
    lo, hi = (min(finite), max(finite)) if finite else (0.0, 1.0)
    if hi - lo < 1e-12 * max(abs(hi), 1.0):
        lo, hi = lo - 0.5 * max(abs(lo), 1e-9), hi + 0.5 * max(abs(hi), 1e-9)
    x0, x1 = (steps[0], steps[-1]) if steps else (0, 1)
    span = max(x1 - x0, 1)

    def sx(step: float) -> float:
        return left + plot_w * (step - x0) / span

    def sy(v: float) -> float:
        return top + plot_h * (1 - (v - lo) / (hi - lo))

    out = [f"<svg class='chart' viewBox='0 0 {width} {height}' width='100%' role='img' "
           f"aria-label='{html.escape(title)}'>",
           f"<text x='{left}' y='16' class='ct'>{html.escape(title)}</text>"]
    out += _y_ticks(lo, hi, sy, left, width - right, y_label)
    out += _x_ticks(x0, x1, sx, top + plot_h)
    if mark_step is not None and x0 <= mark_step <= x1:
        x = sx(mark_step)
        out.append(f"<line x1='{x:.1f}' x2='{x:.1f}' y1='{top}' y2='{top + plot_h}' "
                   f"stroke='{COLOURS['first']}' stroke-dasharray='4 3'><title>diverges from "
                   f"step {mark_step}</title></line>")
    out += [_path(steps, s, sx, sy) for s in series]
    out += _legend(series, width - right)
    out.append("</svg>")
    return "".join(out)


def _path(steps: Sequence[int], series: Series, sx: Callable[[float], float],
          sy: Callable[[float], float]) -> str:
    """A polyline broken where the run has no value."""
    parts, pen_down = [], False
    for step, value in zip(steps, series.values, strict=True):
        if value is None or not math.isfinite(value):
            pen_down = False
            continue
        parts.append(f"{'L' if pen_down else 'M'}{sx(step):.1f},{sy(value):.1f}")
        pen_down = True
    dash = " stroke-dasharray='5 3'" if series.dashed else ""
    return (f"<path d='{' '.join(parts)}' fill='none' stroke='{series.colour}' "
            f"stroke-width='1.3'{dash}><title>{html.escape(series.label)}</title></path>")


def _y_ticks(lo: float, hi: float, sy: Callable[[float], float], x0: int, x1: int,
             label: str) -> list[str]:
    step = _nice(hi - lo)
    out = []
    value = math.ceil(lo / step) * step
    while value <= hi + step * 1e-9:
        y = sy(value)
        out.append(f"<line x1='{x0}' x2='{x1}' y1='{y:.1f}' y2='{y:.1f}' class='grid'/>")
        out.append(f"<text x='{x0 - 6}' y='{y + 4:.1f}' class='ax' text-anchor='end'>"
                   f"{value:.4g}</text>")
        value += step
    mid = (sy(lo) + sy(hi)) / 2
    out.append(f"<text x='12' y='{mid:.0f}' class='ax' text-anchor='middle' "
               f"transform='rotate(-90 12 {mid:.0f})'>{html.escape(label)}</text>")
    return out


def _x_ticks(x0: int, x1: int, sx: Callable[[float], float], y: float) -> list[str]:
    step = max(int(_nice(x1 - x0)), 1)
    out = []
    for tick in range(math.ceil(x0 / step) * step, x1 + 1, step):
        x = sx(tick)
        out.append(f"<line x1='{x:.1f}' x2='{x:.1f}' y1='{y:.1f}' y2='{y + 4:.1f}' "
                   "stroke='#999'/>")
        out.append(f"<text x='{x:.1f}' y='{y + 16:.1f}' class='ax' text-anchor='middle'>"
                   f"{tick}</text>")
    out.append(f"<text x='{sx((x0 + x1) / 2):.0f}' y='{y + 34:.1f}' class='ax' "
               "text-anchor='middle'>step</text>")
    return out


def _nice(span: float, most: int = 6) -> float:
    """A 1, 2 or 5 x 10^k step that cuts ``span`` into at most ``most`` intervals."""
    span = max(span, 1e-12)
    scale = 10.0 ** math.floor(math.log10(span / most))
    return next(f * scale for f in (1, 2, 5, 10) if span / (f * scale) <= most)


def _legend(series: Sequence[Series], x1: int) -> list[str]:
    out, x = [], float(x1)
    for s in reversed([s for s in series if s.label]):  # an unlabelled curve: a band's edge
        x -= 16 + 7 * len(s.label)
        dash = " stroke-dasharray='5 3'" if s.dashed else ""
        out.append(f"<line x1='{x:.0f}' x2='{x + 12:.0f}' y1='30' y2='30' stroke='{s.colour}' "
                   f"stroke-width='2'{dash}/><text x='{x + 15:.0f}' y='34' class='ax'>"
                   f"{html.escape(s.label)}</text>")
    return out
