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
        worst = [d for d in result.diffs if not d.rel_diff <= tol.rel_err]
        self.stash[RECORD_KEY] = {"group": "gradients", "name": "local_norm", "step": step,
                                  "status": "fail" if worst else "pass",
                                  "summary": _norm_line(worst[0]) if worst else "",
                                  "worst": [_norm_dict(d) for d in result.diffs[:_TOP]]}
        if not result.diffs:
            pytest.skip("no parameter gradients could be paired between the two dumps")
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
        step = view.first_parting_step
        parted = view.parted_params(step) if step is not None else []
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
