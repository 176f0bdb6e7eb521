"""The module tree from construct.json, collapsible, each module coloured by its worst own error."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pytest_accuracy.report.html_compare import node_error, node_tolerance, own_error
from pytest_accuracy.report.html_page import esc, fmt

# Worst own error as a multiple of the node's tolerance -> colour (passes are green).
_SCALE = ((1.0, "#66bb6a"), (10.0, "#ffa726"), (100.0, "#ef5350"), (float("inf"), "#b71c1c"))
_NO_DATA = "#bdbdbd"
_OPEN_DEPTH = 2


@dataclass
class _Node:
    record: dict[str, Any]
    children: list[_Node] = field(default_factory=list)
    worst: tuple[float, str] | None = None  # (error / tolerance, node name)


def module_tree(nodes: list[dict[str, Any]], criteria: dict[str, Any],
                first: dict[str, Any] | None) -> str:
    """Nested <details>; only dumps with construct.json parents (L0, mix) have a tree."""
    if not any(n.get("parent") for n in nodes):
        return ("<p>No module structure in this dump: msprobe records the module tree "
                "(construct.json) at level L0 and mix; an L1 dump has APIs only.</p>")
    key = (first["step"], first["rank"]) if first else (nodes[0]["step"], nodes[0]["rank"])
    members = [n for n in nodes if (n["step"], n["rank"]) == key]
    roots = _build(members)
    for root in roots:
        _worst(root, criteria)
    body = "".join(_render(r, 0, first) for r in roots)
    where = " (where the first divergence is)" if first else ""
    return (f"<p>Step {esc(key[0])}, rank {esc(key[1])}{where}. A module's colour is the "
            "worst error its own nodes make (carried errors don't count), as a multiple of the "
            "tolerance: " + _scale_legend() + "</p>"
            f"<div class='tree mono'>{body}</div>")


def _build(members: list[dict[str, Any]]) -> list[_Node]:
    by_name = {n["npu_name"]: _Node(n) for n in members}
    roots: list[_Node] = []
    for node in by_name.values():
        parent = by_name.get(node.record.get("parent") or "")
        (parent.children if parent is not None else roots).append(node)
    return roots


def _worst(node: _Node, criteria: dict[str, Any]) -> tuple[float, str] | None:
    candidates: list[tuple[float, str]] = []
    error, tol = own_error(node.record), node_tolerance(node.record, criteria)
    if error is not None:
        ratio = error / tol if tol else (0.0 if error == 0 else float("inf"))
        candidates.append((ratio, node.record["npu_name"]))
    for child in node.children:
        found = _worst(child, criteria)
        if found is not None:
            candidates.append(found)
    node.worst = max(candidates) if candidates else None
    return node.worst


def _colour(worst: tuple[float, str] | None) -> str:
    if worst is None:
        return _NO_DATA
    return next(c for limit, c in _SCALE if worst[0] <= limit)


def _scale_legend() -> str:
    labels = ("within", "up to 10x", "up to 100x", "beyond 100x")
    return " ".join(f"<span class='sw' style='background:{c}'></span>{t}"
                    for (_, c), t in zip(_SCALE, labels, strict=True))


def _label(node: _Node, first: dict[str, Any] | None) -> str:
    r = node.record
    status = str(r.get("status"))
    text = (f"<span class='sw' style='background:{_colour(node.worst)}'></span>"
            f"{esc(r['npu_name'])} <span class='s-{esc(status)}'>{esc(status)}</span>")
    error = node_error(r)
    if error is not None:
        text += f" error {fmt(error)}"
    if node.worst and node.children and node.worst[0] > 1:
        text += f" (worst own: {esc(node.worst[1])}, {node.worst[0]:.3g}x tolerance)"
    if first and r["npu_name"] == first["npu_name"]:
        text += " <b>← first divergence</b>"
    return text


def _render(node: _Node, depth: int, first: dict[str, Any] | None) -> str:
    if not node.children:
        return f"<div style='margin-left:16px'>{_label(node, first)}</div>"
    is_open = " open" if depth < _OPEN_DEPTH or _holds_first(node, first) else ""
    inner = "".join(_render(c, depth + 1, first) for c in node.children)
    return f"<details{is_open}><summary>{_label(node, first)}</summary>{inner}</details>"


def _holds_first(node: _Node, first: dict[str, Any] | None) -> bool:
    if not first:
        return False
    return any(n.record["npu_name"] == first["npu_name"] for n in _walk(node))


def _walk(node: _Node) -> Iterator[_Node]:
    yield node
    for child in node.children:
        yield from _walk(child)
