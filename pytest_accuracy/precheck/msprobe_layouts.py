"""The column layouts of msprobe's acc_check / run_ut and api_precision_compare CSVs, by release.

Read from the source history of Ascend/mstt (``debug/accuracy_tools``: ``api_accuracy_checker``,
``atat`` and ``msprobe``) and from files msprobe 26.2.0 wrote.  A details file is recognised by
its header, never by its name: the column names are mapped to the metric keys our own precheck
uses (``pytest_accuracy/precheck/report.py``), so every layout below reads into one model.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_accuracy.precheck.report import MS_DETAIL_COLUMNS, PT_DETAIL_COLUMNS

# Header of a details column -> our metric key.  Chinese names: run_ut/acc_check since
# 2024-01-29; English: run_ut 2023-09 .. 2024-01; "Cosine"/"MaxAbsErr"/...: MindSpore.
_METRIC_ALIASES: dict[str, str] = {
    "余弦相似度": "cosine", "Cosine Similarity": "cosine",
    "最大绝对误差": "max_abs_err", "Max Abs Error": "max_abs_err",
    "Max Rel Error": "max_rel_err",
    "双百指标": "ratio_rel_lt_1e-2", "Relative Error (dual hundredth)": "ratio_rel_lt_1e-2",
    "Relative Error (hundredth)": "ratio_rel_lt_1e-2",
    "双千指标": "ratio_rel_lt_1e-3", "Relative Error (dual thousandth)": "ratio_rel_lt_1e-3",
    "双万指标": "ratio_rel_lt_1e-4",
    "Relative Error (dual ten thousandth)": "ratio_rel_lt_1e-4",
    "二进制一致错误率": "binary_mismatch_rate", "错误率": "binary_mismatch_rate",
    "Error Rate": "binary_mismatch_rate",
    "误差均衡性": "error_balance", "均方根误差": "rmse", "小值域错误占比": "small_value_err_ratio",
    "相对误差最大值": "max_rel_err_normal", "相对误差平均值": "mean_rel_err_normal",
    "inf/nan错误率": "inf_nan_err_ratio", "相对误差错误率": "rel_err_ratio",
    "绝对误差错误率": "abs_err_ratio", "ULP误差最大值": "ulp_max", "ULP误差最小值": "ulp_min",
    "ULP误差平均值": "ulp_mean", "ULP误差大于阈值占比": "ulp_over_limit_ratio",
    # our own precheck CSVs (English headers) read back as they are written
    **{h: k for h, k in PT_DETAIL_COLUMNS + MS_DETAIL_COLUMNS if k is not None},
}
# api_precision_compare details: NPU/GPU ratios (and the rates it re-reads), by header.
_RATIO_ALIASES: dict[str, str] = {
    "小值域错误比值": "small_value_err_ratio_ratio", "均方根误差比值": "rmse_ratio",
    "相对误差最大值比值": "max_rel_err_ratio", "相对误差平均值比值": "mean_rel_err_ratio",
    "误差均衡性比值": "error_balance_ratio", "inf/nan错误率": "inf_nan_err_ratio",
    "相对误差错误率": "rel_err_ratio", "绝对误差错误率": "abs_err_ratio",
    "二进制一致错误率": "binary_mismatch_rate", "ULP误差平均值": "ulp_mean",
    "ULP误差大于阈值占比": "ulp_over_limit_ratio",
    "ULP误差大于阈值占比比值": "ulp_over_limit_ratio_ratio", "双千指标": "ratio_rel_lt_1e-3",
}
NAME_COLUMNS = ("API Name", "API name", "Npu Name", "Subject")
STATUS_COLUMNS = ("Status", "比对结果", "Pass")
RESULT_COLUMNS = ("Forward Test Success", "Backward Test Success")


@dataclass(frozen=True)
class Layout:
    """What kind of file a header is, and the release that writes it."""

    kind: str  # "details" | "result" | "compare_details" | "compare_result"
    framework: str  # "pytorch" | "mindspore" | "any"
    release: str  # the release (range) that writes this header, for messages and the JSON


def _columns(header: list[str]) -> set[str]:
    return {h.strip() for h in header}


def detect(header: list[str]) -> Layout | None:
    """The layout of a CSV by its header; None when it is none of msprobe's."""
    cols = _columns(header)
    if not cols & set(NAME_COLUMNS):
        return None
    if set(RESULT_COLUMNS) <= cols:
        return Layout("result", "any", _result_release(cols))
    if "比对结果" in cols:
        return Layout("compare_details", "pytorch", _compare_release(len(cols)))
    if "Tested Dtype" in cols:
        return Layout("details", "mindspore", "msprobe MindSpore acc_check (2024-08 and later)")
    if "Bench Dtype" in cols and cols & {"DEVICE Dtype", "NPU Dtype"}:
        return Layout("details", "pytorch", _pytorch_release(cols))
    return None


def _result_release(cols: set[str]) -> str:
    if "API Name" in cols:
        return "msprobe MindSpore acc_check or api_precision_compare result"
    return "msprobe PyTorch acc_check / run_ut result (2023-08 and later)"


def _pytorch_release(cols: set[str]) -> str:
    if "Cosine Similarity" in cols:
        return "att api_accuracy_checker run_ut, English headers (2023-09 .. 2024-01)"
    if "Cosine" in cols:
        return "pytest-accuracy precheck CSV"
    if "ULP误差最小值" in cols:
        return "att run_ut, 24 columns with ULP min (2024-04-08 .. 2024-04-15)"
    if "ULP误差最大值" in cols:
        return "msprobe acc_check / run_ut, 23 columns (att 2024-04-15, msprobe 1.0 .. 26.x)"
    if "inf/nan错误率" in cols:
        return "att run_ut, 20 columns (2024-03)"
    return "att run_ut, 16-17 columns (2024-01-29 .. 2024-03)"


def _compare_release(n_columns: int) -> str:
    return {28: "api_precision_compare, 28 columns (2024-04-25 .. msprobe 26.x)",
            26: "api_precision_compare, 26 columns (2024-04-15 .. 2024-04-25)",
            24: "api_precision_compare, 24 columns (2024-04)",
            22: "api_precision_compare, 22 columns (2024-03)"}.get(
        n_columns, f"api_precision_compare, {n_columns} columns (2024-03)")


def metric_key(header: str, kind: str) -> str | None:
    """Our metric key for a details column (None: not a metric, or one we do not use)."""
    table = _RATIO_ALIASES if kind == "compare_details" else _METRIC_ALIASES
    return table.get(header.strip())


def name_column(header: list[str]) -> int:
    """Index of the API/output name column (present: ``detect`` checked it)."""
    stripped = [h.strip() for h in header]
    return next(stripped.index(n) for n in NAME_COLUMNS if n in stripped)
