"""The step x rank map of the report page: which rank makes the error first, which carry it."""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_accuracy.report.html_page import esc
from pytest_accuracy.report.svg import COLOURS

# a cell's look, most telling first: a cell shows the most telling status of its nodes
_RANKED = ("first", "fail", "error", "received", "carried", "waived", "pass", "skip",
           "unmatched")
_WORDS = {"first": "makes the first divergence", "fail": "fails on its own",
          "error": "could not be compared",
          "received": "receives it through a collective",
          "carried": "carries an earlier error",
          "waived": "waived", "pass": "passes", "skip": "nothing compared",
          "unmatched": "nothing compared"}
_MOST_STEPS = 200  # rows drawn; the table under the map has every step and rank


@dataclass(frozen=True)
class Cell:
    """One step and rank: its most telling status and the first node that has it."""

    step: int
    rank: int
    status: str
    node: str


def cells(nodes: Sequence[dict[str, Any]], first: dict[str, Any] | None) -> list[Cell]:
    """A cell per (step, rank) the nodes come from, in step-then-rank order."""
    best: dict[tuple[int, int], tuple[int, str]] = {}
    for node in nodes:
        key = (int(node["step"]), int(node["rank"]))
        status = str(node.get("status"))
        if status == "fail" and str(node["npu_name"]).startswith("Distributed."):
            status = "received"  # a collective whose inputs agree: the error came from a peer
        if first and node["npu_name"] == first.get("npu_name") and key == (
                first.get("step"), first.get("rank")):
            status = "first"
        rank = _RANKED.index(status) if status in _RANKED else len(_RANKED)
        if key not in best or rank < best[key][0]:
            best[key] = (rank, str(node["npu_name"]) if rank < _RANKED.index("pass") else "")
    return [Cell(step, rank, _RANKED[r] if r < len(_RANKED) else "skip", name)
            for (step, rank), (r, name) in sorted(best.items())]


def rank_map(nodes: Sequence[dict[str, Any]], first: dict[str, Any] | None) -> str:
    """The map (an SVG: steps down, ranks across) and, under it, a line per step naming the
    rank that makes the error and the ranks that fail or carry; empty for one rank."""
    grid = cells(nodes, first)
    ranks = sorted({c.rank for c in grid})
    if len(ranks) < 2:
        return ""
    return _svg(grid, ranks) + _legend() + _lines(grid)


