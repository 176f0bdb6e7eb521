"""Plain-dict records of compare results: what travels between xdist workers and the report."""

from __future__ import annotations

import math
from collections.abc import Sequence
from operator import attrgetter
from typing import Any

from pytest_accuracy.compare import NodeResult, TensorComparison
from pytest_accuracy.compare.criteria import Tolerance
from pytest_accuracy.compare.divergence import FirstDivergence
from pytest_accuracy.compare.metrics import StatsMetrics, TensorMetrics
from pytest_accuracy.compare.plain import PlainPass

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
# Rows are built as one tuple of values zipped with a fixed header per metric kind, each
# metric object read by one C call: a 100k-node run builds 500k rows, and per-field getattr,
# NaN and percent calls and dict updates were most of their cost.
_TENSOR_VALUES = attrgetter(*TENSOR_COLUMNS)
_STATS_VALUES = attrgetter(*STATS_COLUMNS)
# the statistics columns msprobe writes in percent: its relative errors
_PERCENT = tuple(i for i, k in enumerate(STATS_COLUMNS) if k.endswith("relative_err"))
_UNRECORDED = (None, None, None, None)
_FRONT = ("Step", "Rank", "NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype",
          "NPU Tensor Shape", "Bench Tensor Shape", "Effective Dtype")
_BACK = (*(f"{side} {s}" for side in ("NPU", "Bench") for s in ("max", "min", "mean", "l2norm")),
         "Result", "Err_message", "NPU_Stack_Info")
_ROW_KEYS = {  # the row's columns by the kind of its metrics
    "tensor": (*_FRONT, *TENSOR_COLUMNS.values(), *_BACK),
    "statistics": (*_FRONT, *STATS_COLUMNS.values(), *_BACK),
    "md5": (*_FRONT, "NPU MD5", "BENCH MD5", *_BACK),
    "none": (*_FRONT, *_BACK),
}


def tolerance_record(tol: Tolerance) -> dict[str, Any]:
    """A tolerance as JSON: one dict per fixed tolerance, shared by every node held to it
    (read only; asked for each of 100k nodes: found by the object's id); a tolerance learned
    from the bench runs' spread is one node's, with that spread."""
    if tol.spread is not None:
        return {"rel_err": tol.rel_err, "min_cosine": tol.min_cosine, "spread": tol.spread,
                "inherited": tol.inherited}
    known = _FIXED.get(id(tol))
    if known is None or known[0] is not tol:
        known = _FIXED[id(tol)] = (tol, {"rel_err": tol.rel_err, "min_cosine": tol.min_cosine})
    return known[1]


_FIXED: dict[int, tuple[Tolerance, dict[str, Any]]] = {}  # the tolerance kept: its id holds


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
        # most nodes have neither: an empty list without a comprehension's call
        "scalar_diffs": [str(d) for d in result.scalar_diffs] if result.scalar_diffs else [],
        "finding": result.findings[0].kind if result.findings else None,
        "findings": ([{"kind": f.kind, "detail": f.detail} for f in result.findings]
                     if result.findings else []),
        "local_error": result.local.as_dict() if result.local is not None else None,
        "carried_from": result.carried_from,
        # one dict for every node of a dtype (the criteria make each tolerance once): read only
        "tolerance": tolerance_record(result.tolerance) if result.tolerance is not None else None,
        "twin_step": result.twin_step,
        "rows": _rows(result) if rows else [],
    }
    _add_metric_fields(record, worst)  # in place: no dict of them to merge
    record["parent"] = result.npu.parent  # construct.json: the report's module tree
    if result.status in ("fail", "pass") and worst is not None and not worst.ok:
        # a pass beyond the band says why first (diagnose: rounding its inputs carry)
        record["reason"] = (f"{result.reason} ({worst.judgement.detail})"
                            if result.status == "pass" and result.reason
                            else worst.judgement.detail)
    if result.status == "fail" and not record["reason"] and result.findings:
        record["reason"] = result.findings[0].detail
    return record


