"""The versioned JSON document (--acc-json) and the report folder (--acc-report)."""

from __future__ import annotations

import json
import math
import uuid
from pathlib import Path
from typing import Any

from pytest_accuracy import __version__
from pytest_accuracy.report.cells import csv_cell
from pytest_accuracy.safe_io import atomic_open, write_atomic

DOCUMENT_VERSION = 1


def build_document(
    *,
    verdict: str,
    inputs: dict[str, Any],
    criteria: dict[str, Any],
    sections: dict[str, Any],
) -> dict[str, Any]:
    """Assemble the document; ``sections`` holds compare / loss / precheck / config parts."""
    doc: dict[str, Any] = {
        "version": DOCUMENT_VERSION,
        "plugin_version": __version__,
        "verdict": verdict,
        "inputs": inputs,
        "criteria": criteria,
    }
    doc.update(sections)
    return doc


def compare_section(
    nodes: list[dict[str, Any]], summary: dict[str, Any]
) -> dict[str, Any]:
    """The ``compare`` part: first divergence, coverage and one entry per node (no rows)."""
    ordered = sorted(nodes, key=lambda n: (n["step"], n["rank"], n.get("order", 0)))
    slim = [{k: v for k, v in n.items() if k not in ("rows", "order")} for n in ordered]
    return {**summary, "nodes": slim}


def write_json(doc: dict[str, Any], path: str | Path) -> Path:
    """Strict JSON: NaN becomes null, +-inf the strings "inf"/"-inf" (a zero bench element)."""
    return write_atomic(path, document_text(_strict(doc)) + "\n")


def document_text(doc: dict[str, Any]) -> str:
    """Indented JSON with one compact line per compare node: ``grep``-able, and written by
    json's C encoder (indented output takes the pure-Python one: 0.2 ms per node)."""
    section = doc.get("compare")
    if not isinstance(section, dict) or not section.get("nodes"):
        return json.dumps(doc, indent=2, default=str, allow_nan=False)
    nodes = section["nodes"]
    token = f"nodes-{uuid.uuid4().hex}"  # no input-derived string can equal it
    shell = {**doc, "compare": {**section, "nodes": token}}
    head, tail = json.dumps(shell, indent=2, default=str, allow_nan=False).split(f'"{token}"')
    lines = ",\n".join("      " + json.dumps(n, default=str, allow_nan=False) for n in nodes)
    return f"{head}[\n{lines}\n    ]{tail}"


def _strict(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(v) for v in value]
    return value


def write_compare_csv(nodes: list[dict[str, Any]], out_dir: Path,
                      first: dict[str, Any] | None = None) -> Path | None:
    """The compare table in msprobe's column layout, one row per tensor, numbers as numbers.

    ``Status`` and ``Cause`` give each row its node's verdict as the terminal gives it (first
    divergence, makes an error, carried from X, pass, skipped, ...); ``Result`` stays
    msprobe's per-tensor judgement of the metrics alone. ``first`` is the run's first
    divergence (its likely cause). Written with the csv module: importing pandas cost more
    than the rest of the report.
    """
    import csv

    from pytest_accuracy.report.records import node_status

    rows = []
    for n in sorted(nodes, key=lambda n: (n["step"], n["rank"], n.get("order", 0))):
        if n.get("rows"):
            status, cause = node_status(n, first)
            rows += [{**_front(row), "Status": status, "Cause": cause, **row}
                     for row in n["rows"]]
    if not rows:
        return None
    columns = list(dict.fromkeys(key for row in rows for key in row))
    path = out_dir / "compare_result.csv"
    with atomic_open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow([csv_cell(c) for c in columns])
        writer.writerows([csv_cell(row.get(c)) for c in columns] for row in rows)
    return path


def _front(row: dict[str, Any]) -> dict[str, Any]:
    """Step and Rank lead, Status and Cause follow them."""
    return {k: row[k] for k in ("Step", "Rank") if k in row}


def write_html(doc: dict[str, Any], out_dir: Path, images: list[Path]) -> Path:
    """``index.html``: verdict, first divergence, charts, module tree, every node; logs criteria."""
    from pytest_accuracy.report.html import render

    return write_atomic(out_dir / "index.html", render(doc, out_dir, images))
