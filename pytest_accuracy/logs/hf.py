"""Hugging Face Trainer logs: ``trainer_state.json`` and the printed ``{'loss': ...}`` dicts."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.logs.table import LogTable, count_lines, finish, no_steps

FORMAT_STATE = "hf-trainer-state"
FORMAT_PRINTED = "hf-log"

_DICT = re.compile(rb"\{'loss': [^\n{}]*\}")
_BARE = re.compile(r"(?<=[:,\[ ])(-?)(nan|inf|NaN|Infinity)(?=[,}\] ])")
# trainer_state.json keys → table columns (everything else in a record is ignored).
_COLUMNS = {"loss": "loss", "grad_norm": "grad_norm", "learning_rate": "lr"}


def parse_state(data: bytes, path: Path) -> LogTable:
    """Read ``log_history`` of a trainer_state.json: one record per logged training step."""
    try:
        state = json.loads(data)
    except ValueError as exc:
        raise AccuracyInputError(path, f"not valid JSON: {exc}") from exc
    history = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(history, list):
        raise AccuracyInputError(path, "no 'log_history' list (not a trainer_state.json)")
    records = [r for r in history if isinstance(r, dict) and "loss" in r and "step" in r]
    if not records:
        raise no_steps(path, FORMAT_STATE)
    steps = np.array([int(r["step"]) for r in records], dtype=np.int64)
    cols = {
        name: np.array([_num(r.get(key)) for r in records], dtype=np.float64)
        for key, name in _COLUMNS.items()
    }
    notes = ["HF loss is the mean over logging_steps, rounded to 4 decimals"]
    return finish(path, FORMAT_STATE, steps, cols, notes=notes)


def parse_printed(data: bytes, path: Path, logging_steps: int | None = None) -> LogTable:
    """Read printed ``{'loss': .., 'grad_norm': .., 'learning_rate': .., 'epoch': ..}`` lines.

    The printed dict has no step: step k is ``k * logging_steps`` when that is
    given, else ``k`` (1..N), and the table's notes say which.
    """
    found = _DICT.findall(data)
    records: list[dict[str, Any]] = []
    bad = 0
    for raw in found:
        try:
            value = ast.literal_eval(_BARE.sub(r"'\1\2'", raw.decode("utf-8", "replace")))
        except (ValueError, SyntaxError):
            value = _literal_with_floats(raw)
        if isinstance(value, dict):
            records.append(value)
        else:
            bad += 1
    if not records:
        raise no_steps(path, FORMAT_PRINTED)
    k = logging_steps or 1
    steps = np.arange(1, len(records) + 1, dtype=np.int64) * k
    cols = {
        name: np.array([_num(r.get(key)) for r in records], dtype=np.float64)
        for key, name in _COLUMNS.items()
    }
    notes = [
        f"printed HF dicts carry no step: step = order x logging_steps ({k})"
        if logging_steps
        else "printed HF dicts carry no step: numbered 1..N in order (pass logging_steps)",
        "HF loss is the mean over logging_steps, rounded to 4 decimals",
    ]
    if bad:
        notes.append(f"{bad} unreadable dict line(s) ignored")
    if (ignored := count_lines(data) - len(found)) > 0:
        notes.append(f"{ignored} other line(s) ignored")
    return finish(path, FORMAT_PRINTED, steps, cols, notes=notes)


def _literal_with_floats(raw: bytes) -> object:
    """Fallback for a dict repr ``ast.literal_eval`` rejects: read it key by key."""
    text = raw.decode("utf-8", "replace").strip("{}")
    out: dict[str, float | str] = {}
    for part in text.split(","):
        key, sep, value = part.partition(":")
        if not sep:
            return None
        key, value = key.strip().strip("'\""), value.strip()
        try:
            out[key] = float(value)
        except ValueError:
            out[key] = value.strip("'\"")
    return out


def _num(value: object) -> float:
    """A JSON/repr value as float; anything non-numeric is NaN."""
    if isinstance(value, bool) or value is None:
        return np.nan
    if isinstance(value, int | float):
        return float(value)
    try:
        return float(str(value))
    except ValueError:
        return np.nan
