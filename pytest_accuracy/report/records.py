"""Plain-dict records of compare results: what travels between xdist workers and the report."""

from __future__ import annotations

import math
from typing import Any

from pytest_accuracy.compare import NodeResult, TensorComparison
from pytest_accuracy.compare.divergence import FirstDivergence
from pytest_accuracy.compare.metrics import StatsMetrics, TensorMetrics

# msprobe's metric column names and our snake_case JSON keys for them.
TENSOR_COLUMNS = {
    "cosine": "Cosine", "euc_dist": "EucDist", "max_abs_err": "MaxAbsErr",
    "max_rel_err": "MaxRelativeErr", "one_thousandth_err_ratio": "One Thousandth Err Ratio",
    "five_thousandths_err_ratio": "Five Thousandths Err Ratio", "rel_l2_err": "RelL2Err",
}
STATS_COLUMNS = {
    "max_diff": "Max diff", "min_diff": "Min diff", "mean_diff": "Mean diff",
    "l2norm_diff": "L2norm diff", "max_relative_err": "MaxRelativeErr",
    "min_relative_err": "MinRelativeErr", "mean_relative_err": "MeanRelativeErr",
    "norm_relative_err": "NormRelativeErr",
}


def node_record(
    result: NodeResult, first: FirstDivergence | None, *, rows: bool = True
) -> dict[str, Any]:
    """One JSON-able record per NPU node; metrics are those of its worst output.

    ``rows`` (msprobe's per-tensor table) only feed the report folder's CSV: without one they
    are left out, the most of a record's memory (kept for every node until the session ends).
    """
    worst = _worst_output(result)
    record: dict[str, Any] = {
        "npu_name": result.npu.name,
        "bench_name": result.bench.name if result.bench else None,
        "step": result.step,
        "rank": result.rank,
        "status": result.status,
        "reason": result.reason,
        "tensor": worst.path if worst else None,
        "method": worst.method if worst else None,
        "effective_dtype": worst.dtype if worst else None,
        "first_divergence": first is not None and first.index == result.index,
        # appears | between, for a node that makes an error: a merge of shards relabels a
        # shard's "between" as carried when an earlier shard already diverged
        "divergence_kind": first.kind if first is not None else None,
        "waiver": result.waiver.reason if result.waiver else None,
        "scalar_diffs": [str(d) for d in result.scalar_diffs],
        "finding": result.findings[0].kind if result.findings else None,
        "findings": [{"kind": f.kind, "detail": f.detail} for f in result.findings],
        "local_error": result.local.as_dict() if result.local is not None else None,
        "carried_from": result.carried_from,
        "tolerance": vars(result.tolerance) if result.tolerance is not None else None,
        "twin_step": result.twin_step,
        "rows": [tensor_row(result, t) for t in result.inputs + result.outputs] if rows else [],
    }
    record.update(_metric_fields(worst))
    record["parent"] = result.npu.parent  # construct.json: the report's module tree
    if result.status in ("fail", "pass") and worst is not None and not worst.ok:
        record["reason"] = worst.judgement.detail
    if result.status == "fail" and not record["reason"] and result.findings:
        record["reason"] = result.findings[0].detail
    return record


def _worst_output(result: NodeResult) -> TensorComparison | None:
    failing = result.failing_outputs
    if failing:
        return failing[0]
    return result.outputs[0] if result.outputs else None


def _metric_fields(t: TensorComparison | None) -> dict[str, Any]:
    m = t.metrics if t else None
    if isinstance(m, TensorMetrics):
        return {k: _num(getattr(m, k)) for k in TENSOR_COLUMNS}
    if isinstance(m, StatsMetrics):
        return {k: _num(getattr(m, k)) for k in STATS_COLUMNS}
    if t is not None and t.method == "md5":
        return {"md5_equal": t.ok}
    return {}


def tensor_row(result: NodeResult, t: TensorComparison) -> dict[str, Any]:
    """One row in msprobe's compare-table layout (numbers stay numbers)."""
    npu, bench = t.npu, t.bench
    row: dict[str, Any] = {
        "Step": result.step, "Rank": result.rank,
        "NPU Name": f"{result.npu.name}.{t.path}",
        "Bench Name": f"{result.bench.name}.{t.path}" if result.bench and bench else None,
        "NPU Dtype": npu.raw_dtype, "Bench Dtype": bench.raw_dtype if bench else None,
        "NPU Tensor Shape": list(npu.shape),
        "Bench Tensor Shape": list(bench.shape) if bench else None,
        "Effective Dtype": t.dtype,
    }
    m = t.metrics
    if isinstance(m, TensorMetrics):
        row.update({col: _num(getattr(m, k)) for k, col in TENSOR_COLUMNS.items()})
    elif isinstance(m, StatsMetrics):
        row.update({col: _stat(k, getattr(m, k)) for k, col in STATS_COLUMNS.items()})
    elif t.method == "md5":
        row.update({"NPU MD5": npu.md5, "BENCH MD5": bench.md5 if bench else None})
    for side, rec in (("NPU", npu), ("Bench", bench)):
        stats = rec.stats if rec else None
        row.update({
            f"{side} max": stats.max if stats else None,
            f"{side} min": stats.min if stats else None,
            f"{side} mean": stats.mean if stats else None,
            f"{side} l2norm": stats.norm if stats else None,
        })
    row["Result"] = "pass" if t.ok else "fail"
    row["Err_message"] = t.judgement.detail
    row["NPU_Stack_Info"] = result.npu.stack_line()
    return row


def _stat(key: str, value: Any) -> Any:
    """Statistics relative errors in percent, as msprobe writes them under the same column
    names (the JSON document keeps fractions under its snake_case keys)."""
    value = _num(value)
    if key.endswith("relative_err") and isinstance(value, (int, float)):
        return value * 100.0
    return value


def node_status(node: dict[str, Any], first: dict[str, Any] | None = None) -> tuple[str, str]:
    """The verdict the terminal gives a node, as the CSV's Status and Cause columns: first
    divergence, makes an error, carried from X, pass, skipped, waived or error."""
    status = node.get("status")
    reason = str(node.get("reason") or "").splitlines()[0] if node.get("reason") else ""
    if status == "fail" and node.get("first_divergence"):
        cause = (first or {}).get("likely_cause") or _finding(node) or reason
        return ("first divergence" if first is not None else "makes an error"), str(cause)
    if status == "fail":
        return "makes an error", _finding(node) or reason
    if status == "carried":
        return f"carried from {node.get('carried_from') or '?'}", reason
    if status in ("unmatched", "skip"):
        return "skipped", reason
    return str(status), reason if status != "pass" else ""


def _finding(node: dict[str, Any]) -> str:
    findings = node.get("findings") or []
    return str(findings[0].get("detail", "")) if findings else ""


def _num(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    return value
