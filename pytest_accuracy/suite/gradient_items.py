"""Gradient items: per-parameter local norms at one step, and the step where gradients part."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from pytest_accuracy.compare import Comparison
from pytest_accuracy.settings import setting
from pytest_accuracy.suite import RECORD_KEY, AccuracyError, AccuracyItem
from pytest_accuracy.suite.state import STATE_KEY

_TOP = 5


def gradient_items(parent: pytest.Collector, cmp: Comparison) -> Iterator[pytest.Item]:
    """Only when both runs dumped parameter gradients (levels L0 and mix)."""
    has_grads = any(c.kind == "params_grad" for _, c in cmp.entries)
    bench_grads = any(c.kind == "params_grad" for d in cmp.bench for c in d.calls)
    if not (has_grads and bench_grads):
        return
    yield LocalNormItem.from_parent(parent, name="local_norm")
    if len({d.step for d in cmp.npu}) > 1:
        yield GradientStepsItem.from_parent(parent, name="gradient_steps")


def _pairing(cmp: Comparison) -> Any:
    from pytest_accuracy.compare import pair_by_name

    return None if cmp.pairing is pair_by_name else cmp.pairing


class LocalNormItem(AccuracyItem):
    """Per-parameter gradient norms at one step; the failure names the worst parameters."""

    def runtest(self) -> None:
        from pytest_accuracy.gradients import local_norm_diffs

        state = self.config.stash[STATE_KEY]
        cmp: Comparison = state.comparison
        step = int(setting(self.config, "local_norm_step") or min(d.step for d in cmp.npu))
        rank = min(d.rank for d in cmp.npu)
        result = local_norm_diffs(cmp.npu, cmp.bench, step=step, rank=rank,
                                  pairing=_pairing(cmp))
        tol = state.criteria.tolerance(_grad_dtype(cmp))
        allowed = _allowed_by_param(cmp, step, rank, tol.rel_err)
        worst = [d for d in result.diffs
                 if not d.rel_diff <= _limit(allowed, d.npu_params, tol.rel_err)]
        self.stash[RECORD_KEY] = {"group": "gradients", "name": "local_norm", "step": step,
                                  "status": "fail" if worst else "pass",
                                  "summary": _norm_line(worst[0]) if worst else "",
                                  "worst": [_norm_dict(d) for d in result.diffs[:_TOP]]}
        if not result.diffs:
            # a bench of another DP size: its gradients are sums over another part of the batch
            why = next((d.left_out[c.name] for d in cmp.bench for c in d.calls
                        if c.kind == "params_grad" and c.name in d.left_out), None)
            pytest.skip(f"parameter gradients {why}" if why else
                        "no parameter gradients could be paired between the two dumps")
        if worst:
            lines = [f"Local gradient norms differ at step {step}, rank {rank}: {len(worst)} of "
                     f"{len(result.diffs)} parameters beyond {tol.rel_err:g} relative, worst "
                     "first:"]
            lines += [f"  {_norm_line(d)}" for d in worst[:_TOP]]
            raise AccuracyError(lines)


class GradientStepsItem(AccuracyItem):
    """The first step whose parameter gradients part between the runs."""

    def runtest(self) -> None:
        from pytest_accuracy.gradients import gradient_view

        state = self.config.stash[STATE_KEY]
        cmp: Comparison = state.comparison
        # gradients carry the error of everything computed before them: judge them with
        # the effective (least precise upstream) dtype's tolerance, like compare does
        tol = state.criteria.tolerance(_grad_dtype(cmp))
        criteria = replace(state.criteria, rel_err=tol.rel_err, min_cosine=tol.min_cosine)
        view = gradient_view(cmp.npu, cmp.bench, rank=min(d.rank for d in cmp.npu),
                             pairing=_pairing(cmp), criteria=criteria)
        allowed = _allowed_by_param(cmp, min(view.steps), min(d.rank for d in cmp.npu),
                                    tol.rel_err)
        step, parted = _parting(view, allowed, tol.rel_err)
        self.stash[RECORD_KEY] = {
            "group": "gradients", "name": "gradient_steps", "steps": view.steps,
            "status": "fail" if step is not None else "pass", "first_parting_step": step,
            "summary": f"gradients part at step {step}: {', '.join(parted[:3])}" if parted
            else ""}
        if step is not None:
            rows = {n: next(s for s in view.params[n] if s.step == step) for n in parted}
            raise AccuracyError(
                [f"Gradients part at step {step} (of steps {view.steps}): {len(parted)} "
                 "parameters, worst first:"]
                + [f"  {n}: {rows[n].detail}" for n in parted[:_TOP]])


def _grad_dtype(cmp: Comparison) -> str:
    return cmp.effective_dtypes[-1] if cmp.effective_dtypes else "float32"


def _norm_line(d: Any) -> str:
    return (f"{d.name}: norm {d.npu_norm:.6g} vs bench {d.bench_norm:.6g} "
            f"(relative difference {d.rel_diff:.3g})")


def _norm_dict(d: Any) -> dict[str, Any]:
    return {"param": d.name, "npu_norm": d.npu_norm, "bench_norm": d.bench_norm,
            "rel_diff": d.rel_diff}


def _allowed_by_param(cmp: Comparison, step: int, rank: int, default: float) -> dict[str, float]:
    """Waivers apply through each parameter's parameters_grad node: a known divergence
    allows anything, a relaxed waiver its own rel_err."""
    from pytest_accuracy.gradients import param_grads

    dump = cmp.npu.dumps.get((step, rank)) or next(iter(cmp.npu))
    allowed: dict[str, float] = {}
    for name, grad in param_grads(dump).items():
        waiver = cmp.criteria.waiver_for(grad.node, "")
        if waiver is not None:
            allowed[name] = (float("inf") if waiver.known_divergence
                             else waiver.rel_err if waiver.rel_err is not None else default)
    return allowed


def _limit(allowed: dict[str, float], params: tuple[str, ...] | list[str], default: float) -> float:
    return max((allowed.get(p, default) for p in params), default=default)


def _parting(view: Any, allowed: dict[str, float], default: float) -> tuple[int | None, list[str]]:
    """The first step where a parameter's gradients part, after waivers; worst first."""
    for step in view.steps:
        parted = [n for n in view.parted_params(step)
                  if _still_parted(view, n, step, _limit(allowed, n.split("+"), default))]
        if parted:
            return step, parted
    return None, []


def _still_parted(view: Any, name: str, step: int, limit: float) -> bool:
    row = next(s for s in view.params[name] if s.step == step)
    return row.rel_err is None or not row.rel_err <= limit
