"""One pass over a tensor pair: every metric's running value, compiled or numpy (the referee)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from types import ModuleType

import numpy as np

from pytest_accuracy.switches import env_switch

#: Set (not "0") to fold with numpy even where the compiled kernel is built.
PURE_ENV = "PYTEST_ACCURACY_PURE_METRICS"
# Sums go into LANES running lanes (element i into lane i % LANES) that restart every CHUNK
# elements: a fixed order both paths follow, so their floats agree to the bit.  Numpy's
# axis-0 sum of a (CHUNK/LANES, LANES) block adds row after row, which is that order.
LANES = 8
CHUNK = 1 << 16  # elements: a chunk's ~10 float64 temporaries stay in cache (numpy path)

_compiled: ModuleType | None
try:  # built at install time where a C compiler was found
    from pytest_accuracy.compare import _metrics as _compiled
except ImportError:  # pragma: no cover - depends on the install
    _compiled = None

@cache
def _kinds() -> dict[np.dtype, int]:
    """numpy dtype -> the kernel's element kind (_metrics.c: K_F64 ...); others fold in numpy.
    Made at the first fold: ml_dtypes costs 0.06 s to import, and a statistics run (a gate's)
    never folds a tensor."""
    import ml_dtypes

    return {
        np.dtype(name): i
        for i, name in enumerate(
            ("float64", "float32", "float16", ml_dtypes.bfloat16, "int8", "int16", "int32",
             "int64", "uint8", "uint16", "uint32", "uint64", "bool")
        )
    }


@dataclass(frozen=True)
class Folded:
    """What one pass over a pair yields; metrics.py derives every metric from it."""

    nn: float
    bb: float
    nb: float
    dd: float
    max_abs: float
    worst: int  # flat index of the first element with the largest |npu - bench|
    max_rel: float
    below: tuple[int, int]  # elements with |d| < 1e-3*|b|, < 5e-3*|b| (or d == 0)


def kernel() -> ModuleType | None:
    """The compiled kernel unless ``PYTEST_ACCURACY_PURE_METRICS`` is set (checked per call)."""
    return None if env_switch(PURE_ENV) else _compiled


def fold(npu: np.ndarray, bench: np.ndarray, *, baseline: bool = False) -> Folded | None:
    """Fold two same-size arrays; None when either holds NaN/Inf.

    ``baseline`` makes the kernel take its baseline-ISA loop even where AVX2 is there.
    """
    compiled = kernel()
    known = _kinds()
    kinds = (known.get(npu.dtype), known.get(bench.dtype))
    if compiled is None or kinds[0] is None or kinds[1] is None:
        return fold_numpy(npu, bench)
    n, b = _raw(npu), _raw(bench)
    out = compiled.fold(n, kinds[0], b, kinds[1], npu.size, int(baseline))
    if out is None:
        return None
    lanes, max_abs, worst, max_rel, below3, below5 = out
    nn, bb, nb, dd = (_combine(lanes[k * LANES : (k + 1) * LANES]) for k in range(4))
    return Folded(nn, bb, nb, dd, max_abs, worst, max_rel, (below3, below5))


def _raw(array: np.ndarray) -> np.ndarray:
    # Bytes of a C-contiguous copy: the buffer protocol knows no bfloat16.
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8)


def _combine(lanes: list[float] | tuple[float, ...]) -> float:
    a = [float(x) for x in lanes]
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]))


def fold_numpy(npu: np.ndarray, bench: np.ndarray) -> Folded | None:
    """The referee: the kernel's arithmetic with numpy, chunk by chunk."""
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):  # as IEEE (and C) do
        return _fold_chunks(npu, bench)


def _fold_chunks(npu: np.ndarray, bench: np.ndarray) -> Folded | None:
    n_flat, b_flat = npu.reshape(-1), bench.reshape(-1)
    totals = np.zeros((4, LANES))
    max_abs, worst, max_rel, below = -1.0, 0, 0.0, [0, 0]
    for start in range(0, n_flat.size, CHUNK):
        n = as_float64(n_flat[start : start + CHUNK])
        b = as_float64(b_flat[start : start + CHUNK])
        if not (np.isfinite(n).all() and np.isfinite(b).all()):
            return None
        d = n - b
        for k, (x, y) in enumerate(((n, n), (b, b), (n, b), (d, d))):
            totals[k] += _lane_sums(x * y)
        ad, ab = np.abs(d), np.abs(b)
        i = int(np.argmax(ad))
        if ad[i] > max_abs:
            max_abs, worst = float(ad[i]), start + i
        exact = ad == 0
        for k, t in enumerate((1e-3, 5e-3)):
            below[k] += int(np.count_nonzero((ad < t * ab) | exact))
        max_rel = _max_rel(ad, ab, max_rel)
    nn, bb, nb, dd = (_combine(totals[k].tolist()) for k in range(4))
    return Folded(nn, bb, nb, dd, max_abs, worst, max_rel, (below[0], below[1]))


def _lane_sums(products: np.ndarray) -> np.ndarray:
    pad = -products.size % LANES
    if pad:  # adding +0.0 to a lane changes nothing
        products = np.concatenate((products, np.zeros(pad)))
    return products.reshape(-1, LANES).sum(axis=0)


def _max_rel(ad: np.ndarray, ab: np.ndarray, so_far: float) -> float:
    if so_far == math.inf:
        return so_far
    zero = ab == 0
    if bool(np.any(ad[zero] > 0)):
        return math.inf
    nonzero = ~zero
    if not nonzero.any():
        return so_far
    return max(so_far, float((ad[nonzero] / ab[nonzero]).max()))


def as_float64(array: np.ndarray) -> np.ndarray:
    """Exact widening to float64 (ml_dtypes such as bfloat16 go through float32)."""
    if array.dtype == np.float64:
        return np.asarray(array)
    if array.dtype.kind in "biuf":
        return np.asarray(array, dtype=np.float64)
    # ml_dtypes (bfloat16, float8) are kind 'V'; float32 holds them exactly.
    return np.asarray(array.astype(np.float32), dtype=np.float64)
