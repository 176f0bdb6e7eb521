"""The compare part of the HTML report: where, how bad, why; the module tree; every node."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from itertools import chain
from typing import Any

from pytest_accuracy.report.html_page import (
    Memo,
    Part,
    esc,
    filter_controls,
    fmt,
    section,
    section_parts,
    wide,
)
from pytest_accuracy.report.svg import COLOURS, Point, error_chart

_MAX_CHARTS = 8
_BREAK = re.compile(r"([./])(?=[^\d\s])")
STATUSES = ("fail", "carried", "pass", "waived", "unmatched", "skip", "error")


def node_error(node: dict[str, Any]) -> float | None:
    """The number the chart and the tree show: relative L2 error (statistics: of the norm)."""
    for key in ("rel_l2_err", "norm_relative_err"):
        value = node.get(key)
        if value is not None:
            return math.inf if value in ("inf", "-inf") else number(value)
    if "md5_equal" in node:
        return 0.0 if node["md5_equal"] else math.inf
    return None


def number(value: Any) -> float | None:
    """``float(value)``, or None for what a part from elsewhere put there instead of a number."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        return float(value)
    except (ValueError, OverflowError):
        return None


def node_tolerance(node: dict[str, Any], criteria: dict[str, Any]) -> float | None:
    tolerance = node.get("tolerance")
    if isinstance(tolerance, dict) and tolerance.get("rel_err") is not None:
        return number(tolerance["rel_err"])
    if criteria.get("rel_err_override") is not None:
        return number(criteria["rel_err_override"])
    by_dtype = (criteria.get("tolerances") or {}).get(str(node.get("effective_dtype") or ""))
    return number(by_dtype.get("rel_err")) if isinstance(by_dtype, dict) else None


def own_error(node: dict[str, Any]) -> float | None:
    """The error a node makes itself: a carried node's own share is its local error, if known."""
    if node.get("status") == "carried":
        local = node.get("local_error") or {}
        return number(local.get("npu")) if isinstance(local, dict) else None
    if node.get("status") in ("pass", "fail"):
        return node_error(node)
    return None


def compare_section_parts(compare: dict[str, Any], criteria: dict[str, Any]) -> list[Part]:
    """The compare's sections; the node table's as pieces (a row each), for the page's writer."""
    nodes: list[dict[str, Any]] = compare.get("nodes") or []
    first = compare.get("first_divergence")
    from pytest_accuracy.report.html_first import first_card, waived_section

    out: list[Part] = [section("Where it diverges", first_card(first, compare), "first")]
    waived = waived_section(nodes)
    if waived is not None:
        out.append(section("Waived as known divergences", waived, "waived"))
    # each node's error and tolerance once: the charts and the table both show them
    both = [(node_error(n), node_tolerance(n, criteria)) for n in nodes]  # a node at a time
    errors, tolerances = [e for e, _ in both], [t for _, t in both]
    out.append(section("Error along execution order",
                       charts(nodes, errors, tolerances, first), "chart"))
    if len({(n["step"], n["rank"]) for n in nodes}) > 1:
        from pytest_accuracy.report.html_ranks import rank_map

        body = rank_map(nodes, first) + _per_dump_table(nodes)
        out.append(section("Per step and rank", body, "dumps"))
    from pytest_accuracy.report.html_tree import module_tree

    out.append(section("Module tree", module_tree(nodes, criteria, first), "tree"))
    out.append(section_parts(f"Every node ({len(nodes)})",
                             _node_table(nodes, errors, tolerances), "nodes"))
    return out


