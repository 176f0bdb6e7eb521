"""A loss comparison's curves, thinned to what a chart can show, as plain JSON-able lists."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pytest_accuracy.curves.base import LossCriteria, pair
from pytest_accuracy.logs.table import LogTable

# Points per curve: a chart 1,100 px wide shows no more; a 100k-step log stays a few kB a test.
MOST_POINTS = 500


def loss_curves(npu: LogTable, benches: Sequence[LogTable], criteria: LossCriteria,
                divergence_step: int | None = None, most: int = MOST_POINTS) -> dict[str, Any]:
    """The steps both runs logged (at most ``most``, evenly spaced, keeping the first, the last,
    the divergence step and the step where NPU and bench differ most), the NPU's and each bench
    run's value there, and the per-step tolerance of the loss difference (the migration
    standard's ``max(mean_abs, mean_rel x |bench|)``, as the built-in loss plot draws it)."""
    column = criteria.loss_column
    paired = pair(npu, benches[0], column, criteria)
    steps = paired.steps
    if not len(steps):
        return {}
    keep = _picked(steps, np.abs(paired.d), divergence_step, most)
    shown = steps[keep]
    runs = []
    for bench in benches:
        frame = bench.frame[~bench.frame["skipped"]]
        values = frame[column].reindex(shown).to_numpy(float) if column in frame else None
        runs.append(_floats(values) if values is not None else [])
    tol = np.maximum(criteria.mean_abs, criteria.mean_rel * np.abs(paired.bench[keep]))
    return {"column": column, "steps": [int(s) for s in shown],
            "npu": _floats(paired.npu[keep]), "benches": runs, "tolerance": _floats(tol),
            "steps_paired": len(steps), "divergence_step": divergence_step}


def _picked(steps: np.ndarray, diff: np.ndarray, divergence_step: int | None,
            most: int) -> np.ndarray:
    """Indices into ``steps``, sorted and unique."""
    if len(steps) <= most:
        return np.arange(len(steps))
    picked = set(np.linspace(0, len(steps) - 1, most - 2).round().astype(int).tolist())
    if len(diff):
        picked.add(int(np.nanargmax(diff)) if np.isfinite(diff).any() else 0)
    if divergence_step is not None:
        at = int(np.searchsorted(steps, divergence_step))
        picked.add(min(at, len(steps) - 1))
    return np.array(sorted(picked))


def _floats(values: np.ndarray) -> list[float | None]:
    """JSON has no NaN: a step a run did not log is None."""
    return [float(v) if np.isfinite(v) else None for v in values]
