"""Hugging Face Trainer logs: ``trainer_state.json`` and the printed ``{'loss': ...}`` dicts."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.logs.fields import SEP, Fields
from pytest_accuracy.logs.records import Records, read_records
from pytest_accuracy.logs.table import LogTable, as_float, count_lines, finish, no_steps
from pytest_accuracy.safe_io import read_input_bytes

FORMAT_STATE = "hf-trainer-state"
FORMAT_PRINTED = "hf-log"

_DICT = Records(re.compile(rb"\{'loss': ([^\n{}]*)\}"), b"{'loss': ", close="first")
_BARE = re.compile(r"(?<=[:,\[ ])(-?)(nan|inf|NaN|Infinity)(?=[,}\] ])")
# trainer_state.json keys → table columns (everything else in a record is ignored).
_COLUMNS = {"loss": "loss", "grad_norm": "grad_norm", "learning_rate": "lr"}
# Printed dicts read column-wise: the loss first, then ``'key': value`` pairs.
_FIELDS = Fields(
    bytes.maketrans(b",:'\"\r", SEP * 2 + b"   "),
    lambda key: _COLUMNS.get(key) if key != "loss" else None,
    fixed={0: "loss"},
)


def parse_state(data: bytes, path: Path) -> LogTable:
    """Read ``log_history`` of a trainer_state.json: one record per logged training step."""
    try:
        state = json.loads(data)
    except ValueError as exc:
        raise AccuracyInputError(path, f"not valid JSON: {exc}") from exc
    except RecursionError:
        raise AccuracyInputError(path, "JSON nests too deep to read") from None
    history = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(history, list):
        raise AccuracyInputError(path, "no 'log_history' list (not a trainer_state.json)")
    records = [r for r in history if isinstance(r, dict) and "loss" in r and "step" in r]
    if not records:
        raise no_steps(path, FORMAT_STATE)
    steps = np.array([int(r["step"]) for r in records], dtype=np.int64)
    cols = {
        name: np.array([as_float(r.get(key)) for r in records], dtype=np.float64)
        for key, name in _COLUMNS.items()
    }
    notes = ["HF loss is the mean over logging_steps, rounded to 4 decimals"]
    return finish(path, FORMAT_STATE, steps, cols, notes=notes)


def parse_printed(data: bytes, path: Path, logging_steps: int | None = None) -> LogTable:
    """Read printed ``{'loss': .., 'grad_norm': .., 'learning_rate': .., 'epoch': ..}`` lines.

    The printed dict has no step: step k is ``k * logging_steps`` when that is
    given, else the step of the run's trainer_state.json record, else ``k`` (1..N);
    the table's notes say which.  The dicts are read column-wise
    (``records.read_records``); a dict of another shape is evaluated as a literal.
    """
    parsed = read_records(data, _DICT, _FIELDS)
    n = len(parsed)
    cols = {name: parsed.values.get(name, np.full(n, np.nan)) for name in _COLUMNS.values()}
    keep = np.ones(n, dtype=bool)
    for i, row in parsed.odd_rows.items():
        record = _literal(row)
        if record is None:
            keep[i] = False
            continue
        for key, name in _COLUMNS.items():
            cols[name][i] = as_float(record.get(key))
    if not keep.any():
        raise no_steps(path, FORMAT_PRINTED)
    cols = {k: v[keep] for k, v in cols.items()}
    steps, step_note = _printed_steps(path, cols["loss"], logging_steps)
    notes = [step_note, "HF loss is the mean over logging_steps, rounded to 4 decimals"]
    if parsed.bad:
        notes.append(f"{parsed.bad} unparseable value(s) read as NaN")
    if bad := n - int(keep.sum()):
        notes.append(f"{bad} unreadable dict line(s) ignored")
    if (ignored := count_lines(data) - n) > 0:
        notes.append(f"{ignored} other line(s) ignored")
    return finish(path, FORMAT_PRINTED, steps, cols, notes=notes)


def _literal(body: bytes) -> dict[str, Any] | None:
    """One printed dict (its text after ``{'loss': ``) read as a Python literal."""
    raw = b"{'loss': " + body + b"}"
    try:
        value = ast.literal_eval(_BARE.sub(r"'\1\2'", raw.decode("utf-8", "replace")))
    except (ValueError, SyntaxError):
        value = _literal_with_floats(raw)
    return value if isinstance(value, dict) else None


def _printed_steps(
    path: Path, loss: np.ndarray, logging_steps: int | None
) -> tuple[np.ndarray, str]:
    """Steps of the printed dicts: ``logging_steps`` if given, else the run's own
    ``trainer_state.json`` (beside the log or in its latest ``checkpoint-N``) when its
    losses are the printed ones (to the digits printed: current transformers prints
    ``f"{v:.4g}"``), past its end at its ``logging_steps``; else a refusal."""
    n = len(loss)
    if logging_steps:
        note = f"printed HF dicts carry no step: step = order x logging_steps ({logging_steps})"
        return np.arange(1, n + 1, dtype=np.int64) * logging_steps, note
    state = _neighbour_state(path)
    if state is None:
        raise AccuracyInputError(path, "printed HF dicts carry no step number and no "
                                 "trainer_state.json (beside the log or in checkpoint-*/) gives "
                                 "them: pass logging_steps (--acc-logging-steps N)")
    name, steps, state_loss, every = state
    m = min(n, len(steps))
    if not m or not _same_losses(state_loss[:m], loss[:m]):
        raise AccuracyInputError(path, f"the losses of {name} are not the printed ones (another "
                                 "run?): pass logging_steps (--acc-logging-steps N)")
    if m < n:  # the checkpoint is older than the log: go on at its logging interval
        gap = every or (int(np.median(np.diff(steps))) if len(steps) > 1 else int(steps[0]))
        steps = np.concatenate([steps[:m], steps[m - 1] + gap * np.arange(1, n - m + 1)])
    return steps[:n], f"steps from {name} (printed HF dicts carry none)"


def _same_losses(state: np.ndarray, printed: np.ndarray) -> bool:
    """The printed losses are the state's, as printed: equal, or equal at 4 significant
    digits (``f"{v:.4g}"``); NaN where both are NaN."""
    both_nan = np.isnan(state) & np.isnan(printed)
    rounded = np.array([float(f"{v:.4g}") for v in state.tolist()])
    same = (state == printed) | (rounded == printed) | both_nan
    return bool(same.all())


def _neighbour_state(path: Path) -> tuple[str, np.ndarray, np.ndarray, int | None] | None:
    """(name, steps, losses, logging_steps) of the run's trainer_state.json: the one beside
    the log, else the one of its latest ``checkpoint-N``; None when there is none or it is
    unreadable."""
    here = path.parent / "trainer_state.json"
    checkpoints = sorted(path.parent.glob("checkpoint-*/trainer_state.json"), key=_checkpoint_step)
    found = here if here.is_file() else (checkpoints[-1] if checkpoints else None)
    if found is None:
        return None
    try:
        raw = read_input_bytes(found)
        table = parse_state(raw, found)
        every = json.loads(raw).get("logging_steps")
    except (AccuracyInputError, OSError, ValueError, AttributeError):
        return None
    every = every if isinstance(every, int) and every > 0 else None
    name = str(found.relative_to(path.parent))
    return name, table.steps, table.frame["loss"].to_numpy(), every


def _checkpoint_step(state: Path) -> int:
    number = state.parent.name.rpartition("-")[2]
    return int(number) if number.isdigit() else -1


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
