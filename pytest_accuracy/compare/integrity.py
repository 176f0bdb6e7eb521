"""A dump's tensor files held to their own records: the kind of number, the Norm, the md5."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from pytest_accuracy.compare.fold import as_float64
from pytest_accuracy.dumps.model import FLOAT_EPS, TensorRecord, is_float_dtype
from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.pairing.dp import stats_gap

# A recorded Norm and the norm of the file's values, both of the same tensor, differ by the
# rounding of two summations (msprobe sums in the tensor's dtype or float32): this many eps.
_NORM_SLACK = 64.0
_MAX_ELEMENTS = 1 << 24  # a float16 norm is made again, square by square, up to this size


def dtype_kind(dtype: str) -> str:
    """float, complex, bool or int: a pair of two kinds is another computation."""
    if is_float_dtype(dtype):
        return "float"
    return "complex" if dtype.startswith("complex") else "bool" if dtype == "bool" else "int"


def loaded(record: TensorRecord) -> np.ndarray:
    """The record's data, refused when the file holds another kind of number than the
    record says (complex values under a float32 record would be compared as reals)."""
    array = record.load()
    if (array.dtype.kind == "c") != (dtype_kind(record.dtype) == "complex"):
        raise AccuracyInputError(_data_path(record), f"holds {array.dtype} values where its "
                                 f"dump.json record says {record.dtype}")
    return array


def check_norm(record: TensorRecord, norm: float | None, array: np.ndarray) -> None:
    """A tensor file whose values contradict its own record's Norm was not written by that
    run (or was changed since): an input error, never a comparison of someone else's data.
    msprobe records a one-element tensor's Norm as its signed value."""
    recorded = record.stats.norm
    if recorded is not None and record.numel == 1:
        recorded = abs(recorded)
    if norm is None or recorded is None or not math.isfinite(recorded) or record.stats.max is None:
        return
    if not math.isfinite(record.stats.max) or not math.isfinite(record.stats.min or 0.0):
        return  # NaN/Inf: the norm of the finite values is not the recorded one
    eps = FLOAT_EPS.get(record.dtype, 0.0)
    # a device sums the squares in another order than numpy's float64 (sums of 16-bit values
    # in fp32 or wider): a sequential sum's rounding grows as sqrt(numel) ulps, a rewritten or
    # swapped file is off by far more
    summed = max(min(eps, FLOAT_EPS["float32"]), 1e-7)
    slack = max(_NORM_SLACK * max(eps, 1e-7), math.sqrt(record.numel) * summed)
    allowed = max(slack * recorded, 1e-30)
    if abs(norm - recorded) > allowed and not _norm_in_own_dtype(array, record.dtype, recorded,
                                                                 allowed):
        raise AccuracyInputError(_data_path(record), f"holds data whose norm {norm:.6g} "
                                 f"contradicts its dump.json record ({record.path} Norm "
                                 f"{recorded:.6g}): the file is not what that run dumped")


_LOW_PRECISION = ("float16", "bfloat16")


def _norm_in_own_dtype(array: np.ndarray, dtype: str, recorded: float, allowed: float) -> bool:
    """Whether ``recorded`` is the norm with every square rounded to the tensor's own 16-bit
    dtype, as msprobe-MindSpore computes it: squares under the dtype's smallest value become
    0 (a float16 gradient of |g| < 2.4e-4 everywhere records Norm 0)."""
    if dtype not in _LOW_PRECISION or array.size > _MAX_ELEMENTS:
        return False
    from pytest_accuracy.precheck.inputs import numpy_dtype

    squares = np.square(as_float64(array).astype(np.float32)).astype(numpy_dtype(dtype))
    low = math.sqrt(float(squares.astype(np.float64).sum()))
    return abs(low - recorded) <= allowed


def check_md5_agrees(npu: TensorRecord, bench: TensorRecord) -> None:
    if npu.md5 != bench.md5 or not _stats_known(npu) or not _stats_known(bench):
        return
    # the same bytes: Max and Min agree exactly, a Norm summed by another framework's kernel
    # to rounding; far apart, one dump contradicts itself
    if stats_gap(npu.stats.values(), bench.stats.values()) > 1e-3:
        raise AccuracyInputError(npu.dump_json or Path("dump.json"), f"{npu.path}: md5 "
                                 f"{npu.md5} equals the bench's while the statistics of the "
                                 "same records differ: one of the dumps contradicts itself")


def _stats_known(record: TensorRecord) -> bool:
    values = (record.stats.max, record.stats.min, record.stats.norm)
    return all(v is not None and math.isfinite(v) for v in values)


def _data_path(record: TensorRecord) -> Path:
    return (record.data_root / record.data_name if record.data_root and record.data_name
            else record.dump_json or Path("dump.json"))
