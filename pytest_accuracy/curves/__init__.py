"""Loss and grad-norm curve checks of the migration standard: first, mean, band, drift.

Steps are paired by step number over the steps both runs logged; steps either
run skipped (overflow / NaN / skipped iteration) are excluded and counted, and
``d_t = npu_t - bench_t`` with ``bench = benches[0]`` (see DESIGN.md).

Statistics chosen here for what the standard leaves open (all need only the
logs; ``k >= 2`` bench runs are repeated runs of the benchmark):

* **band** (needs k >= 2): per step the bench band is ``[min_t, max_t]`` of the
  bench runs, widened on both sides by ``band_factor * s_t`` where ``s_t`` is
  the bench spread ``max_t - min_t`` averaged over ``band_window`` neighbouring
  steps (one step's spread is too noisy).  The NPU passes if at most
  ``band_outside`` of the compared steps lie outside the band.  With the
  defaults (2.0, 10 %) an NPU that behaves like one more bench run lies outside
  on about 3 % of steps (Gaussian noise), while a curve that sits off for a
  tenth of the run fails.  The report also gives ``ratio``: mean |d| over the
  mean |bench_j - bench_0|, 1.0 for an NPU as close as the bench runs are.
* **zero-centred**: the mean of ``d`` over the whole window, its first half and
  its late half must each be within ``max(offset, offset_sigmas * SE, bench
  offset)``: ``SE`` is the standard error of the mean with the effective sample
  size ``n (1 - r) / (1 + r)`` for lag-1 autocorrelation ``r`` (curves are
  smooth, so steps are not independent), and the bench offset is the largest
  ``|mean(bench_j - bench_0)|`` over the same steps.  Symmetric noise passes; a
  curve "stable 0.1 higher late in training" fails on the late half.
* **divergence step**: a step *exceeds* when ``|d_t|`` is above both
  ``mean_abs`` and ``mean_rel * |bench_t|`` and, with k >= 2, the NPU is also
  outside the widened band.  The divergence step is the first exceeding step
  from which at least ``divergence_frac`` of all remaining steps (and at least
  ``divergence_min_steps`` of them) exceed: the curves part for good; isolated
  spikes that come back do not count.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from pytest_accuracy.curves.base import (
    DEFAULT,
    CheckResult,
    LossCriteria,
    Paired,
    Status,
    pair,
)
from pytest_accuracy.curves.local import compare_local_norms
from pytest_accuracy.curves.noise import (
    Band,
    bench_band,
    check_band,
    check_divergence,
    check_zero_centred,
    effective_criteria,
    find_divergence_step,
)
from pytest_accuracy.curves.schedule import check_lr
from pytest_accuracy.curves.standard import check_first_loss, check_grad_norm, check_mean_loss
from pytest_accuracy.logs.table import LogTable

__all__ = [
    "DEFAULT",
    "Band",
    "CheckResult",
    "LossCriteria",
    "LossReport",
    "Paired",
    "Status",
    "bench_band",
    "check_band",
    "check_divergence",
    "check_first_loss",
    "check_grad_norm",
    "check_lr",
    "check_mean_loss",
    "check_zero_centred",
    "compare_local_norms",
    "effective_criteria",
    "evaluate",
    "find_divergence_step",
    "pair",
]


@dataclass(frozen=True)
class LossReport:
    """Every applicable curve check and the JSON-able headline numbers."""

    checks: tuple[CheckResult, ...]
    criteria: LossCriteria
    first_loss_abs: float | None
    first_loss_rel: float | None
    mean_abs: float | None
    mean_rel: float | None
    gnorm_mean_rel: float | None
    steps_compared: int
    steps_skipped: int
    divergence_step: int | None
    offset: float | None
    status: Status

    def check(self, name: str) -> CheckResult:
        return next(c for c in self.checks if c.name == name)

    def to_dict(self) -> dict[str, object]:
        """Plain JSON types only (NaN/inf become None)."""
        out = {k: _json(v) for k, v in asdict(self).items() if k not in ("checks", "criteria")}
        out["criteria"] = asdict(self.criteria)
        out["checks"] = [
            {**asdict(c), "measured": {k: _json(v) for k, v in c.measured.items()}}
            for c in self.checks
        ]
        return out


def _json(v: object) -> object:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def evaluate(
    npu: LogTable, benches: Sequence[LogTable], criteria: LossCriteria = DEFAULT
) -> LossReport:
    """Run every applicable check of NPU vs ``benches[0]`` (band and offsets use all benches)."""
    if not benches:
        raise ValueError("evaluate needs at least one bench run")
    crit = effective_criteria(benches, criteria)
    bench = benches[0]
    checks = (
        check_first_loss(npu, bench, crit),
        check_mean_loss(npu, bench, crit),
        check_grad_norm(npu, bench, crit),
        check_band(npu, benches, crit),
        check_zero_centred(npu, benches, crit),
        check_divergence(npu, benches, crit),
        check_lr(npu, bench, crit),
    )
    p = pair(npu, bench, crit.loss_column, crit)
    m = {k: v for c in checks for k, v in c.measured.items()}
    ran = [c.status for c in checks if c.status != "skip"]
    status: Status = "fail" if "fail" in ran else "pass" if ran else "skip"

    def num(key: str) -> float | None:
        v = m.get(key)
        return None if v is None else float(v)

    div = m.get("divergence_step")
    return LossReport(
        checks,
        crit,
        num("first_loss_abs"),
        num("first_loss_rel"),
        num("mean_abs"),
        num("mean_rel"),
        num("gnorm_mean_rel"),
        len(p.steps),
        p.skipped,
        None if div is None else int(div),
        num("offset"),
        status,
    )