def headline(compare: dict[str, Any]) -> str:
    nodes = compare.get("nodes") or []
    counts = Counter(n.get("status") for n in nodes)
    first = compare.get("first_divergence")
    parts = [f"{counts.get('fail', 0)} of {len(nodes)} NPU nodes fail"]
    if counts.get("carried"):
        parts.append(f"{counts['carried']} carry an earlier error")
    if counts.get("waived"):
        parts.append(f"{counts['waived']} waived")
    if first:
        parts.append(f"first divergence <b>{esc(first.get('npu_name'))}</b> (step "
                     f"{esc(first.get('step'))}, rank {esc(first.get('rank'))})")
    elif counts.get("fail"):
        parts.append("the first divergent node was not among the items run")
    elif counts.get("carried"):
        parts.append("the cause of what they carry was not among the items run")
    elif counts.get("waived"):  # a waiver is a decision, never "no divergence"
        parts = [f"no divergence beyond the {counts['waived']} waived nodes (listed below): "
                 f"the other {counts.get('pass', 0)} compared nodes meet the criteria"]
    else:
        parts = [f"no divergence: {counts.get('pass', 0)} compared nodes meet the criteria"]
    coverage = compare.get("coverage") or {}
    if coverage:
        parts.append(f"{esc(coverage.get('matched'))} of {esc(coverage.get('total'))} matched")
    layouts = compare.get("layouts") or {}
    if layouts:
        how = " (inferred from the dumps)" if layouts.get("inferred") else ""
        parts.append(f"NPU layout {esc(layouts.get('npu'))} against bench "
                     f"{esc(layouts.get('bench'))}{how}: each NPU rank compared with the slice "
                     "its bench ranks hold")
    return "; ".join(parts)


def _by_dump(nodes: Sequence[dict[str, Any]]) -> dict[tuple[int, int], list[int]]:
    """The nodes' indices per (step, rank), in run order."""
    out: dict[tuple[int, int], list[int]] = {}
    for i, node in enumerate(nodes):
        out.setdefault((node["step"], node["rank"]), []).append(i)
    return out


def charts(nodes: list[dict[str, Any]], errors: list[float | None],
            tolerances: list[float | None], first: dict[str, Any] | None) -> str:
    groups = _by_dump(nodes)
    parts = [_legend()]
    for (step, rank), members in list(groups.items())[:_MAX_CHARTS]:
        points = [_point(x, nodes[i], errors[i], tolerances[i], first)
                  for x, i in enumerate(members)]
        first_x = next((x for x, i in enumerate(members) if _is_first(nodes[i], first)), None)
        parts.append(error_chart(points, first_x=first_x, title=f"step {step}, rank {rank}: "
                                 f"relative error per node (log scale)"))
    if len(groups) > _MAX_CHARTS:
        parts.append(f"<p class='note'>Charts for the first {_MAX_CHARTS} of {len(groups)} "
                     "step/rank dumps; the table below has every node.</p>")
    return "".join(parts)


def _point(x: int, n: dict[str, Any], error: float | None, tolerance: float | None,
           first: dict[str, Any] | None) -> Point:
    return Point(x, error if n.get("status") not in ("unmatched", "skip") else None,
                 _chart_status(n, first),
                 f"#{x} {n['npu_name']}: {n.get('status')}, error {fmt(error)}", tolerance)


def _legend() -> str:
    """One swatch per marker, drawn like the marker: filled, hollow (carried) or a line."""
    items = [("first", "first divergence", "dot"), ("fail", "fails on its own", "dot"),
             ("carried", "carries an earlier error (hollow)", "ring"),
             ("pass", "passes", "dot"), ("waived", "waived", "dot"),
             ("tolerance", "tolerance of its dtype", "line")]
    swatches = "".join(
        f"<span><i class='{shape}' style='{_swatch_style(shape, COLOURS[k])}'></i>{esc(t)}</span>"
        for k, t, shape in items)
    return (f"<p class='legend'>{swatches}</p><p class='hint'>Exact matches sit in the 0 lane, "
            "infinite errors in the inf lane; hover a point for its node.</p>")


def _swatch_style(shape: str, colour: str) -> str:
    if shape == "ring":
        return f"background:white;border:1.5px solid {colour}"
    return f"background:{colour}"


def _is_first(node: dict[str, Any], first: dict[str, Any] | None) -> bool:
    return bool(node.get("first_divergence")) or bool(
        first and node["npu_name"] == first["npu_name"] and node["step"] == first["step"]
        and node["rank"] == first["rank"])


def _chart_status(node: dict[str, Any], first: dict[str, Any] | None) -> str:
    return "first" if _is_first(node, first) else str(node.get("status"))


def _per_dump_table(nodes: list[dict[str, Any]]) -> str:
    rows = []
    for (step, rank), indices in _by_dump(nodes).items():
        members = [nodes[i] for i in indices]
        counts = Counter(n.get("status") for n in members)
        failing = next((n["npu_name"] for n in members if n.get("status") == "fail"), "")
        rows.append(f"<tr><td>{esc(step)}</td><td>{esc(rank)}</td>"
                    f"<td class='num'>{len(members)}</td>"
                    + "".join(f"<td class='num'>{counts.get(s, 0)}</td>" for s in STATUSES[:5])
                    + f"<td><code>{breakable(failing)}</code></td></tr>")
    head = "".join(f"<th>{s}</th>" for s in STATUSES[:5])
    return wide("<table class='sortable'><thead><tr><th>step</th><th>rank</th><th>nodes</th>"
                f"{head}<th>first failing node</th></tr></thead><tbody>{''.join(rows)}"
                "</tbody></table>")


