"""Tensor-pair metrics in float64, with msprobe's names, plus statistics and md5 deltas.

Edge cases (all documented in the README, section "Metrics"):

* shapes: compared after squeezing size-1 dims (as msprobe does); a real shape mismatch
  gives ``status="shape_mismatch"`` and no numbers.
* empty tensors: equal when both are empty (``status="empty"``).
* NaN/Inf: where the NaN/+Inf/-Inf positions agree on both sides they are zeroed and the
  rest is compared (msprobe's rule); where they disagree, ``status="nonfinite_mismatch"``.
* zeros: two (near) zero vectors have cosine 1.0 and relative error 0; a zero bench
  element makes that element's relative error 0 if the NPU element is also 0, else inf.
* dtype: metrics are computed in float64 whatever the dtypes; a dtype difference is
  reported by the caller, not hidden.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pytest_accuracy.dumps.model import Stats

_TINY = 2.2e-16


@dataclass(frozen=True)
class TensorMetrics:
    """Element-wise comparison of one NPU tensor with its bench counterpart."""

    status: str  # ok | empty | shape_mismatch | nonfinite_mismatch
    cosine: float | None = None
    euc_dist: float | None = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    one_thousandth_err_ratio: float | None = None
    five_thousandths_err_ratio: float | None = None
    rel_l2_err: float | None = None  # ||n - b|| / ||b||: scale-free, robust to near-zero elements
    worst_index: tuple[int, ...] | None = None
    nonfinite_npu: int = 0
    nonfinite_bench: int = 0


def tensor_metrics(npu: np.ndarray, bench: np.ndarray) -> TensorMetrics:
    """Compare two arrays in float64 (bf16 and other ml_dtypes are upcast first)."""
    if npu.shape != bench.shape:
        npu, bench = np.squeeze(npu), np.squeeze(bench)  # [2,8,1] vs [2,8], as msprobe does
        if npu.shape != bench.shape:
            return TensorMetrics(status="shape_mismatch")
    if npu.size == 0:
        return TensorMetrics(status="empty")
    acc = _Accumulator()
    n_flat, b_flat = npu.reshape(-1), bench.reshape(-1)
    for start in range(0, n_flat.size, _CHUNK):
        n = _as_float64(n_flat[start : start + _CHUNK])
        b = _as_float64(b_flat[start : start + _CHUNK])
        if not acc.add(n, b, start):
            return _with_nonfinite(_as_float64(n_flat), _as_float64(b_flat), npu.shape)
    return acc.result(npu.shape, (0, 0))


# Elements per chunk: the ~12 passes over a chunk then run from cache rather than memory,
# and no float64 copy of a whole (possibly multi-GB) tensor is ever made.
_CHUNK = 1 << 16


class _Accumulator:
    """Running sums, maxima and counts over chunks, in float64."""

    def __init__(self) -> None:
        self.nn = self.bb = self.nb = self.dd = 0.0
        self.max_abs, self.worst, self.max_rel = -1.0, 0, 0.0
        self.below = [0, 0]  # elements with relative error < 1e-3, < 5e-3
        self.size = 0

    def add(self, n: np.ndarray, b: np.ndarray, offset: int) -> bool:
        """Fold one chunk in; False when it holds NaN/Inf (the caller then falls back)."""
        nn, bb = _dot(n, n), _dot(b, b)
        if not (math.isfinite(nn) and math.isfinite(bb)):
            return False
        d = n - b
        self.nn, self.bb = self.nn + nn, self.bb + bb
        self.nb += _dot(n, b)
        self.dd += _dot(d, d)
        np.abs(d, out=d)
        i = int(np.argmax(d))
        if d[i] > self.max_abs:
            self.max_abs, self.worst = float(d[i]), offset + i
        abs_b = np.abs(b)
        zero_b = abs_b == 0
        # rel < t  <=>  |d| < t*|b| where b != 0; where b == 0, rel is 0 (d == 0) or inf.
        exact_zero = int(np.count_nonzero(zero_b & (d == 0)))
        for k, t in enumerate((1e-3, 5e-3)):
            self.below[k] += int(np.count_nonzero(d < t * abs_b)) + exact_zero
        if bool(np.any(d[zero_b] > 0)):
            self.max_rel = math.inf
        elif self.max_rel < math.inf:
            rel = np.divide(d, abs_b, out=np.zeros_like(d), where=~zero_b)
            self.max_rel = max(self.max_rel, float(rel.max()))
        self.size += d.size
        return True

    def result(self, shape: tuple[int, ...], counts: tuple[int, int]) -> TensorMetrics:
        norm_n, norm_b, dist = math.sqrt(self.nn), math.sqrt(self.bb), math.sqrt(self.dd)
        return TensorMetrics(
            status="ok",
            cosine=_cosine(self.nb, norm_n, norm_b),
            euc_dist=dist,
            max_abs_err=self.max_abs,
            max_rel_err=self.max_rel,
            one_thousandth_err_ratio=self.below[0] / self.size,
            five_thousandths_err_ratio=self.below[1] / self.size,
            rel_l2_err=(dist / norm_b) if norm_b > _TINY else (0.0 if dist <= _TINY else math.inf),
            worst_index=tuple(int(i) for i in np.unravel_index(self.worst, shape)),
            nonfinite_npu=counts[0],
            nonfinite_bench=counts[1],
        )


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    # Not np.dot: OpenBLAS threads each dot of a chunk and, on a busy CI box or beside our
    # read-ahead threads, that oversubscription made a compare 7x slower (benchmarks/).
    return float(np.multiply(a, b).sum())


def _with_nonfinite(n: np.ndarray, b: np.ndarray, shape: tuple[int, ...]) -> TensorMetrics:
    """NaN/Inf at identical positions are zeroed and the rest compared; else a mismatch."""
    n_bad, b_bad = ~np.isfinite(n), ~np.isfinite(b)
    counts = (int(n_bad.sum()), int(b_bad.sum()))
    same = np.array_equal(n_bad, b_bad) and np.array_equal(n[n_bad], b[b_bad], equal_nan=True)
    if not same:
        return TensorMetrics(
            "nonfinite_mismatch", nonfinite_npu=counts[0], nonfinite_bench=counts[1]
        )
    acc = _Accumulator()
    acc.add(np.where(n_bad, 0.0, n), np.where(b_bad, 0.0, b), 0)
    return acc.result(shape, counts)


def _cosine(dot: float, norm_n: float, norm_b: float) -> float:
    if norm_n <= _TINY and norm_b <= _TINY:
        return 1.0
    if norm_n <= _TINY or norm_b <= _TINY:
        return 0.0
    return max(-1.0, min(1.0, dot / (norm_n * norm_b)))


def _as_float64(array: np.ndarray) -> np.ndarray:
    if array.dtype == np.float64:
        return np.asarray(array)
    if array.dtype.kind in "biuf":
        return np.asarray(array, dtype=np.float64)
    # ml_dtypes (bfloat16, float8) are kind 'V'; float32 holds them exactly.
    return np.asarray(array.astype(np.float32), dtype=np.float64)


@dataclass(frozen=True)
class StatsMetrics:
    """Differences of the recorded statistics (NPU minus bench), for statistics dumps.

    Relative errors are fractions (msprobe prints percentages).  ``range_rel_err``
    divides the max/min/mean deltas by the bench tensor's magnitude
    ``max(|max|, |min|)`` so near-zero means or minima do not explode.
    """

    status: str  # ok | missing_stats
    max_diff: float | None = None
    min_diff: float | None = None
    mean_diff: float | None = None
    l2norm_diff: float | None = None
    max_relative_err: float | None = None
    min_relative_err: float | None = None
    mean_relative_err: float | None = None
    norm_relative_err: float | None = None
    range_rel_err: float | None = None
    nonfinite_npu: int = 0
    nonfinite_bench: int = 0


def stats_metrics(npu: Stats, bench: Stats) -> StatsMetrics:
    """Compare two tensors by their recorded Max/Min/Mean/Norm."""
    pairs = {k: (getattr(npu, k), getattr(bench, k)) for k in ("max", "min", "mean", "norm")}
    nonfinite = {
        "nonfinite_npu": sum(v is not None and not math.isfinite(v) for v, _ in pairs.values()),
        "nonfinite_bench": sum(v is not None and not math.isfinite(v) for _, v in pairs.values()),
    }
    if pairs["max"][0] is None or pairs["max"][1] is None:
        return StatsMetrics(status="missing_stats", **nonfinite)
    diffs = {k: (a - b if a is not None and b is not None else None) for k, (a, b) in pairs.items()}
    rels = {k: _rel(d, pairs[k][1]) for k, d in diffs.items()}
    scale = max(abs(pairs["max"][1] or 0.0), abs(pairs["min"][1] or 0.0))
    ranged = [abs(d) for k, d in diffs.items() if k != "norm" and d is not None]
    range_rel = _rel(max(ranged), scale) if ranged else None
    return StatsMetrics(
        status="ok",
        max_diff=diffs["max"],
        min_diff=diffs["min"],
        mean_diff=diffs["mean"],
        l2norm_diff=diffs["norm"],
        max_relative_err=rels["max"],
        min_relative_err=rels["min"],
        mean_relative_err=rels["mean"],
        norm_relative_err=rels["norm"],
        range_rel_err=range_rel,
        **nonfinite,
    )


def _rel(diff: float | None, ref: float | None) -> float | None:
    if diff is None or ref is None:
        return None
    if math.isnan(diff):
        return math.nan
    if diff == 0:
        return 0.0
    return abs(diff) / abs(ref) if ref != 0 else math.inf
