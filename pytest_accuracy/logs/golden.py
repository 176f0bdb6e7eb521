"""Megatron-LM golden-values JSON (dict and list layouts, MindSpeed baselines) and its writer."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.logs.table import LogTable, finish, no_steps

FORMAT = "golden"

# Megatron TensorBoard tag names (used as golden metric names) → table columns.
_TO_COLUMN = {
    "lm loss": "loss",
    "grad-norm": "grad_norm",
    "grad norm": "grad_norm",
    "learning-rate": "lr",
    "learning rate": "lr",
    "loss-scale": "loss_scale",
    "loss scale": "loss_scale",
}
_FROM_COLUMN = {"loss": "lm loss", "grad_norm": "grad-norm", "lr": "learning-rate"}
_FROM_COLUMN["loss_scale"] = "loss-scale"
_INFERENCE_KEYS = frozenset({"generated_tokens", "generated_text", "input_prompt"})
_NO_LOSS = "no 'lm loss' metric and no other loss: loss column is empty"


def load_json(data: bytes, path: Path) -> dict[str, Any]:
    """The JSON object of a golden file; ``#`` lines and one-object-per-line excerpts are merged."""
    text = data.decode("utf-8", "replace")
    try:
        obj = json.loads(text)
    except ValueError:
        obj = {}
        for line in text.splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                try:
                    part = json.loads(line)
                except ValueError as exc:
                    raise AccuracyInputError(path, f"not valid JSON: {exc}") from exc
                if isinstance(part, dict):
                    obj.update(part)
    if not isinstance(obj, dict):
        raise AccuracyInputError(path, "golden values must be a JSON object of metrics")
    return obj


def parse(data: bytes, path: Path) -> LogTable:
    """Read ``{"lm loss": {"start_step", "end_step", "step_interval", "values"}, ...}``.

    ``values`` may be a dict ``{"<step>": v}`` (2025+) or a list sampled from
    ``start_step`` every ``step_interval`` (older); a bare list (MindSpeed-LLM
    baseline) is numbered 1..N.  ``"nan"`` values are NaN (skipped) steps.
    """
    obj = load_json(data, path)
    if any(isinstance(v, dict) and _INFERENCE_KEYS & set(v) for v in obj.values()):
        raise AccuracyInputError(path, "a Megatron inference golden (generated tokens or text per "
                                       "request), not training-step values")
    series: dict[str, dict[int, float]] = {}
    notes: list[str] = []
    for metric, spec in obj.items():
        parsed = _metric(spec)
        if parsed is None:
            continue
        series[metric], numbered = parsed
        if numbered:
            notes.append(f"{metric!r} is a plain list: steps numbered 1..N")
    if not series:
        raise no_steps(path, FORMAT)
    steps = np.array(sorted({s for v in series.values() for s in v}), dtype=np.int64)
    cols: dict[str, np.ndarray] = {}
    for metric, values in series.items():
        column = np.array([values.get(int(s), np.nan) for s in steps], dtype=np.float64)
        target = _TO_COLUMN.get(metric, metric)
        if target not in cols:
            cols[target] = column
        if target != metric and metric.endswith("loss"):
            cols[metric] = column
    steps, cols = _drop_unrun_tail(steps, cols, notes)
    notes += _choose_loss(cols)
    skipped = None
    if "skipped" in cols:
        skipped = np.nan_to_num(cols.pop("skipped")) > 0
    return finish(path, FORMAT, steps, cols, skipped, notes)


