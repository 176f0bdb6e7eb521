"""Shared pieces of the curve checks: criteria, results, step pairing, formatting."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd

from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.logs.table import LogTable

Status = Literal["pass", "fail", "skip"]


@dataclass(frozen=True)
class LossCriteria:
    """Thresholds of the migration standard plus the knobs of the band/offset/divergence tests."""

    first_loss_abs: float = 0.005
    first_loss_rel: float = 0.005
    mean_abs: float = 0.01
    mean_rel: float = 0.01
    gnorm_rel: float = 0.10
    steps: tuple[int, int] | None = None  # inclusive window of steps compared
    band_factor: float = 2.0  # band widening, in units of the local bench spread
    band_outside: float = 0.10  # fraction of steps allowed outside the band
    band_window: int = 21  # steps averaged for the local bench spread
    offset: float = 0.005  # systematic offset always tolerated (loss units)
    offset_sigmas: float = 3.0
    divergence_frac: float = 0.9
    divergence_min_steps: int = 5
    relax_to_bench_noise: bool = False  # threshold = max(threshold, bench-vs-bench value)
    loss_column: str = "loss"


DEFAULT = LossCriteria()


@dataclass(frozen=True)
class CheckResult:
    """One check's verdict, what was measured, what was allowed, and a message for people."""

    name: str
    status: Status
    measured: Mapping[str, float | int | None] = field(default_factory=dict)
    allowed: Mapping[str, float] = field(default_factory=dict)
    worst_steps: tuple[int, ...] = ()
    message: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "pass"


@dataclass(frozen=True)
class Paired:
    """Values of two runs on the steps both logged and neither skipped."""

    steps: np.ndarray
    npu: np.ndarray
    bench: np.ndarray
    skipped: int
    #: NPU steps with a NaN/Inf value the trainer did not skip, where the bench is finite:
    #: (step, NPU value, bench value), in step order.
    nonfinite: tuple[tuple[int, float, float], ...] = ()

    @property
    def d(self) -> np.ndarray:
        return self.npu - self.bench


def pair(
    npu: LogTable, bench: LogTable, column: str = "loss", criteria: LossCriteria = DEFAULT
) -> Paired:
    """Pair ``column`` by step; raises AccuracyInputError naming both files without common steps."""
    common = npu.frame.index.intersection(bench.frame.index)
    if criteria.steps is not None:
        lo, hi = criteria.steps
        common = common[(common >= lo) & (common <= hi)]
    window = f" in steps {criteria.steps[0]}..{criteria.steps[1]}" if criteria.steps else ""
    if not len(common):
        raise AccuracyInputError(
            npu.path,
            f"no steps in common with {bench.path}{window} "
            f"(NPU logged {_span(npu)}, bench logged {_span(bench)})",
        )
    shorter = min(_count(npu, criteria), _count(bench, criteria))
    if len(common) < MIN_OVERLAP * shorter:  # a verdict on 1 of 300 steps is no verdict
        raise AccuracyInputError(
            npu.path,
            f"shares only {len(common)} of {shorter} steps with {bench.path}{window} (steps "
            f"{_listed(common)}; NPU logged {_span(npu)}, bench logged {_span(bench)}): at "
            f"least {MIN_OVERLAP:.0%} of the shorter log's steps must be in both; give logs of "
            "the same steps, or a window both cover (--acc-loss-steps)",
        )
    a, b = npu.frame.loc[common], bench.frame.loc[common]
    x, y = _col(a, column), _col(b, column)
    bad = (
        a["skipped"].to_numpy(bool)
        | b["skipped"].to_numpy(bool)
        | ~np.isfinite(x)
        | ~np.isfinite(y)
    )
    keep = ~bad
    steps = common.to_numpy(np.int64)
    flagged = npu.nonfinite.get(column, {})
    bench_ok = np.isfinite(y) & ~b["skipped"].to_numpy(bool)
    culprits = tuple(
        (int(t), flagged[int(t)], float(v))
        for t, v, ok in zip(steps, y, bench_ok, strict=True) if ok and int(t) in flagged
    ) if flagged else ()
    return Paired(steps[keep], x[keep], y[keep], int(bad.sum()), culprits)


# Share of the shorter log's steps (in the window) that both logs must have.
MIN_OVERLAP = 0.5


def _count(table: LogTable, criteria: LossCriteria) -> int:
    index = table.frame.index
    if criteria.steps is not None:
        index = index[(index >= criteria.steps[0]) & (index <= criteria.steps[1])]
    return len(index)


def _listed(steps: pd.Index) -> str:
    shown = ", ".join(str(int(t)) for t in steps[:5])
    return shown + (f" ... ({len(steps)} in all)" if len(steps) > 5 else "")


def nonfinite_failure(name: str, what: str, p: Paired) -> CheckResult | None:
    """The failure for a NaN/Inf NPU value where the bench is finite (the overflow check)."""
    if not p.nonfinite:
        return None
    step, value, bench = p.nonfinite[0]
    more = f" (and on {len(p.nonfinite) - 1} later step(s))" if len(p.nonfinite) > 1 else ""
    message = (
        f"NPU {what} is {_fmt(value)} at step {step}{more} where the bench is finite "
        f"({_fmt(bench)}): a non-finite {what} is an overflow or a divergence, never a dropped "
        "step (steps the trainer itself skipped are excluded)."
    )
    return CheckResult(
        name, "fail", {"first_nonfinite_step": step, "nonfinite_steps": len(p.nonfinite)},
        {}, tuple(t for t, _, _ in p.nonfinite[:5]), message,
    )


def _col(frame: pd.DataFrame, column: str) -> np.ndarray:
    if column not in frame:
        return np.full(len(frame), np.nan)
    return frame[column].to_numpy(dtype=np.float64)


def _span(table: LogTable) -> str:
    steps = table.steps
    return f"steps {steps[0]}..{steps[-1]}" if len(steps) else "no steps"


def _skip(name: str, why: str) -> CheckResult:
    return CheckResult(name, "skip", message=why)


def _fmt(x: float) -> str:
    return f"{x:.6g}"
