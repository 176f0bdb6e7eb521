"""Call inputs: the dumped tensors (task tensor), or tensors generated from recorded statistics."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from pytest_accuracy.dumps.model import TensorRecord
from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.precheck.args import Unsupported

NUMPY_DTYPES: dict[str, np.dtype[Any]] = {
    **{
        n: np.dtype(n)
        for n in ("float64", "float32", "float16", "int64", "int32", "int16", "int8", "uint8")
    },
    "bool": np.dtype(bool),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float8_e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),
    "float8_e5m2": np.dtype(ml_dtypes.float8_e5m2),
}


def numpy_dtype(name: str) -> np.dtype[Any]:
    if name not in NUMPY_DTYPES:
        raise Unsupported(f"dtype {name!r} is not supported by the precheck")
    return NUMPY_DTYPES[name]


def is_float(array: np.ndarray) -> bool:
    """True for every floating format, ml_dtypes ones (kind 'V') included."""
    return array.dtype.kind == "f" or array.dtype in (
        NUMPY_DTYPES["bfloat16"],
        NUMPY_DTYPES["float8_e4m3fn"],
        NUMPY_DTYPES["float8_e5m2"],
    )


def case_seed(node: str) -> int:
    """A seed from the node name: the same in every process, unlike ``hash()``."""
    return int.from_bytes(hashlib.sha256(node.encode("utf-8")).digest()[:4], "big")


@dataclass(frozen=True)
class InputSource:
    """Where a case's input values come from."""

    generated: bool
    seed: int | None = None

    def describe(self) -> str:
        if self.generated:
            return f"generated from statistics, seed {self.seed}"
        return "dumped inputs"


def source_for(mode: str, forward_node: str) -> InputSource:
    if mode == "tensor":
        return InputSource(generated=False)
    return InputSource(generated=True, seed=case_seed(forward_node))


def tensor_value(record: TensorRecord, source: InputSource, key: tuple[int, ...]) -> np.ndarray:
    """One tensor in its dumped dtype: loaded, or generated (``key`` picks the random stream)."""
    if not source.generated:
        return load_checked(record)
    rng = np.random.default_rng([source.seed or 0, *key])
    return generate(record, rng)


def load_checked(record: TensorRecord) -> np.ndarray:
    """The dumped data, checked against the shape dump.json records for it."""
    array = record.load()
    if tuple(array.shape) != tuple(record.shape):
        where = record.data_name or record.path
        raise AccuracyInputError(
            record.dump_json or where,
            f"{where}: shape {tuple(array.shape)} does not match dump.json's {record.shape}",
        )
    return array


def generate(record: TensorRecord, rng: np.random.Generator) -> np.ndarray:
    """Random values in the recorded dtype and shape spanning the recorded [Min, Max].

    As msprobe does: uniform between the bounds, with the first and last element set
    to Min and Max so the extremes are exercised.  Mean and Norm are not matched.
    """
    dtype = numpy_dtype(record.dtype)
    count = record.numel
    if count == 0:
        return np.zeros(record.shape, dtype=dtype)
    low, high = record.stats.min, record.stats.max
    if low is None or high is None:
        raise Unsupported(f"{record.path} has no recorded Max/Min to generate values from")
    if dtype == np.dtype(bool):
        flat = np.asarray(rng.random(count) < 0.5) if high != low else np.full(count, bool(high))
    elif dtype.kind in "iu" and not (math.isfinite(low) and math.isfinite(high)):
        raise Unsupported(f"{record.path}: integer tensor with Min {low} / Max {high}")
    elif dtype.kind in "iu":
        flat = rng.integers(int(low), int(high) + 1, size=count).astype(np.float64)
    elif math.isnan(low) or math.isnan(high):
        return np.full(record.shape, np.nan).astype(dtype)
    else:
        flat = _uniform(low, high, count, dtype, rng)
    flat[0], flat[-1] = low, high
    return flat.astype(dtype).reshape(record.shape)


def _uniform(
    low: float, high: float, count: int, dtype: np.dtype[Any], rng: np.random.Generator
) -> np.ndarray:
    limit = float(ml_dtypes.finfo(dtype).max) if dtype.kind != "f" else float(np.finfo(dtype).max)
    lo = min(max(low, -limit), limit)
    hi = min(max(high, -limit), limit)
    u = rng.random(count)
    # lo*(1-u) + hi*u cannot overflow where hi - lo would (bounds near the dtype's max).
    return np.asarray(lo * (1.0 - u) + hi * u)


def upcast(array: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    """Floating data in ``dtype`` (the reference's float64); integers and bools unchanged."""
    return np.asarray(array, dtype=dtype) if is_float(array) else np.asarray(array)