def plain_record(plain: PlainPass, *, rows: bool = True) -> dict[str, Any]:
    """``node_record`` of a plain pass (compare/plain.py), key for key and value for value
    (tests/test_plain_pass.py compares the two on every node): its first output is its worst,
    and nothing failed, was found or waived."""
    first = plain.outputs[0]
    return {
        "npu_name": plain.npu.name,
        "bench_name": plain.bench.name,
        "step": plain.step,
        "rank": plain.rank,
        "status": "pass",
        "reason": "",
        "tensor": first.npu.path,
        "method": "statistics",
        "effective_dtype": first.dtype,
        "first_divergence": False,
        "divergence_kind": None,
        "waiver": None,
        "scalar_diffs": [],
        "finding": None,
        "findings": [],
        "local_error": None,
        "carried_from": None,
        "tolerance": tolerance_record(plain.tolerance),
        "twin_step": plain.twin_step,
        "rows": _plain_rows(plain) if rows else [],
        # a finite row's metrics (finite or inf, never NaN: no None to make), in the order of
        # STATS_COLUMNS, which zip stops at before range_rel_err
        **dict(zip(STATS_COLUMNS, first.metrics)),  # noqa: B905
        "parent": plain.npu.parent,
    }


def verdict_record(passed: PlainPass | NodeResult) -> dict[str, Any]:
    """A passing node's record where no JSON document, report or Markdown summary is written:
    what the verdict and the terminal summary read of a pass (a sixth of ``plain_record``'s
    size: ~90 MB less at 100k nodes; with the order judge_node adds, five keys, the most a
    dict holds in its smallest size). JSON-native as built: a pytest-xdist worker sends it
    to the controller as a few dozen bytes, not the full record's few hundred."""
    return {"npu_name": passed.npu.name, "step": passed.step, "rank": passed.rank,
            "status": "pass"}


def _plain_rows(plain: PlainPass) -> list[list[Any]]:
    """``_rows`` of a plain pass: its outputs' statistics rows, each passing."""
    stack = plain.npu.stack_line()
    npu_name, bench_name = plain.npu.name, plain.bench.name
    return [["statistics", plain.step, plain.rank, f"{npu_name}.{o.npu.path}",
             f"{bench_name}.{o.npu.path}", o.npu.raw_dtype, o.bench.raw_dtype,
             list(o.npu.shape), list(o.bench.shape), o.dtype,
             *_percent(_nums(o.metrics[:8])), *o.npu.stats, *o.bench.stats, "pass", "", stack]
            for o in plain.outputs]


def _worst_output(result: NodeResult) -> TensorComparison | None:
    failing = result.failing_outputs
    if failing:
        return failing[0]
    return result.outputs[0] if result.outputs else None


def _add_metric_fields(record: dict[str, Any], t: TensorComparison | None) -> None:
    """The worst output's metrics into ``record``, in their columns' order."""
    m = t.metrics if t else None
    # zip without strict: the columns and the getters are made from the same names
    if isinstance(m, StatsMetrics):  # most records of a big statistics dump: tested first
        record.update(zip(STATS_COLUMNS, _nums(_STATS_VALUES(m))))  # noqa: B905
    elif isinstance(m, TensorMetrics):  # (the two classes are unrelated: order is speed only)
        record.update(zip(TENSOR_COLUMNS, _nums(_TENSOR_VALUES(m))))  # noqa: B905
    elif t is not None and t.method == "md5":
        record["md5_equal"] = t.ok


def _rows(result: NodeResult) -> list[list[Any]]:
    """The node's rows of msprobe's table, compact (see ``row_cells``)."""
    tensors = result.inputs + result.outputs
    if not tensors:
        return []
    stack = result.npu.stack_line()  # the node's, the same in each of its rows: found once
    return [_tensor_row(result, t, stack) for t in tensors]


