"""Precheck results as msprobe-layout result/details CSVs and as JSON-ready dicts.

The CSVs keep msprobe's file names and column order so existing tooling reads them,
with these deliberate differences: English headers (PyTorch layout translated as in
the spec), plain UTF-8 without BOM, one physical line per row, a Message cell on
every result row (msprobe's are ragged), numbers written as numbers (blank when not
computed), a details row for every skipped case (msprobe lets some vanish), and
status words msprobe uses: ``pass``, ``error`` (our ``fail``), ``SKIP``.
"""

from __future__ import annotations

import csv
import math
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from pytest_accuracy.precheck.results import OutputCheck, PrecheckResult

RESULT_COLUMNS = {
    "pytorch": ["API name", "Forward Test Success", "Backward Test Success", "Message"],
    "mindspore": ["API Name", "Forward Test Success", "Backward Test Success", "Message"],
}
# (header, metric key); None marks the columns filled from the check itself.
PT_DETAIL_COLUMNS: list[tuple[str, str | None]] = [
    ("API Name", None),
    ("Bench Dtype", None),
    ("DEVICE Dtype", None),
    ("Shape", None),
    ("Cosine", "cosine"),
    ("MaxAbsErr", "max_abs_err"),
    ("RelErr<0.01 Ratio", "ratio_rel_lt_1e-2"),
    ("RelErr<0.001 Ratio", "ratio_rel_lt_1e-3"),
    ("RelErr<0.0001 Ratio", "ratio_rel_lt_1e-4"),
    ("Binary Mismatch Rate", "binary_mismatch_rate"),
    ("Error Balance", "error_balance"),
    ("RMSE", "rmse"),
    ("Small Value Error Ratio", "small_value_err_ratio"),
    ("Max Relative Error", "max_rel_err_normal"),
    ("Mean Relative Error", "mean_rel_err_normal"),
    ("Inf/NaN Error Ratio", "inf_nan_err_ratio"),
    ("Relative Error Ratio", "rel_err_ratio"),
    ("Absolute Error Ratio", "abs_err_ratio"),
    ("ULP Error Max", "ulp_max"),
    ("ULP Error Mean", "ulp_mean"),
    ("ULP Error Over Threshold Ratio", "ulp_over_limit_ratio"),
    ("Status", None),
    ("Message", None),
]
MS_DETAIL_COLUMNS: list[tuple[str, str | None]] = [
    ("API Name", None),
    ("Bench Dtype", None),
    ("Tested Dtype", None),
    ("Shape", None),
    ("Cosine", "cosine"),
    ("MaxAbsErr", "max_abs_err"),
    ("MaxRelativeErr", "max_rel_err"),
    ("Status", None),
    ("Message", None),
]
_STATUS = {"pass": "pass", "fail": "error", "skip": "SKIP"}
_TORCH_DTYPES = {"float64", "float32", "float16", "bfloat16", "int64", "int32", "bool"}
_MS_DTYPES = {
    "float64": "Float64",
    "float32": "Float32",
    "float16": "Float16",
    "bfloat16": "BFloat16",
    "int64": "Int64",
    "int32": "Int32",
    "bool": "Bool",
}


def _layout(framework: str) -> str:
    return "mindspore" if framework == "mindspore" else "pytorch"


def _dtype(name: str, layout: str) -> str:
    if layout == "mindspore":
        return _MS_DTYPES.get(name, name)
    return f"torch.{name}" if name in _TORCH_DTYPES else name


def _number(value: float | None) -> float | str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return value


def _detail_row(check: OutputCheck, layout: str) -> dict[str, object]:
    columns = MS_DETAIL_COLUMNS if layout == "mindspore" else PT_DETAIL_COLUMNS
    fixed: dict[str, object] = {
        "API Name": check.name,
        "Bench Dtype": _dtype(check.bench_dtype, layout),
        "DEVICE Dtype": _dtype(check.device_dtype, layout),
        "Tested Dtype": _dtype(check.device_dtype, layout),
        "Shape": str(tuple(check.shape)),
        "Status": _STATUS[check.status],
        "Message": check.message,
    }
    return {
        header: fixed[header] if key is None else _number(check.metrics.get(key))
        for header, key in columns
    }


