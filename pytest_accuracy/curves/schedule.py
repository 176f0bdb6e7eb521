"""The learning-rate schedules of both logs, step by step: the guide's cheapest check."""

from __future__ import annotations

import numpy as np

from pytest_accuracy.curves.base import DEFAULT, CheckResult, LossCriteria, _fmt, _skip, pair
from pytest_accuracy.logs.table import LogTable

# Logs print 7-8 significant digits (Megatron 4.999863E-06, MindFormers 4.9998629e-06): two
# prints of one value differ by under 1e-6 relative; a schedule off by one step differs by
# far more on a warmup or decay.
LR_REL = 1e-5


def check_lr(npu: LogTable, bench: LogTable, criteria: LossCriteria = DEFAULT) -> CheckResult:
    """Passes when the two runs' learning rates agree at every paired step (within what the
    logs print); a failure names the first step where they part."""
    for table in (npu, bench):
        if "lr" not in table.frame or not np.isfinite(
                table.frame["lr"].to_numpy(np.float64)).any():
            return _skip("lr", f"no learning rate in {table.path}")
    p = pair(npu, bench, "lr", criteria)
    finite = np.isfinite(p.npu) & np.isfinite(p.bench)
    if not finite.any():
        return _skip("lr", "no step where both runs logged a learning rate")
    steps, a, b = p.steps[finite], p.npu[finite], p.bench[finite]
    scale = np.maximum(np.abs(a), np.abs(b))
    rel = np.divide(np.abs(a - b), scale, out=np.zeros_like(scale), where=scale > 0)
    off = np.flatnonzero(rel > LR_REL)
    measured = {"lr_max_rel": float(rel.max()), "lr_steps": len(steps)}
    allowed = {"lr_rel": LR_REL}
    if not len(off):
        return CheckResult("lr", "pass", measured, allowed, (), (
            f"Learning rates agree at all {len(steps)} paired steps (up to {LR_REL:g} relative "
            "allowed: the digits the logs print)."))
    i = int(off[0])
    message = (
        f"Learning-rate schedules part at step {int(steps[i])}: npu {_fmt(float(a[i]))}, bench "
        f"{_fmt(float(b[i]))} (relative difference {rel[i]:.3g}, up to {LR_REL:g} allowed: the "
        f"digits the logs print); {len(off)} of {len(steps)} paired steps differ.\n"
        "Compare the two schedulers before anything else: base lr, warmup steps, decay style "
        "and length, and the step each counts from.")
    return CheckResult("lr", "fail", {**measured, "lr_first_step": int(steps[i])}, allowed,
                       tuple(int(steps[j]) for j in off[:5]), message)
