"""The versioned JSON document (--acc-json) and the report folder (--acc-report)."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
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
    """The ``compare`` part: first divergence, coverage and one entry per node, in run order.

    The node records are the items' own (sorted in place, not copied: 100k of them are
    ~150 MB); their report-only keys (``rows``, ``order``) are left out where the document
    is written."""
    nodes.sort(key=lambda n: (n["step"], n["rank"], n.get("order", 0)))
    return {**summary, "nodes": nodes}


# keys of a node record that feed the report folder, never the JSON document
_REPORT_ONLY = ("rows", "order")


def write_json(doc: dict[str, Any], path: str | Path) -> Path:
    """Strict JSON: NaN becomes null, +-inf the strings "inf"/"-inf" (a zero bench element).
    Written node by node: the document is never one string in memory."""
    with atomic_open(path, "w") as handle:
        for chunk in document_chunks(doc):
            handle.write(chunk)
        handle.write("\n")
    return Path(path)


def document_text(doc: dict[str, Any]) -> str:
    """The document as ``write_json`` writes it (without the final newline)."""
    return "".join(document_chunks(doc))


def document_chunks(doc: dict[str, Any]) -> Iterator[str]:
    """Indented JSON with one compact line per compare node: ``grep``-able, and written by
    json's C encoder (indented output takes the pure-Python one: 0.2 ms per node)."""
    section = doc.get("compare")
    if not isinstance(section, dict) or not section.get("nodes"):
        yield _strict_text(json.dumps(doc, indent=2, default=str))
        return
    token = f"nodes-{uuid.uuid4().hex}"  # no input-derived string can equal it
    shell = {**doc, "compare": {**section, "nodes": token}}
    head, tail = _strict_text(json.dumps(shell, indent=2, default=str)).split(f'"{token}"')
    yield head + "[\n"
    last = len(section["nodes"]) - 1
    for i, node in enumerate(section["nodes"]):
        slim = {k: v for k, v in node.items() if k not in _REPORT_ONLY}
        text = _strict_text(json.dumps(slim, default=str))
        yield f"      {text}{',' if i < last else ''}\n"
    yield "    ]" + tail


# a JSON string (skipped as it is) or a non-finite number token of json.dumps
_NONFINITE = re.compile(r'"(?:[^"\\]|\\.)*"|-Infinity|Infinity|NaN')
_STRICT = {"NaN": "null", "Infinity": '"inf"', "-Infinity": '"-inf"'}


def _strict_text(text: str) -> str:
    """json.dumps' NaN/Infinity tokens as null/"inf"/"-inf" (inside strings untouched);
    a scan only where such a token may be there at all."""
    if "NaN" not in text and "Infinity" not in text:
        return text
    return _NONFINITE.sub(lambda m: _STRICT.get(m.group(), m.group()), text)


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