def details_rows(
    result: PrecheckResult, layout: str | None = None, prefix: str = ""
) -> list[dict[str, object]]:
    """One details row per compared output; one SKIP row when nothing was compared.

    ``prefix`` ("<step>/<rank>/") keeps names unique when several dumps share a file.
    """
    layout = layout or _layout(result.framework)
    checks = result.outputs or (
        OutputCheck(result.name, result.status, "", "", (), {}, result.reason),
    )
    rows = [_detail_row(c, layout) for c in checks]
    for row in rows:
        row["API Name"] = f"{prefix}{row['API Name']}"
    return rows


def _prefix(result: PrecheckResult, several: bool) -> str:
    return result.case_id[: len(result.case_id) - len(result.name)] if several else ""


def _several_dumps(results: Sequence[PrecheckResult]) -> bool:
    return len({r.case_id[: len(r.case_id) - len(r.name)] for r in results}) > 1


def result_rows(results: Sequence[PrecheckResult], layout: str) -> list[dict[str, object]]:
    """One row per API call: forward and backward status side by side (blank: no backward)."""
    header = RESULT_COLUMNS[layout]
    several = _several_dumps(results)
    rows: dict[str, dict[str, object]] = {}
    for result in results:
        key = result.case_id.rsplit(".", 1)[0]  # "<step>/<rank>/<api>"
        name = f"{_prefix(result, several)}{result.api}"
        empty: dict[str, object] = {h: "" for h in header}
        row = rows.setdefault(key, empty | {header[0]: name})
        column = header[1] if result.direction == "forward" else header[2]
        row[column] = _STATUS[result.status]
        if result.reason:
            note = f"{result.direction}: {result.reason}"
            row["Message"] = f"{row['Message']}; {note}" if row["Message"] else note
    return list(rows.values())


def write_precheck_csvs(
    results: Sequence[PrecheckResult],
    out_dir: str | Path,
    *,
    timestamp: str | None = None,
    layout: str | None = None,
) -> tuple[Path, Path]:
    """Write ``accuracy_checking_result_<ts>.csv`` and ``..._details_<ts>.csv``; return both.

    ``layout`` is "pytorch" (msprobe's 23 details columns) or "mindspore" (its 9); by
    default the first result's framework decides.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stamp = timestamp or time.strftime("%Y%m%d%H%M%S")
    chosen = layout or (_layout(results[0].framework) if results else "pytorch")
    if chosen not in RESULT_COLUMNS:
        raise ValueError(f"unknown CSV layout {layout!r}: use 'pytorch' or 'mindspore'")
    result_path = out / f"accuracy_checking_result_{stamp}.csv"
    details_path = out / f"accuracy_checking_details_{stamp}.csv"
    _write(result_path, RESULT_COLUMNS[chosen], result_rows(results, chosen))
    columns = MS_DETAIL_COLUMNS if chosen == "mindspore" else PT_DETAIL_COLUMNS
    several = _several_dumps(results)
    details = [row for r in results for row in details_rows(r, chosen, _prefix(r, several))]
    _write(details_path, [h for h, _ in columns], details)
    return result_path, details_path


def _write(path: Path, header: list[str], rows: list[dict[str, object]]) -> None:
    from pytest_accuracy.report.cells import csv_row
    from pytest_accuracy.safe_io import atomic_open

    with atomic_open(path, "w", newline="") as handle:  # a planted symlink is replaced
        writer = csv.DictWriter(handle, fieldnames=header)
        writer.writeheader()
        writer.writerows(csv_row(row) for row in rows)  # API names and messages: neutralised


def _json_number(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def precheck_json(results: Iterable[PrecheckResult]) -> list[dict[str, object]]:
    """JSON-ready summaries: name (the case id), status, cosine, max_abs, reason, and
    which inputs, device and standard were used.  Non-finite numbers become null."""
    return [
        {
            "name": r.case_id,
            "status": r.status,
            "cosine": _json_number(r.cosine),
            "max_abs": _json_number(r.max_abs),
            "reason": r.reason,
            "inputs": r.inputs,
            "device": r.device,
            "standard": r.standard,
        }
        for r in results
    ]