def tensor_row(result: NodeResult, t: TensorComparison) -> dict[str, Any]:
    """One row in msprobe's compare-table layout (numbers stay numbers)."""
    return row_dict(_tensor_row(result, t, result.npu.stack_line()))


def row_cells(row: list[Any] | dict[str, Any]) -> tuple[tuple[str, ...], Sequence[Any]]:
    """A record's row as (column names, values). Node records keep their rows compact, as
    ``[kind, *values]`` under the kind's fixed columns: a dict a row was ~1 KB more, 100 MB
    of a 100k-node run; a row given as a dict is taken as it is."""
    if isinstance(row, dict):
        return tuple(row), list(row.values())
    return _ROW_KEYS[row[0]], row[1:]


def row_dict(row: list[Any] | dict[str, Any]) -> dict[str, Any]:
    """A record's row as a dict of msprobe's column names."""
    keys, values = row_cells(row)
    return dict(zip(keys, values, strict=True))


def _tensor_row(result: NodeResult, t: TensorComparison, stack: str | None) -> list[Any]:
    npu, bench = t.npu, t.bench
    kind, metrics = _row_metrics(t)
    npu_stats, bench_stats = npu.stats if npu else None, bench.stats if bench else None
    return [
        kind, result.step, result.rank, f"{result.npu.name}.{t.path}",
        f"{result.bench.name}.{t.path}" if result.bench and bench else None,
        npu.raw_dtype, bench.raw_dtype if bench else None,
        list(npu.shape), list(bench.shape) if bench else None, t.dtype,
        *metrics,
        *(npu_stats if npu_stats else _UNRECORDED),  # Stats: (max, min, mean, norm)
        *(bench_stats if bench_stats else _UNRECORDED),
        "pass" if t.ok else "fail", t.judgement.detail, stack,
    ]


def _row_metrics(t: TensorComparison) -> tuple[str, Sequence[Any]]:
    """The kind of the row's metric columns and their values (NaN as None)."""
    m = t.metrics
    if isinstance(m, TensorMetrics):
        return "tensor", _nums(_TENSOR_VALUES(m))
    if isinstance(m, StatsMetrics):
        return "statistics", _percent(_nums(_STATS_VALUES(m)))
    if t.method == "md5":
        return "md5", (t.npu.md5, t.bench.md5 if t.bench else None)
    return "none", ()


def _nums(values: Sequence[Any]) -> list[Any]:
    """The values with NaN as None (JSON has no NaN; an empty CSV cell), in one pass."""
    isnan = math.isnan
    return [None if isinstance(v, float) and isnan(v) else v for v in values]


def _percent(values: list[Any]) -> list[Any]:
    """Statistics relative errors in percent, as msprobe writes them under the same column
    names (the JSON document keeps fractions under its snake_case keys)."""
    for i in _PERCENT:
        if isinstance(values[i], (int, float)):
            values[i] = values[i] * 100.0
    return values


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


_SCALARS = frozenset({str, int, float, bool, type(None)})


def json_native(value: Any) -> bool:
    """Whether ``value`` is exactly what ``json.loads(json.dumps(value))`` would give back."""
    if type(value) in _SCALARS:
        return True
    pending = [value]
    scalars = _SCALARS
    while pending:
        item = pending.pop()
        kind = type(item)
        if kind is dict:
            for key in item:
                if type(key) is not str:
                    return False
            members = item.values()
        elif kind is list:
            members = item
        else:  # a tuple, a numpy number, an object: JSON would give back something else
            return False
        for member in members:  # scalars checked here, not pushed (most of a record)
            kind = type(member)
            if kind in scalars:
                continue
            if kind is not dict and kind is not list:
                return False  # what popping it would say: no container, no scalar
            if member:  # an empty list or dict is what JSON gives back: nothing to walk
                pending.append(member)
    return True
