"""TensorBoard event files (MindFormers, Megatron, torchtitan, HF tags) via the optional package."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pytest_accuracy.errors import AccuracyInputError, require
from pytest_accuracy.logs.table import LogTable, finish

FORMAT = "tensorboard"

#: Tags read into table columns, first present wins (full precision, per iteration).
TAGS: dict[str, tuple[str, ...]] = {
    "loss": ("lm loss", "loss", "train/loss", "loss_metrics/global_avg_loss", "lm-loss"),
    "grad_norm": ("grad-norm", "grad_norm", "train/grad_norm"),
    "lr": ("learning-rate", "train/learning_rate", "lr", "learning_rate"),
    "loss_scale": ("loss-scale",),
}


def parse(path: Path) -> LogTable:
    """Read scalars from an event file or a directory of them (``tensorboard`` extra needed)."""
    module: Any = require("tensorboard.backend.event_processing.event_accumulator", "tensorboard")
    acc = module.EventAccumulator(str(path), size_guidance={module.SCALARS: 0})
    try:
        acc.Reload()
    except Exception as exc:  # the package raises many types for corrupt files
        raise AccuracyInputError(path, f"unreadable TensorBoard events: {exc}") from exc
    scalars = {
        tag: [(int(e.step), float(e.value)) for e in acc.Scalars(tag)]
        for tag in acc.Tags().get("scalars", [])
    }
    return from_scalars(path, scalars)


def from_scalars(path: Path, scalars: Mapping[str, Sequence[tuple[int, float]]]) -> LogTable:
    """Build the table from ``{tag: [(step, value), ...]}`` (kept separate to test without TB)."""
    chosen: dict[str, str] = {}
    for column, tags in TAGS.items():
        found = next((t for t in tags if scalars.get(t)), None)
        if found:
            chosen[column] = found
    extra = [
        t
        for t in scalars
        if t.endswith("loss") and t not in chosen.values() and "validation" not in t
    ]
    if "loss" not in chosen:
        found = ", ".join(sorted(scalars)) or "none"
        raise AccuracyInputError(
            path,
            f"no loss scalar in the event files (looked for: {', '.join(TAGS['loss'])}; "
            f"found: {found})",
        )
    steps = np.array(sorted({s for t in [*chosen.values(), *extra] for s, _ in scalars[t]}))
    cols: dict[str, np.ndarray] = {}
    for name, tag in [*chosen.items(), *((t, t) for t in extra)]:
        by_step = dict(scalars[tag])  # a rewritten step keeps its last value
        cols[name] = np.array([by_step.get(int(s), np.nan) for s in steps], dtype=np.float64)
    notes = [f"columns from tags: {', '.join(f'{c}={t}' for c, t in chosen.items())}"]
    return finish(path, FORMAT, steps.astype(np.int64), cols, notes=notes)