_COLUMNS = ("#", "step", "rank", "NPU node", "bench node", "status", "dtype", "tensor", "error",
            "tolerance", "cosine", "max abs err", "why", "reason")


def _node_table(nodes: list[dict[str, Any]], errors: list[float | None],
                tolerances: list[float | None]) -> Iterator[str]:
    seen = {s for s in (n.get("status") for n in nodes) if isinstance(s, str)}
    present = [s for s in STATUSES if s in seen]
    text, names = Memo(esc), Memo(breakable)
    # made as the page is written: 100k rows are 55 MB of strings
    rows = (_node_row(i, n, errors[i], tolerances[i], text, names)
            for i, n in enumerate(nodes))
    head = "".join(f"<th>{esc(c)}</th>" for c in _COLUMNS)
    return chain([filter_controls("nodes-table", present, len(nodes))
                  + "<div class='scroll'><table id='nodes-table' class='sortable mono nodes'>"
                  "<thead><tr>" + head + "</tr></thead><tbody>"], rows,
                 ["</tbody></table></div>"])


def breakable(name: Any) -> str:
    """Escaped text that may break after a dot or slash, never inside a number (``0.95``)."""
    return _BREAK.sub(r"\1<wbr>", esc(name))


def _node_row(i: int, n: dict[str, Any], error: float | None, tolerance: float | None,
              text: Memo, names: Memo) -> str:
    """One row of the node table, as one string: 20,000 rows of small helpers' strings were
    most of the page's time. ``text`` escapes, ``names`` makes breakable (both cached: for
    the values rows repeat; a node's own name is escaped as it is)."""
    raw_status = str(n.get("status"))
    status, compact = text(raw_status), raw_status == "carried"
    why = n.get("finding") or (f"carried from {n['carried_from']}" if n.get("carried_from")
                               else "")
    reason = text(n.get("waiver") or n.get("reason"))
    if compact:  # one line cut with an ellipsis, the whole text on hover
        why_cell, reason_cell = _clipped(text(why), text(why)), _clipped(reason, reason)
    else:
        why_cell, reason_cell = names(why), reason
    classes = (("first " if n.get("first_divergence") else "")
               + ("compact" if compact else "")).rstrip()
    cls = f" class='{classes}'" if classes else ""
    return (f"<tr data-status='{status}'{cls}><td class='num'>{i}</td>"
            f"<td class='num'>{text(n['step'])}</td><td class='num'>{text(n['rank'])}</td>"
            f"<td class='name'>{esc(n['npu_name'])}</td>{_bench_cell(n)}"
            f"<td><span class='s-{status}'>{status}</span></td>"
            f"<td>{text(n.get('effective_dtype'))}</td>"
            f"<td class='name'>{text(n.get('tensor'))}</td>"
            f"<td data-v='{_sort_key(error)}' class='num'>{fmt(error)}</td>"
            f"<td data-v='{_sort_key(tolerance)}' class='num'>{fmt(tolerance)}</td>"
            f"<td class='num'>{fmt(n.get('cosine'))}</td>"
            f"<td class='num'>{fmt(n.get('max_abs_err'))}</td>"
            f"<td class='why'>{why_cell}</td><td class='text'>{reason_cell}</td></tr>")


def _clipped(content: str, title: str) -> str:
    """One line cut with an ellipsis (the compact carried rows); the whole text on hover."""
    return f"<div class='clip' title='{title}'>{content}</div>"


def _bench_cell(n: dict[str, Any]) -> str:
    """The bench node's name; ``= NPU`` where it is the NPU node's own name (most rows)."""
    bench = n.get("bench_name")
    if bench is not None and str(bench) == str(n["npu_name"]):
        return "<td class='same' title='same name as the NPU node'>= NPU</td>"
    return f"<td class='name'>{esc(bench)}</td>"


def _sort_key(value: float | None) -> str:
    if value is None:
        return "-1"
    return "1e308" if math.isinf(value) else repr(value)
