"""Find where the runs part: the first divergent node and the first node producing NaN/Inf."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pytest_accuracy.compare import Comparison, NodeResult, TensorComparison
from pytest_accuracy.compare.metrics import StatsMetrics, TensorMetrics
from pytest_accuracy.dumps.model import TensorRecord


@dataclass(frozen=True)
class FirstDivergence:
    """The earliest node (step, rank, execution order) where error appears.

    ``kind`` is ``"appears"`` when that node's inputs still match and its outputs do
    not; ``"between"`` when the first failing node already had diverged inputs, i.e.
    the error appeared in code the dump did not record, after ``previous``.
    """

    index: int
    npu_name: str
    bench_name: str
    step: int
    rank: int
    tensor: str
    kind: str
    reason: str
    previous: str | None = None
    likely_cause: str | None = None
    stack: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "npu_name": self.npu_name,
            "bench_name": self.bench_name,
            "step": self.step,
            "rank": self.rank,
            "tensor": self.tensor,
            "kind": self.kind,
            "reason": self.reason,
            "previous": self.previous,
            "likely_cause": self.likely_cause,
            "stack": self.stack,
        }

    def sentence(self) -> str:
        where = f"step {self.step}, rank {self.rank}"
        if self.kind == "appears":
            text = f"First divergence: {self.npu_name} ({where}), {self.tensor}: {self.reason}"
        else:
            text = (
                f"First divergence between {self.previous or 'the start of the run'} and "
                f"{self.npu_name} ({where}): the error appeared in code the dump did not "
                f"record; {self.tensor}: {self.reason}"
            )
        if self.likely_cause:
            text += f". Likely cause: {self.likely_cause}"
        return text


def find_first_divergence(cmp: Comparison, upto: int | None = None) -> FirstDivergence | None:
    """Scan nodes in execution order (step, then rank, then call) up to ``upto``."""
    last = len(cmp) - 1 if upto is None else min(upto, len(cmp) - 1)
    previous_pass: NodeResult | None = None
    for i in range(last + 1):
        result = cmp.node(i)
        if result.status == "pass":
            previous_pass = result
        elif result.status == "fail":
            return _describe(cmp.with_inputs(i), previous_pass)
    return None


def _describe(result: NodeResult, previous: NodeResult | None) -> FirstDivergence:
    worst = result.failing_outputs[0]
    cause = "; ".join(str(d) for d in result.scalar_diffs) or None
    appears = result.inputs_ok
    return FirstDivergence(
        index=result.index,
        npu_name=result.npu.name,
        bench_name=result.bench.name if result.bench else "",
        step=result.step,
        rank=result.rank,
        tensor=worst.path,
        kind="appears" if appears else "between",
        reason=worst.judgement.detail,
        previous=None if appears or previous is None else previous.npu.name,
        likely_cause=f"non-tensor argument differs ({cause})" if cause else None,
        stack=result.npu.stack_line(),
    )


def evidence_lines(result: NodeResult) -> list[str]:
    """Inputs vs outputs error table for a failure message."""
    lines = []
    if not result.inputs_checked:
        lines.append("  inputs not compared (only the first divergent node needs them; "
                     "--acc-inputs=all compares every input)")
    for label, group in (("inputs", result.inputs), ("outputs", result.outputs)):
        for t in group:
            lines.append(f"  {label[:-1]:<6} {t.path:<22} {_summary(t)}")
    return lines


def _summary(t: TensorComparison) -> str:
    verdict = "ok" if t.ok else "MISMATCH"
    m = t.metrics
    if t.method == "md5":
        return f"md5 {t.npu.md5} vs {t.bench.md5 if t.bench else None}  {verdict}"
    if m is None:
        return verdict
    if isinstance(m, TensorMetrics) and m.status == "ok":
        return (
            f"rel err {m.rel_l2_err:.3g}  cosine {m.cosine:.6f}  "
            f"max abs {m.max_abs_err:.3g}  [{t.dtype}]  {verdict}"
        )
    if isinstance(m, StatsMetrics):
        return (
            f"norm rel err {_fmt(m.norm_relative_err)}  "
            f"range rel err {_fmt(m.range_rel_err)}  [{t.dtype}]  {verdict}"
        )
    return f"{m.status}  {verdict}"


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"


@dataclass(frozen=True)
class FirstNonFinite:
    npu_name: str
    step: int
    rank: int
    tensor: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "npu_name": self.npu_name,
            "step": self.step,
            "rank": self.rank,
            "tensor": self.tensor,
        }


def find_first_nonfinite(cmp: Comparison) -> FirstNonFinite | None:
    """First NPU node whose outputs hold NaN/Inf while its inputs are finite (from metadata)."""
    for dump, call in cmp.entries:
        bad = [r for r in call.output_tensors if not _finite(r)]
        if bad and all(_finite(r) for r in call.input_tensors + call.parameters):
            return FirstNonFinite(call.name, dump.step, dump.rank, bad[0].path)
    return None


def _finite(rec: TensorRecord) -> bool:
    values = (rec.stats.max, rec.stats.min, rec.stats.mean, rec.stats.norm)
    return all(v is None or math.isfinite(v) for v in values)
