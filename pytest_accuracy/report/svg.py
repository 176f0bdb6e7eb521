"""Inline SVG charts for the HTML report: no plotting library, no network needed to view."""

from __future__ import annotations

import html
import math
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

COLOURS = {"pass": "#2e7d32", "fail": "#c62828", "carried": "#ef9a9a", "first": "#6a1b9a",
           "skip": "#9e9e9e", "unmatched": "#9e9e9e", "waived": "#f9a825", "error": "#000000",
           "tolerance": "#1565c0"}

_LANE = 18  # how far the 0 and inf lanes sit below and above the plot


@dataclass(frozen=True)
class Point:
    """One node on the error chart: its position in execution order and its error."""

    x: int
    error: float | None  # None: nothing to plot (unmatched, skipped)
    status: str
    label: str
    tolerance: float | None = None


def _log_range(values: Sequence[float]) -> tuple[float, float]:
    positive = [v for v in values if v > 0 and math.isfinite(v)]
    if not positive:
        return -12.0, 0.0
    lo = math.floor(math.log10(min(positive)))
    hi = math.ceil(math.log10(max(positive)))
    return float(min(lo, hi - 1)), float(max(hi, lo + 1))


def error_chart(points: Sequence[Point], *, first_x: int | None, title: str,
                width: int = 1100, height: int = 340) -> str:
    """Errors along execution order on a log axis, the per-dtype tolerance as a step line.

    Zero errors sit on the bottom edge and infinite ones on the top edge, so every compared
    node is visible; the first divergence is a vertical line, labelled above the inf lane so
    the label covers no point; the x axis is labelled with node indices.
    """
    left, right, top, bottom = 64, 16, 66, 64
    plot_w, plot_h = width - left - right, height - top - bottom
    values = [p.error for p in points if p.error is not None]
    values += [p.tolerance for p in points if p.tolerance]
    lo, hi = _log_range([v for v in values if v is not None])
    n = max(len(points), 1)

    def sx(x: int) -> float:
        return left + plot_w * (x + 0.5) / n

    def sy(v: float) -> float:
        # zero and inf get lanes of their own below and above the axis
        if v <= 0:
            return top + plot_h + _LANE
        if not math.isfinite(v):
            return top - _LANE
        frac = (math.log10(v) - lo) / (hi - lo)
        return top + plot_h * (1 - min(max(frac, 0.0), 1.0))

    out = [f"<svg class='chart' viewBox='0 0 {width} {height}' width='100%' role='img' "
           f"aria-label='{html.escape(title)}'>",
           f"<text x='{left}' y='16' class='ct'>{html.escape(title)}</text>"]
    out += _y_axis(range(int(lo), int(hi) + 1), sy, left, width - right)
    out.append(_tolerance_path(points, sx, sy))
    out += _x_axis(len(points), sx, top + plot_h + _LANE + 20)
    out.append(f"<text x='{left + plot_w / 2:.0f}' y='{height - 6}' class='ax' "
               "text-anchor='middle'>node index, in execution order</text>")
    if first_x is not None:
        out += _first_marker(sx(first_x), top, plot_h, width - right)
    out += _markers(points, sx, sy)
    out.append("</svg>")
    return "".join(out)


def _markers(points: Sequence[Point], sx: Callable[[int], float],
             sy: Callable[[float], float]) -> list[str]:
    """Each plotted node's circle, drawn in order, less those a later circle of the same look
    at the same spot hides entirely: 100k nodes of exact matches are ~10k circles (the page's
    SVG 16.8 -> ~1.7 MB). The one drawn is the last, the one a pointer finds, as before; its
    title counts the nodes it stands for."""
    drawn = [(p, f"{sx(p.x):.1f}", f"{sy(p.error):.1f}") for p in points if p.error is not None]
    looks = [(x, y, p.status) for p, x, y in drawn]
    last = {look: i for i, look in enumerate(looks)}
    count = Counter(looks)
    return [_circle(p, x, y, count[look] - 1)
            for i, ((p, x, y), look) in enumerate(zip(drawn, looks, strict=True))
            if last[look] == i]


def _y_axis(exponents: range, sy: Callable[[float], float], x0: int, x1: int) -> list[str]:
    out = []
    stride = math.ceil(len(exponents) / 8)  # at most 8 labels: legible on a narrow screen
    for exp in exponents:
        y = sy(10.0 ** exp)
        out.append(f"<line x1='{x0}' x2='{x1}' y1='{y:.1f}' y2='{y:.1f}' class='grid'/>")
        if (exponents[-1] - exp) % stride == 0:
            out.append(f"<text x='{x0 - 6}' y='{y + 4:.1f}' class='ax' text-anchor='end'>"
                       f"1e{exp}</text>")
    for label, y in (("0", sy(0.0)), ("inf", sy(math.inf))):
        out.append(f"<text x='{x0 - 6}' y='{y + 4:.1f}' class='ax' text-anchor='end'>"
                   f"{label}</text>")
    return out


