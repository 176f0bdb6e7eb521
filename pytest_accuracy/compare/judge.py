"""Judge one node: compare its tensors with the bench's and settle its status."""

from __future__ import annotations

from pytest_accuracy.compare.criteria import (
    CompareCriteria,
    judge_md5,
    judge_stats,
    judge_tensor,
    less_precise,
)
from pytest_accuracy.compare.metrics import stats_metrics, tensor_metrics
from pytest_accuracy.compare.results import NodeResult, TensorComparison
from pytest_accuracy.dumps.model import Call, TensorRecord, is_float_dtype


def outputs_diverge_in_metadata(
    npu: Call, bench: Call, dtype: str, criteria: CompareCriteria
) -> bool:
    """Do the outputs differ by their recorded checksums or statistics (no tensor is read)?"""
    return bool(diverging_in_metadata(npu.output_tensors, bench.output_tensors, dtype, criteria))


def diverging_in_metadata(
    records: list[TensorRecord], bench: list[TensorRecord], dtype: str, criteria: CompareCriteria
) -> list[TensorRecord]:
    """The records that differ from the bench's by checksum or statistics (no tensor is read)."""
    by_path = {r.path: r for r in bench}
    out = []
    for rec in records:
        other = by_path.get(rec.path)
        if other is None:
            continue
        eff = less_precise(dtype, rec.dtype) if is_float_dtype(rec.dtype) else rec.dtype
        if rec.md5 is not None and other.md5 is not None:
            same = judge_md5(rec.md5, other.md5).ok
        else:
            same = judge_stats(stats_metrics(rec.stats, other.stats), eff,
                               criteria.tolerance(eff)).ok
        if not same:
            out.append(rec)
    return out


def settle(result: NodeResult) -> None:
    if result.waiver is not None and result.waiver.known_divergence:
        result.status, result.reason = "waived", f"known divergence: {result.waiver.reason}"
    elif not result.outputs:
        result.status, result.reason = "skip", "no tensor outputs to compare"
    elif result.failing_outputs:
        result.status = "fail"
    else:
        result.status = "pass"


def records_of(call: Call) -> list[TensorRecord]:
    return call.input_tensors + call.parameters + call.output_tensors


def compare_all(
    records: list[TensorRecord], bench: Call, dtype: str, criteria: CompareCriteria
) -> list[TensorComparison]:
    by_path = {r.path: r for r in records_of(bench)}
    out = []
    for rec in records:
        other = by_path.get(rec.path)
        if other is None:
            continue  # e.g. a gradient that only one framework records
        # integer/bool tensors must be equal, so they keep their own dtype
        eff = less_precise(dtype, rec.dtype) if is_float_dtype(rec.dtype) else rec.dtype
        out.append(compare_tensor(rec, other, eff, criteria))
    return out


def compare_tensor(
    npu: TensorRecord, bench: TensorRecord, dtype: str, criteria: CompareCriteria
) -> TensorComparison:
    """Compare one tensor pair with the best evidence both sides have."""
    tol = criteria.tolerance(dtype)
    if npu.has_data and bench.has_data:
        metrics = tensor_metrics(npu.load(), bench.load())
        judged = judge_tensor(metrics, dtype, tol)
        return TensorComparison(npu.path, npu, bench, dtype, judged, metrics, "tensor")
    if npu.md5 is not None and bench.md5 is not None:
        return TensorComparison(
            npu.path, npu, bench, dtype, judge_md5(npu.md5, bench.md5), None, "md5"
        )
    stats = stats_metrics(npu.stats, bench.stats)
    return TensorComparison(
        npu.path, npu, bench, dtype, judge_stats(stats, dtype, tol), stats, "statistics"
    )
