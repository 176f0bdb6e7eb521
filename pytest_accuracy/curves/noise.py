"""Checks against the bench runs' own noise: band, zero-centred, divergence step."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from pytest_accuracy.curves.base import (
    DEFAULT,
    CheckResult,
    LossCriteria,
    _fmt,
    _skip,
    pair,
)
from pytest_accuracy.curves.standard import check_first_loss, check_grad_norm, check_mean_loss
from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.logs.table import LogTable


@dataclass(frozen=True)
class Band:
    """NPU and bench runs on the steps all of them logged and none skipped."""

    steps: np.ndarray
    npu: np.ndarray
    runs: np.ndarray  # shape (k, T); runs[0] is the reference bench
    lower: np.ndarray
    upper: np.ndarray


def bench_band(
    npu: LogTable, benches: Sequence[LogTable], criteria: LossCriteria = DEFAULT
) -> Band:
    """The widened bench band (see the module docstring) on the steps every run has."""
    pairs = [pair(npu, b, criteria.loss_column, criteria) for b in benches]
    steps = pairs[0].steps
    for p in pairs[1:]:
        steps = np.intersect1d(steps, p.steps)
    runs = np.stack([p.bench[np.isin(p.steps, steps)] for p in pairs])
    values = pairs[0].npu[np.isin(pairs[0].steps, steps)]
    lo, hi = runs.min(axis=0), runs.max(axis=0)
    spread = pd.Series(hi - lo).rolling(criteria.band_window, center=True, min_periods=1).mean()
    s = spread.to_numpy() * criteria.band_factor
    return Band(steps, values, runs, lo - s, hi + s)


def check_band(
    npu: LogTable, benches: Sequence[LogTable], criteria: LossCriteria = DEFAULT
) -> CheckResult:
    """At most ``band_outside`` of the steps may lie outside the widened bench band."""
    if len(benches) < 2:
        return _skip("band", "needs two or more bench runs (repeated, non-deterministic)")
    band = bench_band(npu, benches, criteria)
    if not len(band.steps):
        return _skip("band", "no step that every run logged and none skipped")
    if np.all(band.upper == band.lower):
        return _skip("band", "the bench runs are identical: no spread to compare with")
    outside = (band.npu < band.lower) | (band.npu > band.upper)
    frac = float(outside.mean())
    bench_gap = float(np.mean(np.abs(band.runs[1:] - band.runs[0])))
    ratio = float(np.mean(np.abs(band.npu - band.runs[0]))) / bench_gap if bench_gap else math.inf
    excess = np.maximum(band.lower - band.npu, band.npu - band.upper)
    worst = [int(i) for i in np.argsort(-excess, kind="stable")[:5] if outside[i]]
    ok = frac <= criteria.band_outside
    where = f"; furthest out at step {int(band.steps[worst[0]])}" if worst else ""
    message = (
        f"NPU loss {'within' if ok else 'outside'} the band of {len(benches)} bench runs: "
        f"{int(outside.sum())} of {len(band.steps)} steps outside ({frac:.1%}, up to "
        f"{criteria.band_outside:.0%} allowed){where}.\n"
        f"Mean |npu - bench| is {ratio:.2f} x the bench runs' own mean difference."
    )
    return CheckResult(
        "band",
        "pass" if ok else "fail",
        {"outside_frac": frac, "ratio": ratio, "steps": len(band.steps)},
        {"outside_frac": criteria.band_outside, "band_factor": criteria.band_factor},
        tuple(int(band.steps[i]) for i in worst),
        message,
    )


def _mean_se(d: np.ndarray) -> tuple[float, float]:
    """Mean and its standard error with an AR(1) effective sample size."""
    n = len(d)
    if n < 3:
        return float(d.mean()), math.inf
    c = d - d.mean()
    denom = float(np.dot(c, c))
    r = float(np.dot(c[:-1], c[1:]) / denom) if denom else 0.0
    r = min(max(r, 0.0), 0.95)
    n_eff = max(n * (1 - r) / (1 + r), 2.0)
    return float(d.mean()), float(d.std(ddof=1) / math.sqrt(n_eff))


def check_zero_centred(
    npu: LogTable, benches: Sequence[LogTable], criteria: LossCriteria = DEFAULT
) -> CheckResult:
    """No systematic offset of ``d`` over the window, its first half or its late half."""
    p = pair(npu, benches[0], criteria.loss_column, criteria)
    if len(p.steps) < 4:
        return _skip("zero_centred", f"only {len(p.steps)} paired steps")
    half = len(p.steps) // 2
    worst: tuple[float, str, float, float, slice] | None = None
    for label, part in (
        ("whole run", slice(None)),
        ("first half", slice(0, half)),
        ("late half", slice(half, None)),
    ):
        mean, se = _mean_se(p.d[part])
        allowed = max(
            criteria.offset,
            criteria.offset_sigmas * se,
            _bench_offset(p.steps[part], benches, criteria),
        )
        score = abs(mean) / allowed
        if worst is None or score > worst[0]:
            worst = (score, label, mean, allowed, part)
    assert worst is not None
    score, label, mean, allowed, part = worst
    ok = score <= 1.0
    steps = p.steps[part]
    sign = "higher" if mean > 0 else "lower"
    message = (
        f"Loss difference {'is' if ok else 'is not'} centred on zero: over the {label} "
        f"(steps {int(steps[0])}..{int(steps[-1])}) the NPU is on average {_fmt(abs(mean))} {sign} "
        f"than the bench (up to {_fmt(allowed)} allowed: max of offset {criteria.offset:g}, "
        f"{criteria.offset_sigmas:g} standard errors, bench-vs-bench offset)."
    )
    return CheckResult(
        "zero_centred",
        "pass" if ok else "fail",
        {"offset": mean, "segment_start": int(steps[0]), "segment_end": int(steps[-1])},
        {"offset": allowed},
        (int(steps[0]), int(steps[-1])),
        message,
    )


def _bench_offset(steps: np.ndarray, benches: Sequence[LogTable], criteria: LossCriteria) -> float:
    """Largest ``|mean(bench_j - bench_0)|`` over ``steps``: how far apart bench runs sit."""
    out = 0.0
    window = replace(criteria, steps=(int(steps[0]), int(steps[-1])))
    for other in benches[1:]:
        try:
            q = pair(other, benches[0], criteria.loss_column, window)
        except AccuracyInputError:
            continue
        d = q.d[np.isin(q.steps, steps)]
        if len(d):
            out = max(out, abs(float(d.mean())))
    return out


def _exceeding(
    npu: LogTable, benches: Sequence[LogTable], criteria: LossCriteria
) -> tuple[np.ndarray, np.ndarray]:
    """Steps and a flag per step: beyond the per-step tolerance (and the band, with k >= 2)."""
    if len(benches) >= 2:
        band = bench_band(npu, benches, criteria)
        steps, a, b = band.steps, band.npu, band.runs[0]
        outside = (a < band.lower) | (a > band.upper)
    else:
        p = pair(npu, benches[0], criteria.loss_column, criteria)
        steps, a, b = p.steps, p.npu, p.bench
        outside = np.ones(len(steps), dtype=bool)
    tol = np.maximum(criteria.mean_abs, criteria.mean_rel * np.abs(b))
    return steps, (np.abs(a - b) > tol) & outside


def find_divergence_step(
    npu: LogTable, benches: Sequence[LogTable], criteria: LossCriteria = DEFAULT
) -> int | None:
    """The step from which the curves part for good (module docstring), or None."""
    steps, exceed = _exceeding(npu, benches, criteria)
    if not exceed.any():
        return None
    remaining = np.arange(len(exceed), 0, -1)
    frac = np.cumsum(exceed[::-1])[::-1] / remaining
    ok = exceed & (frac >= criteria.divergence_frac) & (remaining >= criteria.divergence_min_steps)
    hits = np.flatnonzero(ok)
    return int(steps[hits[0]]) if len(hits) else None


def check_divergence(
    npu: LogTable, benches: Sequence[LogTable], criteria: LossCriteria = DEFAULT
) -> CheckResult:
    """Fails when ``find_divergence_step`` finds a step where the curves part for good."""
    if not len(pair(npu, benches[0], criteria.loss_column, criteria).steps):
        return _skip("divergence", "no paired step that neither run skipped")
    step = find_divergence_step(npu, benches, criteria)
    measured: dict[str, float | int | None] = {"divergence_step": step}
    if step is None:
        return CheckResult(
            "divergence", "pass", measured, message="The curves never part for good."
        )
    p = pair(npu, benches[0], criteria.loss_column, criteria)
    i = int(np.searchsorted(p.steps, step))
    after = np.abs(p.d[i:])
    measured["mean_abs_after"] = float(after.mean())
    message = (
        f"Loss curves diverge from step {step}: npu {_fmt(float(p.npu[i]))}, bench "
        f"{_fmt(float(p.bench[i]))}; from there on mean |d| is {_fmt(float(after.mean()))} "
        f"over {len(after)} steps, at least {criteria.divergence_frac:.0%} of them beyond "
        f"max({criteria.mean_abs:g}, {criteria.mean_rel:.0%} of the bench loss)"
        + (" and outside the bench band." if len(benches) >= 2 else ".")
    )
    return CheckResult("divergence", "fail", measured, {}, (step,), message)


def effective_criteria(
    benches: Sequence[LogTable], criteria: LossCriteria = DEFAULT
) -> LossCriteria:
    """With ``relax_to_bench_noise`` and k >= 2: each threshold = max(it, bench-vs-bench value)."""
    if not criteria.relax_to_bench_noise or len(benches) < 2:
        return criteria
    relaxed = criteria
    for other in benches[1:]:
        checks = [
            f(other, benches[0], criteria)
            for f in (check_first_loss, check_mean_loss, check_grad_norm)
        ]
        m = {k: v for c in checks if c.status != "skip" for k, v in c.measured.items()}
        relaxed = replace(
            relaxed,
            first_loss_abs=max(relaxed.first_loss_abs, float(m.get("first_loss_abs") or 0)),
            first_loss_rel=max(relaxed.first_loss_rel, float(m.get("first_loss_rel") or 0)),
            mean_abs=max(relaxed.mean_abs, float(m.get("mean_abs") or 0)),
            mean_rel=max(relaxed.mean_rel, float(m.get("mean_rel") or 0)),
            gnorm_rel=max(relaxed.gnorm_rel, float(m.get("gnorm_mean_rel") or 0)),
        )
    return relaxed
