"""Precheck standards: when a device output matches its float64 reference closely enough.

Every output is compared with the float64 reference rounded once to the output's dtype
(the correctly rounded answer, the best that dtype can hold), so a device that returns
it shows zero error and every reported error is the device's own.

``default`` (the DESIGN's precheck criterion): pass iff cosine > 0.99 **and** max
absolute error < 1e-4.

``dtype`` (dtype-aware, after msprobe's benchmark / absolute-threshold standards):
with ``rtol`` = 2^-14 for float32, 2^-10 for float16, 2^-7 for bfloat16 (2^-40 float64,
2^-3 / 2^-2 for float8 e4m3 / e5m2) and ``scale`` = the largest |reference| value,

* error-ratio rule: no element may have ``|dev - ref| > rtol * (|ref| + scale / 16)``
  (the share that does is reported as the relative-error ratio).  The ``scale / 16``
  floor is how small values are handled: near-zero results of a sum inherit the
  rounding error of its larger terms, so they get an absolute allowance tied to the
  tensor's magnitude instead of msprobe's fixed small-value constants.
* bias rule: ``||dev - ref|| / ||ref|| <= rtol`` (a uniform 2e-4 relative bias
  fails in float32, where cosine stays 1.0).

Both standards: NaN/Inf where the reference is finite (or finite where it is not) is a
failure, never a warning; integer and bool outputs must be equal (msprobe's binary
consistency); a shape different from the reference's is a failure.  The other
msprobe columns (error balance, RMSE, small-value error ratio, ULP errors ...) are
computed for the details CSV and do not decide the status.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pytest_accuracy.compare.metrics import tensor_metrics
from pytest_accuracy.precheck.inputs import NUMPY_DTYPES, is_float


@dataclass(frozen=True)
class DtypeRule:
    """Per-dtype constants: the dtype standard's rtol, and msprobe's report-only ones."""

    rtol: float
    small_value: float
    small_atol: float
    mantissa_bits: int
    min_exponent: int
    ulp_limit: float


DTYPE_RULES: dict[str, DtypeRule] = {
    "float64": DtypeRule(2**-40, 2**-40, 2**-60, 52, -1022, 32),
    "float32": DtypeRule(2**-14, 2**-20, 2**-30, 23, -126, 32),
    "float16": DtypeRule(2**-10, 2**-10, 2**-16, 10, -14, 1),
    "bfloat16": DtypeRule(2**-7, 2**-10, 1e-16, 7, -126, 1),
    "float8_e4m3fn": DtypeRule(2**-3, 2**-6, 2**-9, 3, -6, 1),
    "float8_e5m2": DtypeRule(2**-2, 2**-14, 2**-16, 2, -14, 1),
}
SCALE_FLOOR = 1 / 16
DEFAULT_MIN_COSINE = 0.99
DEFAULT_MAX_ABS = 1e-4


@dataclass(frozen=True)
class Judgement:
    """The verdict on one output, with the metrics behind it."""

    passed: bool
    reason: str
    metrics: dict[str, float | None] = field(default_factory=dict)


def rounded_reference(reference: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    if not is_float(reference) and reference.dtype.kind != "f":
        return reference
    if dtype.kind in "biu":
        return np.asarray(reference).astype(dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(reference).astype(dtype)


def _as64(array: np.ndarray) -> np.ndarray:
    return np.asarray(array.astype(np.float64) if array.dtype.kind not in "biu" else array, float)


def dtype_name(array: np.ndarray) -> str:
    for name, dtype in NUMPY_DTYPES.items():
        if array.dtype == dtype:
            return name
    return str(array.dtype)


def measure(
    device: np.ndarray, reference: np.ndarray, dtype: str | None = None
) -> dict[str, float | None]:
    """Every metric of a details row; ``dtype`` overrides the device's for the dtype rules."""
    d, r = _as64(device), _as64(rounded_reference(reference, device.dtype))
    if d.shape != r.shape and np.squeeze(d).shape == np.squeeze(r).shape:
        d, r = np.squeeze(d), np.squeeze(r)
    base = tensor_metrics(d, r)
    finite = r[np.isfinite(r)] if r.size else r
    out: dict[str, float | None] = {
        "cosine": base.cosine,
        "max_abs_err": base.max_abs_err,
        "max_rel_err": base.max_rel_err,
        "rel_l2_err": base.rel_l2_err,
        "ref_abs_max": float(np.max(np.abs(finite))) if finite.size else None,
    }
    if d.shape != r.shape or d.size == 0:
        return out
    mismatched = float(np.sum(_nonfinite_mismatch(d, r)))
    out["nonfinite_mismatch"] = mismatched
    out["inf_nan_err_ratio"] = mismatched / d.size
    if not is_float(device):
        out["binary_mismatch_rate"] = float(np.mean(d != r))
        return out
    out |= _float_metrics(d, r, rule_for(dtype or dtype_name(device)))
    return out


def rule_for(dtype: str) -> DtypeRule:
    return DTYPE_RULES.get(dtype, DTYPE_RULES["float32"])


def _nonfinite_mismatch(d: np.ndarray, r: np.ndarray) -> np.ndarray:
    same = (np.isnan(d) & np.isnan(r)) | (np.isinf(d) & np.isinf(r) & (np.sign(d) == np.sign(r)))
    return (~np.isfinite(d) | ~np.isfinite(r)) & ~same


