"""The versioned JSON document (--acc-json) and the report folder (--acc-report)."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pytest_accuracy import __version__
from pytest_accuracy.safe_io import atomic_open

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
        handle.writelines(document_chunks(doc))
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
    nodes = section["nodes"]
    for start in range(0, len(nodes), _NODES_PER_CHUNK):
        lines = _node_lines(nodes[start:start + _NODES_PER_CHUNK], token)
        last = start + _NODES_PER_CHUNK >= len(nodes)
        yield "".join(f"      {line},\n" for line in lines[:-1]) + (
            f"      {lines[-1]}{'' if last else ','}\n")
    yield "    ]" + tail


# Nodes encoded by one json.dumps call: the per-call set-up was most of a small record's cost;
# a bounded batch keeps the document from being one string in memory.
_NODES_PER_CHUNK = 512


def _node_lines(nodes: list[dict[str, Any]], token: str) -> list[str]:
    """Each node's compact JSON text, as ``json.dumps(node, default=str)`` less the
    report-only keys would give it, from one ``json.dumps`` of the whole batch.

    The batch interleaves the nodes with the string ``token`` and is cut where it stands
    between them: inside an encoded string a quote is always escaped, so ``, "<token>", ``
    can only be the separator. NaN/Infinity rewriting leaves strings alone and each node is
    a whole JSON value, so rewriting the batch rewrites each node alike."""
    batch: list[Any] = []
    for node in nodes:
        slim = node.copy()  # a C copy and two pops: a comprehension cost 4 us a node
        for key in _REPORT_ONLY:
            slim.pop(key, None)
        batch += (slim, token)
    text = _strict_text(json.dumps(batch[:-1], default=str))
    return text[1:-1].split(f', "{token}", ')


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
    divergence (its likely cause). The bytes are csv.writer's (excel dialect) for the rows
    ``{Step, Rank, "Status", "Cause", **row}`` with every cell through ``csv_cell``; they are
    formatted by ``RowFormat``, a few C calls per row (csv.writer and a dict per row took
    1.6 s of a 20,000-node run). No pandas: importing it cost more than the whole report.
    """
    from pytest_accuracy.report.cells import csv_line

    verdicts = _node_verdicts(nodes, first)
    if not verdicts:
        return None
    columns, picks = _table_layout(verdicts)
    path = out_dir / "compare_result.csv"
    with atomic_open(path, "w", newline="") as fh:
        fh.write(csv_line(columns))
        fh.writelines(_records(verdicts, picks))
    return path


_Verdict = tuple[str, str, Any]  # rows: a list, or a RowsRef to a spool


def _node_verdicts(nodes: list[dict[str, Any]],
                   first: dict[str, Any] | None) -> list[_Verdict]:
    """(Status, Cause, rows) of each node with rows, in run order."""
    from pytest_accuracy.report.records import node_status

    out = []
    for n in sorted(nodes, key=lambda n: (n["step"], n["rank"], n.get("order", 0))):
        if n.get("rows"):
            status, cause = node_status(n, first)
            out.append((status, cause, n["rows"]))  # spooled rows are read where written
    return out


def _table_layout(verdicts: list[_Verdict]) -> tuple[list[Any], dict[tuple[Any, ...], list[int]]]:
    """The columns, every row's keys in order of first appearance as the rows
    ``{Step, Rank, "Status", "Cause", **row}`` give them; and for each distinct key tuple of
    a row, where each column's cell sits in ``[status, cause, *values, None]`` (the
    None where the row has no such column). The union is taken over the few distinct key
    tuples, not over every row."""
    from pytest_accuracy.report.records import row_cells
    from pytest_accuracy.report.rows_spool import rows_of

    layouts = dict.fromkeys(row_cells(row)[0] for _, _, rows in verdicts
                            for row in rows_of(rows))
    columns = list(dict.fromkeys(k for keys in layouts for k in _row_columns(keys)))
    picks = {}
    for keys in layouts:
        where = {"Status": 0, "Cause": 1, **{k: i + 2 for i, k in enumerate(keys)}}
        picks[keys] = [where.get(c, len(keys) + 2) for c in columns]  # a row's own value wins
    return columns, picks


def _row_columns(keys: tuple[Any, ...]) -> list[Any]:
    """Step and Rank lead, Status and Cause follow them, then the row's other keys."""
    front = [k for k in ("Step", "Rank") if k in keys]
    return list(dict.fromkeys([*front, "Status", "Cause", *keys]))


def _records(verdicts: list[_Verdict],
             picks: dict[tuple[Any, ...], list[int]]) -> Iterator[str]:
    """Each row's CSV record, in run order; one ``RowFormat`` per row shape (keys and cell
    types): the shape of the row's cells decides which are text to neutralise."""
    from pytest_accuracy.report.cells import RowFormat, TextFields
    from pytest_accuracy.report.records import row_cells
    from pytest_accuracy.report.rows_spool import rows_of

    formats: dict[tuple[tuple[Any, ...], tuple[type, ...]], RowFormat] = {}
    fields = TextFields()
    for status, cause, rows in verdicts:
        for row in rows_of(rows):
            keys, values = row_cells(row)
            cells = [status, cause, *values, None]
            shape = (keys, tuple(map(type, cells)))
            form = formats.get(shape)
            if form is None:
                form = formats[shape] = RowFormat(picks[shape[0]], shape[1])
            yield form.line(cells, fields)


def write_html(doc: dict[str, Any], out_dir: Path, images: list[Path]) -> Path:
    """``index.html``: verdict, first divergence, charts, module tree, every node; logs criteria."""
    from pytest_accuracy.report.html import render_parts

    parts = render_parts(doc, out_dir, images)
    path = out_dir / "index.html"
    with atomic_open(path, "wb") as handle:
        # the page's lines written one by one, never joined (the joined page was the report
        # run's peak: 649 MB at 100k nodes). A lone surrogate (JSON can hold one in a node
        # name) cannot be UTF-8: written as the text "\\ud800", which is no markup, where
        # encoding it raised; each code point encodes alone, so per line gives the same bytes
        for i, part in enumerate(parts):
            if i:
                handle.write(b"\n")
            for piece in (part,) if isinstance(part, str) else part:
                handle.write(piece.encode("utf-8", "backslashreplace"))
    return path