def _svg(grid: list[Cell], ranks: list[int], width: int = 1100) -> str:
    steps = sorted({c.step for c in grid})[:_MOST_STEPS]
    left, top, right = 64, 40, 12
    row = max(6, min(22, 320 // len(steps)))
    column = (width - left - right) / len(ranks)
    height = top + row * len(steps) + 30
    at = {r: i for i, r in enumerate(ranks)}
    row_of = {s: i for i, s in enumerate(steps)}
    title = f"first failing node per step and rank ({len(steps)} steps x {len(ranks)} ranks)"
    out = [f"<svg class='chart rankmap' viewBox='0 0 {width} {height}' width='100%' "
           f"role='img' aria-label='{html.escape(title)}'>",
           f"<text x='{left}' y='14' class='ct'>{html.escape(title)}</text>"]
    drawn = [c for c in grid if c.step in row_of]
    # runs of equal cells are one rectangle; failing cells after them, at least 2 px wide
    for run in _runs(drawn, at):
        out.append(_rect(run, at, row_of, left, top, column, row, width=None))
    for cell in drawn:
        if cell.status in ("first", "fail", "error"):
            out.append(_rect([cell], at, row_of, left, top, column, row, width=2.0))
    for step in steps[:: max(1, len(steps) // 12)]:
        y = top + row * row_of[step] + row / 2 + 4
        out.append(f"<text x='{left - 6}' y='{y:.1f}' class='ax' text-anchor='end'>step {step}"
                   "</text>")
    for i in range(0, len(ranks), max(1, len(ranks) // 8)):
        x = left + column * (i + 0.5)
        out.append(f"<text x='{x:.1f}' y='{height - 12}' class='ax' text-anchor='middle'>"
                   f"{ranks[i]}</text>")
    out.append(f"<text x='{width - right}' y='{height - 12}' class='ax' text-anchor='end'>rank"
               "</text>")
    out += _first_pointer(drawn, at, row_of, left, top, column, row)
    out.append("</svg>")
    return "".join(out)


def _runs(cells_: list[Cell], at: dict[int, int]) -> list[list[Cell]]:
    runs: list[list[Cell]] = []
    for cell in cells_:
        last = runs[-1][-1] if runs else None
        if (last is not None and last.step == cell.step and at[last.rank] + 1 == at[cell.rank]
                and (last.status, last.node) == (cell.status, cell.node)):
            runs[-1].append(cell)
        else:
            runs.append([cell])
    return runs


def _rect(run: list[Cell], at: dict[int, int], row_of: dict[int, int], left: int, top: int,
          column: float, row: int, width: float | None) -> str:
    head, tail = run[0], run[-1]
    x = left + column * at[head.rank]
    w = column * (at[tail.rank] - at[head.rank] + 1)
    if width is not None and w < width:
        x, w = x + (w - width) / 2, width
    y = top + row * row_of[head.step]
    where = (f"rank {head.rank}" if len(run) == 1 else f"ranks {head.rank}-{tail.rank}")
    said = f"step {head.step}, {where}: {_WORDS.get(head.status, head.status)}"
    said += f" ({head.node})" if head.node else ""
    return (f"<rect x='{x:.2f}' y='{y}' width='{w:.2f}' height='{row - 1}' "
            f"fill='{_colour(head.status)}'><title>{html.escape(said)}</title></rect>")


def _colour(status: str) -> str:
    if status == "received":
        return "#ef6c00"
    return COLOURS.get(status, COLOURS["skip"]) if status != "skip" else "#e0e0e0"


def _first_pointer(drawn: list[Cell], at: dict[int, int], row_of: dict[int, int], left: int,
                   top: int, column: float, row: int) -> list[str]:
    """A triangle over the column of the rank that makes the first divergence, labelled."""
    cell = next((c for c in drawn if c.status == "first"), None)
    if cell is None:
        return []
    x = left + column * (at[cell.rank] + 0.5)
    y = top + row * row_of[cell.step]
    anchor = "end" if x > 900 else "start"
    dx = -6 if anchor == "end" else 6
    return [f"<path d='M{x - 5:.1f},{top - 12} L{x + 5:.1f},{top - 12} L{x:.1f},{top - 3} Z' "
            f"fill='{COLOURS['first']}'/>",
            f"<line x1='{x:.1f}' x2='{x:.1f}' y1='{top - 3}' y2='{y}' "
            f"stroke='{COLOURS['first']}' stroke-dasharray='2 2'/>",
            f"<text x='{x + dx:.1f}' y='{top - 14}' class='ax' text-anchor='{anchor}' "
            f"fill='{COLOURS['first']}'>rank {cell.rank}, step {cell.step}: first divergence"
            "</text>"]


def _legend() -> str:
    items = [(s, _WORDS[s]) for s in ("first", "fail", "received", "carried", "pass", "skip")]
    return ("<p class='legend'>" + "".join(
        f"<span><i class='dot' style='background:{_colour(s)}'></i>{esc(w)}</span>"
        for s, w in items) + "</p>")


def _lines(grid: list[Cell]) -> str:
    """Per step: the rank that makes the error first, then who fails, carries, passes."""
    by_step: dict[int, list[Cell]] = {}
    for cell in grid:
        by_step.setdefault(cell.step, []).append(cell)
    out = []
    for step, row in sorted(by_step.items()):
        parts = [f"{_WORDS[s]}: {spans([c.rank for c in row if c.status == s])}"
                 for s in ("first", "fail", "error", "received", "carried", "pass", "skip")
                 if any(c.status == s for c in row)]
        maker = next((c for c in row if c.status == "first"), None) or next(
            (c for c in row if c.status == "fail"), None)
        lead = (f" (<code>{esc(maker.node)}</code> on rank {maker.rank})" if maker else "")
        out.append(f"<li>step {esc(step)}{lead}: {esc('; '.join(parts))}</li>")
    return f"<ul class='steps'>{''.join(out)}</ul>"


def spans(ranks: list[int]) -> str:
    """``0-3, 5, 7-1023``: ranks as runs."""
    runs: list[list[int]] = []
    for rank in sorted(ranks):
        if runs and runs[-1][1] == rank - 1:
            runs[-1][1] = rank
        else:
            runs.append([rank, rank])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)