def _float_metrics(d: np.ndarray, r: np.ndarray, rule: DtypeRule) -> dict[str, float | None]:
    ok = np.isfinite(d) & np.isfinite(r)
    if not ok.any():
        return {}
    d, r = d[ok], r[ok]
    err, mag = np.abs(d - r), np.abs(r)
    small = mag <= rule.small_value
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(mag > 0, err / mag, np.where(err > 0, np.inf, 0.0))
    scale = float(mag.max())
    bound = rule.rtol * (mag + SCALE_FLOOR * scale)
    exponent = np.maximum(np.floor(np.log2(np.where(mag > 0, mag, 1.0))), rule.min_exponent)
    ulp = err * np.exp2(rule.mantissa_bits - exponent)
    normal = rel[~small]
    return {
        "ratio_rel_lt_1e-2": float(np.mean(rel < 1e-2)),
        "ratio_rel_lt_1e-3": float(np.mean(rel < 1e-3)),
        "ratio_rel_lt_1e-4": float(np.mean(rel < 1e-4)),
        "error_balance": float(abs(int(np.sum(d > r)) - int(np.sum(d < r))) / d.size),
        "rmse": float(np.sqrt(np.mean((d - r) ** 2))),
        "small_value_err_ratio": float(np.mean(err[small] > rule.small_atol))
        if small.any()
        else 0.0,
        "max_rel_err_normal": float(normal.max()) if normal.size else 0.0,
        "mean_rel_err_normal": float(normal.mean()) if normal.size else 0.0,
        "rel_err_ratio": float(np.mean(err > bound)),
        "abs_err_ratio": float(np.mean(err[small] > rule.small_atol)) if small.any() else 0.0,
        "ulp_max": float(ulp.max()),
        "ulp_mean": float(ulp.mean()),
        "ulp_over_limit_ratio": float(np.mean(ulp > rule.ulp_limit)),
    }


def _common_failure(device: np.ndarray, reference: np.ndarray, m: dict[str, float | None]) -> str:
    """Failures both standards share: shape, NaN/Inf placement, integer mismatch."""
    ref_shape = np.asarray(reference).shape
    if device.shape != ref_shape and np.squeeze(device).shape != np.squeeze(reference).shape:
        return f"shape {device.shape} differs from the reference's {ref_shape}"
    if m.get("nonfinite_mismatch"):
        n_dev = int(np.sum(~np.isfinite(_as64(device))))
        return (
            f"NaN/Inf mismatch at {int(_num(m.get('nonfinite_mismatch'), 0))} positions "
            f"(device has {n_dev} non-finite values where the reference differs)"
        )
    if m.get("binary_mismatch_rate"):
        return f"{m['binary_mismatch_rate']:.3%} of integer/bool elements differ"
    return ""


class Standard:
    """Base: the shared failures, then the standard's own rule for float outputs."""

    name = "base"

    def judge(
        self, device: np.ndarray, reference: np.ndarray, dtype: str | None = None
    ) -> Judgement:
        """``dtype``: the precision the API computed in when wider than its output's
        (autocast backward writes bf16-computed gradients into fp32 tensors)."""
        m = measure(device, reference, dtype)
        failure = _common_failure(device, reference, m)
        if failure:
            return Judgement(False, failure, m)
        if not is_float(device) or device.size == 0:
            return Judgement(True, "", m)
        return self._judge_float(dtype or dtype_name(device), m)

    def _judge_float(self, dtype: str, m: dict[str, float | None]) -> Judgement:
        raise NotImplementedError


class DefaultStandard(Standard):
    """cosine > 0.99 and max abs error < 1e-4 against the float64 reference."""

    name = "default"

    def _judge_float(self, dtype: str, m: dict[str, float | None]) -> Judgement:
        cosine, max_abs = _num(m.get("cosine")), _num(m.get("max_abs_err"))
        problems = []
        if not cosine > DEFAULT_MIN_COSINE:
            problems.append(f"cosine {cosine:.6f} (more than {DEFAULT_MIN_COSINE} required)")
        if not max_abs < DEFAULT_MAX_ABS:
            problems.append(f"max abs error {max_abs:.3e} (under {DEFAULT_MAX_ABS:g} allowed)")
        if problems:  # the amounts a person needs to judge it, and the standard by dtype
            rel, size = _num(m.get("rel_l2_err")), _num(m.get("ref_abs_max"))
            problems.append(
                f"relative L2 error {rel:.3g}, cosine {cosine:.6f}, largest |reference| "
                f"{size:.4g}: the default standard's bound is absolute; --acc-standard=dtype "
                f"judges by {dtype}'s relative tolerance (rtol {rule_for(dtype).rtol:.3g})")
        return Judgement(not problems, "; ".join(problems), m)


class DtypeStandard(Standard):
    """Per-dtype relative tolerance with an error-ratio rule and a bias rule (module doc)."""

    name = "dtype"

    def _judge_float(self, dtype: str, m: dict[str, float | None]) -> Judgement:
        rtol = rule_for(dtype).rtol
        problems = []
        ratio = _num(m.get("rel_err_ratio"), 0.0)
        if ratio > 0:
            problems.append(
                f"{ratio:.3%} of elements exceed rtol={rtol:.3g} ({dtype}) relative error"
            )
        rel_l2 = _num(m.get("rel_l2_err"))
        if not rel_l2 <= rtol:
            problems.append(f"relative L2 error {rel_l2:.3e} > rtol={rtol:.3g} ({dtype})")
        return Judgement(not problems, "; ".join(problems), m)


def _num(value: float | None, default: float = math.nan) -> float:
    return default if value is None else float(value)


STANDARDS: dict[str, Standard] = {"default": DefaultStandard(), "dtype": DtypeStandard()}


def get_standard(name: str) -> Standard:
    if name not in STANDARDS:
        raise ValueError(f"unknown precheck standard {name!r}: use one of {sorted(STANDARDS)}")
    return STANDARDS[name]