def _drop_unrun_tail(
    steps: np.ndarray, cols: dict[str, np.ndarray], notes: list[str]
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Drop the steps after the last one with any value: planned by ``end_step``, never run.

    Release goldens are written for their full ``end_step`` with ``"nan"`` where the recorded
    run stopped early; read as skipped steps, 25 of 50 looked like a half-failed run.
    """
    recorded = np.zeros(len(steps), dtype=bool)
    for column in cols.values():
        recorded |= np.isfinite(column)
    if not recorded.any() or recorded[-1]:
        return steps, cols
    last = int(np.flatnonzero(recorded)[-1])
    notes.append(f"{len(steps) - last - 1} step(s) after step {int(steps[last])} have 'nan' in "
                 "every metric (planned, never recorded): dropped")
    return steps[: last + 1], {k: v[: last + 1] for k, v in cols.items()}


def _choose_loss(cols: dict[str, np.ndarray]) -> list[str]:
    """Fill ``loss`` from an auxiliary loss when ``lm loss`` is absent or zero at every step.

    Distillation goldens (``skip_lm_loss``) record ``lm loss`` as 0.0 and the trained loss
    as ``total loss``; others keep only ``kd loss``: read as 100% skipped or as a zero loss
    they would gate nothing.
    """
    others = [k for k in cols if k.endswith("loss") and k not in ("loss", "lm loss")]
    others.sort(key=lambda k: (k != "total loss", k != "kd loss"))
    lm = cols.get("loss")
    if lm is not None and not (np.nan_to_num(lm) == 0).all():
        return []
    usable = [k for k in others if np.isfinite(cols[k]).any() and np.nan_to_num(cols[k]).any()]
    if not usable:
        return [] if lm is not None else [_NO_LOSS]
    cols["loss"] = cols[usable[0]].copy()
    why = "is 0 at every step" if lm is not None else "is absent"
    return [f"'lm loss' {why}: loss column taken from {usable[0]!r}"]


def _metric(spec: object) -> tuple[dict[int, float], bool] | None:
    """One metric's ``{step: value}`` and whether steps were invented, or None if not a series."""
    if isinstance(spec, list):
        if not spec or not all(_is_number(v) for v in spec):
            return None
        return {i: _value(v) for i, v in enumerate(spec, start=1)}, True
    if not isinstance(spec, dict) or "values" not in spec:
        return None
    values = spec["values"]
    if isinstance(values, dict):
        return {int(k): _value(v) for k, v in values.items()}, False
    if isinstance(values, list):
        start = int(spec.get("start_step", 1))
        interval = int(spec.get("step_interval", 1)) or 1
        return {start + i * interval: _value(v) for i, v in enumerate(values)}, False
    return None


def _is_number(v: object) -> bool:
    return (isinstance(v, int | float) and not isinstance(v, bool)) or v in ("nan", "NaN")


def _value(v: object) -> float:
    try:
        return float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


def write_golden(table: LogTable, path: str | Path, columns: Iterable[str] | None = None) -> Path:
    """Write ``table`` as Megatron golden values (dict layout, full precision) and return the path.

    Columns are named as Megatron's TensorBoard tags (``lm loss``, ``grad-norm``,
    ``learning-rate``, ``loss-scale``; extra columns keep their names).  NaN is
    written as ``"nan"``; a ``skipped`` metric (0/1) is added when a skipped step
    still has a finite loss so a re-read marks the same steps skipped.
    """
    frame = table.frame
    wanted = list(columns) if columns is not None else [str(c) for c in frame if c != "skipped"]
    steps = frame.index.to_numpy(dtype=np.int64)
    interval = int(np.gcd.reduce(np.diff(steps))) if len(steps) > 1 else 1
    out: dict[str, Any] = {}
    for column in wanted:
        metric = _FROM_COLUMN.get(column, column)
        values = frame[column].to_numpy(dtype=np.float64)
        if metric in out or np.isnan(values).all():
            continue
        out[metric] = _spec(steps, values, interval)
    flags = frame["skipped"].to_numpy(dtype=bool)
    if (flags & np.isfinite(frame["loss"].to_numpy())).any():
        out["skipped"] = _spec(steps, flags.astype(np.float64), interval)
    from pytest_accuracy.safe_io import write_atomic

    return write_atomic(path, json.dumps(out, indent=1) + "\n")


def _spec(steps: np.ndarray, values: np.ndarray, interval: int) -> dict[str, Any]:
    return {
        "start_step": int(steps[0]),
        "end_step": int(steps[-1]),
        "step_interval": interval,
        "values": {
            str(int(s)): (float(v) if math.isfinite(v) else "nan")
            for s, v in zip(steps, values, strict=True)
        },
    }
