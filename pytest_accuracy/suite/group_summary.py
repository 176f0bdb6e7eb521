"""Terminal lines of the groups beyond compare: every failing criterion, one sentence each."""

from __future__ import annotations

from typing import Any

from pytest_accuracy.text import escape_controls

_UNITS = {"loss": "checks", "config": "checklist keys", "precheck": "APIs",
          "gradients": "checks", "suites": "@accuracy tests", "overflow": "step/rank dumps",
          "monitor": "states", "data": "checks"}
_FAILED = ("fail", "missing")
# Per-API failures can run into the hundreds: the failures section has them all.
_MAX_LISTED = {"precheck": 10}


def group_lines(group: str, records: list[dict[str, Any]]) -> list[str]:
    """``loss: 5 of 6 checks failed; ...`` and one indented sentence per failing record."""
    failed = [r for r in records if r.get("status") in _FAILED]
    if not failed:
        return []
    head = f"{group}: {len(failed)} of {len(records)} {_UNITS.get(group, 'checks')} failed"
    divergence = _divergence_step(records)
    head += f"; the loss curves diverge from step {divergence}." if divergence is not None else ":"
    limit = _MAX_LISTED.get(group, len(failed))
    lines = [head, *(f"  {escape_controls(_named(r))}" for r in failed[:limit])]
    if len(failed) > limit:
        lines.append(f"  and {len(failed) - limit} more (each is a failed item above).")
    return lines


def _divergence_step(records: list[dict[str, Any]]) -> int | None:
    for record in records:
        step = (record.get("report") or {}).get("divergence_step")
        if step is not None:
            return int(step)
    return None


def _named(record: dict[str, Any]) -> str:
    name, text = str(record.get("name")), sentence(record)
    return text if text.startswith(name + " ") else f"{name}: {text}"


def sentence(record: dict[str, Any]) -> str:
    """A multi-line failure message as one sentence: 'Head: detail; detail.'"""
    text = str(record.get("summary") or record.get("reason") or record.get("name") or "")
    parts = [p.strip().rstrip(".") for p in text.splitlines() if p.strip()]
    if not parts:
        return "failed."
    name = str(record.get("name"))
    head = parts[0].replace(f"config '{name}' ", f"{name} ", 1)
    return "; ".join([head, *(_clause(p) for p in parts[1:])]) + "."


def _clause(text: str) -> str:
    """'Mean absolute difference: 0.1 (...)' -> 'mean absolute difference 0.1 (...)'."""
    label, sep, rest = text.partition(": ")
    if sep and len(label) < 40 and "(" not in label:
        text = f"{label} {rest}"
    # "Mean absolute difference" reads on inside a sentence; "NPU loss" must stay as it is.
    if len(text) > 1 and text[0].isupper() and text[1].islower():
        return text[0].lower() + text[1:]
    return text
