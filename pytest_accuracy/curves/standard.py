"""The three fixed checks of the migration standard: first loss, mean loss, grad norm."""

from __future__ import annotations

import math

import numpy as np

from pytest_accuracy.curves.base import (
    DEFAULT,
    CheckResult,
    LossCriteria,
    _fmt,
    _skip,
    nonfinite_failure,
    pair,
)
from pytest_accuracy.logs.table import LogTable


def check_first_loss(
    npu: LogTable, bench: LogTable, criteria: LossCriteria = DEFAULT
) -> CheckResult:
    """First compared step passes if ``|d| < first_loss_abs`` or ``|d|/|b| < first_loss_rel``."""
    p = pair(npu, bench, criteria.loss_column, criteria)
    if not len(p.steps):
        return _skip("first_loss", f"all {p.skipped} common steps are skipped in one run")
    step, a, b = int(p.steps[0]), float(p.npu[0]), float(p.bench[0])
    d_abs = abs(a - b)
    d_rel = d_abs / abs(b) if b else math.inf
    ok = d_abs < criteria.first_loss_abs or d_rel < criteria.first_loss_rel
    head = "First loss matches" if ok else "First loss mismatch"
    message = (
        f"{head} at step {step}: npu {_fmt(a)}, bench {_fmt(b)}.\n"
        f"Absolute difference: {_fmt(d_abs)} (up to {criteria.first_loss_abs:g} allowed)\n"
        f"Relative difference: {d_rel:.4%} (up to {criteria.first_loss_rel:.2%} allowed)\n"
        "Either limit passing is enough."
    )
    return CheckResult(
        "first_loss",
        "pass" if ok else "fail",
        {"first_loss_abs": d_abs, "first_loss_rel": d_rel, "step": step},
        {"first_loss_abs": criteria.first_loss_abs, "first_loss_rel": criteria.first_loss_rel},
        (step,),
        message,
    )


def check_mean_loss(
    npu: LogTable, bench: LogTable, criteria: LossCriteria = DEFAULT
) -> CheckResult:
    """Passes if ``mean|d| < mean_abs`` or ``mean(|d|/|bench|) < mean_rel``."""
    p = pair(npu, bench, criteria.loss_column, criteria)
    if failed := nonfinite_failure("mean_loss", "loss", p):
        return failed
    if not len(p.steps):
        return _skip("mean_loss", f"all {p.skipped} common steps are skipped in one run")
    ad = np.abs(p.d)
    m_abs = float(ad.mean())
    m_rel = float(np.mean(ad / np.abs(p.bench)))
    ok = m_abs < criteria.mean_abs or m_rel < criteria.mean_rel
    worst = np.argsort(-ad, kind="stable")[:5]
    w = int(worst[0])
    message = (
        f"Mean loss {'matches' if ok else 'mismatch'} over {len(p.steps)} paired steps "
        f"({p.skipped} skipped).\n"
        f"Mean absolute difference: {_fmt(m_abs)} (up to {criteria.mean_abs:g} allowed)\n"
        f"Mean relative difference: {m_rel:.4%} (up to {criteria.mean_rel:.2%} allowed)\n"
        f"Greatest difference: {_fmt(float(ad[w]))} at step {int(p.steps[w])} "
        f"(npu {_fmt(float(p.npu[w]))}, bench {_fmt(float(p.bench[w]))})"
    )
    return CheckResult(
        "mean_loss",
        "pass" if ok else "fail",
        {"mean_abs": m_abs, "mean_rel": m_rel, "steps": len(p.steps), "skipped": p.skipped},
        {"mean_abs": criteria.mean_abs, "mean_rel": criteria.mean_rel},
        tuple(int(p.steps[i]) for i in worst),
        message,
    )


def check_grad_norm(
    npu: LogTable, bench: LogTable, criteria: LossCriteria = DEFAULT
) -> CheckResult:
    """Passes if ``mean(|g_npu - g_bench| / |g_bench|) <= gnorm_rel``."""
    for t in (npu, bench):
        if not np.isfinite(t.frame["grad_norm"].to_numpy(np.float64)).any():
            return _skip("grad_norm", f"no grad norm in {t.path}")
    p = pair(npu, bench, "grad_norm", criteria)
    if failed := nonfinite_failure("grad_norm", "grad norm", p):
        return failed
    nz = p.bench != 0
    if not nz.any():
        return _skip("grad_norm", "no step with a finite, non-zero bench grad norm")
    rel = np.abs(p.d[nz]) / np.abs(p.bench[nz])
    steps = p.steps[nz]
    value = float(rel.mean())
    ok = value <= criteria.gnorm_rel
    worst = np.argsort(-rel, kind="stable")[:5]
    w = int(worst[0])
    message = (
        f"Grad norm {'matches' if ok else 'mismatch'} over {len(steps)} paired steps "
        f"({p.skipped + int((~nz).sum())} skipped).\n"
        f"Mean relative difference: {value:.4%} (up to {criteria.gnorm_rel:.2%} allowed)\n"
        f"Greatest relative difference: {rel[w]:.4%} at step {int(steps[w])} "
        f"(npu {_fmt(float(p.npu[nz][w]))}, bench {_fmt(float(p.bench[nz][w]))})"
    )
    return CheckResult(
        "grad_norm",
        "pass" if ok else "fail",
        {"gnorm_mean_rel": value, "steps": len(steps)},
        {"gnorm_rel": criteria.gnorm_rel},
        tuple(int(steps[i]) for i in worst),
        message,
    )