def x_ticks(count: int, most: int = 12) -> list[int]:
    """Node indices to label: 0 and round multiples (1, 2, 5 x 10^k), at most ``most``."""
    if count <= 0:
        return []
    step = next(s for s in _nice_steps() if count / s <= most)
    return list(range(0, count, step))


def _nice_steps() -> Iterator[int]:
    scale = 1
    while True:
        for factor in (1, 2, 5):
            yield factor * scale
        scale *= 10


def _x_axis(count: int, sx: Callable[[int], float], y: float) -> list[str]:
    out = []
    for i in x_ticks(count):
        x = sx(i)
        out.append(f"<line x1='{x:.1f}' x2='{x:.1f}' y1='{y - 13:.1f}' y2='{y - 9:.1f}' "
                   "stroke='#999'/>")
        out.append(f"<text x='{x:.1f}' y='{y:.1f}' class='ax' text-anchor='middle'>{i}</text>")
    return out


def _first_marker(x: float, top: int, plot_h: int, x_max: int) -> list[str]:
    """The dashed line through the plot and its label above the inf lane, clear of points."""
    near_right = x > x_max - 120
    anchor, dx = ("end", -4) if near_right else ("start", 4)
    return [f"<line x1='{x:.1f}' x2='{x:.1f}' y1='{top - 38}' y2='{top + plot_h + _LANE + 6}' "
            f"stroke='{COLOURS['first']}' stroke-width='1.5' stroke-dasharray='4 3'/>",
            f"<text x='{x + dx:.1f}' y='{top - 32}' class='ax' text-anchor='{anchor}' "
            f"fill='{COLOURS['first']}'>first divergence</text>"]


def _circle(p: Point, x: str, y: str, more: int = 0) -> str:
    colour = COLOURS.get(p.status, "#000")
    fill = "white" if p.status == "carried" else colour
    radius = 4.5 if p.status == "first" else 3
    also = f" (and {more} more {'node' if more == 1 else 'nodes'} drawn here)" if more else ""
    return (f"<circle cx='{x}' cy='{y}' r='{radius}' fill='{fill}' stroke='{colour}'>"
            f"<title>{html.escape(p.label)}{also}</title></circle>")


def _tolerance_path(points: Sequence[Point], sx: Callable[[int], float],
                    sy: Callable[[float], float]) -> str:
    segments: list[str] = []
    for p in points:
        if not p.tolerance:
            continue
        cmd = "M" if not segments else "L"
        y = sy(p.tolerance)
        segments.append(f"{cmd}{sx(p.x) - 1:.1f},{y:.1f} L{sx(p.x) + 1:.1f},{y:.1f}")
    if not segments:
        return ""
    return (f"<path d='{' '.join(segments)}' fill='none' stroke='{COLOURS['tolerance']}' "
            "stroke-width='1.2'><title>tolerance of the node's effective dtype</title></path>")


def bar_chart(labels: Sequence[str], values: Sequence[float], *, limit: float | None,
              title: str, unit: str = "", width: int = 900) -> str:
    """Horizontal bars, largest first (the guide's local-norm figure); the limit is a line."""
    row, left, top = 18, 330, 26
    height = top + row * len(labels) + 30
    peak = max([*(v for v in values if math.isfinite(v)), limit or 0.0, 1e-12])
    plot_w = width - left - 70

    def sx(v: float) -> float:
        return left + plot_w * min(v if math.isfinite(v) else peak, peak) / peak

    out = [f"<svg class='chart' viewBox='0 0 {width} {height}' width='100%' role='img' "
           f"aria-label='{html.escape(title)}'>",
           f"<text x='8' y='16' class='ct'>{html.escape(title)}</text>"]
    for i, (label, value) in enumerate(zip(labels, values, strict=True)):
        y = top + i * row
        over = limit is not None and not value <= limit
        colour = COLOURS["fail"] if over else COLOURS["pass"]
        out.append(f"<text x='{left - 6}' y='{y + 12}' class='ax' text-anchor='end'>"
                   f"{html.escape(_clip(label, 52))}</text>")
        out.append(f"<rect x='{left}' y='{y + 2}' width='{max(sx(value) - left, 1):.1f}' "
                   f"height='{row - 5}' fill='{colour}'><title>{html.escape(label)}: "
                   f"{value:.4g}{unit}</title></rect>")
        out.append(f"<text x='{sx(value) + 4:.1f}' y='{y + 12}' class='ax'>{value:.3g}{unit}"
                   "</text>")
    if limit is not None:
        x = sx(limit)
        out.append(f"<line x1='{x:.1f}' x2='{x:.1f}' y1='{top}' y2='{height - 26}' "
                   f"stroke='{COLOURS['tolerance']}' stroke-dasharray='4 3'/>")
        out.append(f"<text x='{x + 3:.1f}' y='{height - 12}' class='ax' "
                   f"fill='{COLOURS['tolerance']}'>allowed {limit:g}{unit}</text>")
    out.append("</svg>")
    return "".join(out)


def _clip(text: str, size: int) -> str:
    return text if len(text) <= size else "…" + text[-(size - 1):]
