"""A Markdown summary for a CI page (GitHub's job summary, a merge-request note): the verdict,
the first divergence with its cause, and the top failures. Every string that comes from the
inputs (node names, reasons, paths) is escaped: it can neither close a code span or a table
cell nor inject HTML."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pytest_accuracy.text import escape_line

# Markdown punctuation that could open a code span, emphasis or a link, and the cell separator
# (every escaped string sits inside a line this module starts: no line-start markup to fear)
_MARKUP = re.compile(r"([\\`*_\[\]|~])")
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
# what GitHub's Markdown turns into a link without any markup: a scheme or a www. name
_ADDRESS = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://|\bwww\.", re.IGNORECASE)
TOP_FAILURES = 10


def md_text(value: object, max_chars: int = 400) -> str:
    """``value`` as inert Markdown text on one line: HTML entities, punctuation backslashed,
    and web addresses defanged (``https[:]//``, ``www[.]``): GitHub links a bare address."""
    text = escape_line(value)
    if len(text) > max_chars:
        text = text[: max_chars - 3] + "..."
    text = _ADDRESS.sub(lambda m: m.group()[:-3] + "[:]//" if m.group().endswith("://")
                        else m.group()[:-1] + "[.]", text)
    text = "".join(_HTML.get(c, c) for c in text)
    return _MARKUP.sub(r"\\\1", text)


def markdown_summary(doc: dict[str, Any], failures: list[tuple[str, str]],
                     outcomes: dict[str, int]) -> str:
    """The summary block. ``failures``: (node id, first line of its message), run order;
    ``outcomes``: pytest's counts (passed, failed, ...)."""
    verdict = str(doc.get("verdict", "fail")).upper()
    mark = "✅" if verdict == "PASS" else "❌"
    counts = ", ".join(f"{n} {k}" for k, n in outcomes.items() if n)
    lines = [f"## {mark} pytest-accuracy: {verdict}", "",
             f"Checked: {md_text(counts or 'nothing')}"]
    compare = doc.get("compare") or {}
    first = compare.get("first_divergence") if isinstance(compare, dict) else None
    if first:
        lines += ["", "### First divergence", "",
                  f"**{md_text(first.get('npu_name'))}** (step {md_text(first.get('step'))}, "
                  f"rank {md_text(first.get('rank'))}), {md_text(first.get('tensor'))}: "
                  f"{md_text(first.get('reason'))}"]
        if first.get("likely_cause"):
            lines += ["", f"Likely cause: {md_text(first['likely_cause'])}"]
        if first.get("stack"):
            lines += ["", f"At: {md_text(first['stack'])}"]
    nodes = compare.get("nodes") if isinstance(compare, dict) else None
    waived = [n for n in nodes or () if isinstance(n, Mapping) and n.get("status") == "waived"
              and not str(n.get("reason") or "").startswith("carries ")]
    if waived:  # a decision to waive is shown where the verdict is read
        lines += ["", "Waived: " + "; ".join(
            f"{md_text(n.get('npu_name'))} ({md_text(n.get('waiver') or 'no reason given')})"
            for n in waived[:TOP_FAILURES])
            + (f"; and {len(waived) - TOP_FAILURES} more" if len(waived) > TOP_FAILURES else "")]
    if failures:
        lines += ["", f"### Failures ({len(failures)})", "", "| test | message |", "|---|---|"]
        lines += [f"| {md_text(node, 200)} | {md_text(message)} |"
                  for node, message in failures[:TOP_FAILURES]]
        if len(failures) > TOP_FAILURES:
            lines += ["", f"... and {len(failures) - TOP_FAILURES} more (see the job log)."]
    return "\n".join(lines) + "\n"
