"""The HTML report's verdict parts: the "Where it diverges" card and the waived nodes."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from pytest_accuracy.report.html_compare import breakable
from pytest_accuracy.report.html_page import esc
from pytest_accuracy.report.records import row_dict

# What a finding says the first divergence does itself (the rest of the "what" line says
# how its tensor inputs compare, where the report knows)
_DOES = {
    "argument": "a non-tensor argument differs",
    "precision": "it computes in another precision than the bench",
    "local_error": "its outputs are further from a float64 replay of its own inputs than the "
                   "bench's are",
    "update": "it reads a parameter that the update after an identical step changed "
              "differently",
}
# An argument finding with no differing scalar of the node's own: a region's contract
# (its mask, its scale) against the bench's fused call
_SETTING = "it computes with another setting than the bench's (the likely cause says which)"
_INPUTS = {True: "its tensor inputs match the bench",
           False: "its tensor inputs differ from the bench's"}
WAIVED_SHOWN = 1000  # the waived table's rows; the node table has every waived node


def first_card(first: dict[str, Any] | None, compare: dict[str, Any]) -> str:
    """Where the runs part, what the node does, how bad, the likely cause and the code."""
    # dicts, and records a run kept on disk (report/record_spool.py)
    nodes: list[Any] = [n for n in compare.get("nodes") or [] if isinstance(n, Mapping)]
    if not first:
        return _no_first(nodes)
    where = f"step {esc(first.get('step'))}, rank {esc(first.get('rank'))}"
    rows = [("node", f"<code>{esc(first.get('npu_name'))}</code> ({where})"),
            ("bench node", f"<code>{esc(first.get('bench_name'))}</code>"),
            ("what", what_it_does(first, _first_node(first, nodes))),
            ("how bad", f"{esc(first.get('tensor'))}: {esc(first.get('reason'))}")]
    if first.get("likely_cause"):
        rows.append(("likely cause", f"<b>{esc(first['likely_cause'])}</b>"))
    if first.get("stack"):
        rows.append(("stack", f"<code>{esc(first['stack'])}</code>"))
    nonfinite = compare.get("first_nonfinite")
    if nonfinite:
        rows.append(("first NaN/Inf", f"<code>{esc(nonfinite.get('npu_name'))}</code> "
                     f"{esc(nonfinite.get('tensor'))}"))
    body = "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in rows)
    return f"<dl class='card'>{body}</dl>"


def _no_first(nodes: list[dict[str, Any]]) -> str:
    counts = Counter(n.get("status") for n in nodes)
    if counts["fail"]:
        return "<p>Nodes fail, but the first divergent node was not among the items run.</p>"
    if counts["carried"]:
        return (f"<p>{counts['carried']} nodes carry a divergence whose cause was not among "
                "the items run.</p>")
    if counts["waived"]:
        return (f"<p>No node misses the criteria beyond the {counts['waived']} waived nodes "
                "listed below.</p>")
    return "<p>No node misses the criteria.</p>"


def what_it_does(first: dict[str, Any], node: dict[str, Any] | None) -> str:
    """The card's "what" line, from the first divergence's kind and finding and, where the
    node's rows are there (a report run, not a merged document), how its tensor inputs
    compared: never "its inputs match" where the node takes another argument or its inputs
    differ."""
    kind, finding = first.get("kind"), first.get("finding")
    if kind == "between" and first.get("through"):
        return (f"the input that differs was made by <code>{esc(first.get('through'))}</code>, "
                "which only the NPU run records")
    if kind == "between":
        return (f"the error appeared in code the dump did not record, between "
                f"<code>{esc(first.get('previous') or 'the start')}</code> and this node")
    if finding in _DOES:
        does = (_SETTING if finding == "argument" and not (node or {}).get("scalar_diffs")
                else _DOES[str(finding)])
        match = _inputs_match(node)
        return does if match is None else f"{_INPUTS[match]}; {does}"
    if kind == "parameter":
        return "its inputs match the bench and a parameter of its own differs"
    return "its inputs match the bench and its outputs do not: the error appears here"


def _first_node(first: dict[str, Any], nodes: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The first divergence's own node record (the one marked, else the one of its name)."""
    marked = next((n for n in nodes if n.get("first_divergence")), None)
    if marked is not None:
        return marked
    key = (first.get("npu_name"), first.get("step"), first.get("rank"))
    return next((n for n in nodes if (n.get("npu_name"), n.get("step"), n.get("rank")) == key),
                None)


def _inputs_match(node: dict[str, Any] | None) -> bool | None:
    """Whether every tensor input (and parameter) of the node met the criteria, by its rows
    of msprobe's table; None where it has none (a merged document leaves rows out)."""
    name = str((node or {}).get("npu_name"))
    results = []
    from pytest_accuracy.report.rows_spool import rows_of

    for row in rows_of((node or {}).get("rows")):
        try:
            cells = row_dict(row)
        except (KeyError, TypeError, ValueError, IndexError):
            return None
        path = str(cells.get("NPU Name") or "").removeprefix(name + ".")
        if not path.startswith("output"):
            results.append(cells.get("Result") == "pass")
    return all(results) if results else None


def waived_section(nodes: list[dict[str, Any]]) -> str | None:
    """Every node a known-divergence waiver covers, with the waiver's reason, and how many
    more carry their divergences (waived with them); None where nothing was waived. Nodes
    are told apart as the terminal and the Markdown summary tell them."""
    waived = [n for n in nodes if isinstance(n, Mapping) and n.get("status") == "waived"]
    if not waived:
        return None
    own = [n for n in waived if not str(n.get("reason") or "").startswith("carries ")]
    rows = "".join(
        f"<tr data-status='waived'><td class='name'><code>{breakable(n.get('npu_name'))}</code>"
        f"</td><td class='num'>{esc(n.get('step'))}</td><td class='num'>{esc(n.get('rank'))}"
        f"</td><td class='text'>{esc(n.get('waiver') or 'no reason given')}</td></tr>"
        for n in own[:WAIVED_SHOWN])
    carried = len(waived) - len(own)
    notes = [f"{len(waived)} {'node is' if len(waived) == 1 else 'nodes are'} waived as known "
             f"divergences: {len(own)} by a waiver, each below with its reason"]
    if len(own) > WAIVED_SHOWN:
        notes.append(f"the first {WAIVED_SHOWN} are shown here, every one in the node table")
    if carried:
        notes.append(f"{carried} more carry their divergences and are waived with them (status "
                     "waived in the node table; their reason names the node they carry)")
    return ("<p class='note'>" + "; ".join(notes) + ". A waiver is a decision: these nodes "
            "are not counted as passes.</p><div class='scroll'><table class='sortable'>"
            "<thead><tr><th>waived node</th><th>step</th><th>rank</th><th>reason</th></tr>"
            f"</thead><tbody>{rows}</tbody></table></div>")
