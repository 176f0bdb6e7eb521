"""Tensor-pair metrics in float64, with msprobe's names, plus statistics and md5 deltas.

Edge cases (all documented in the README, section "Metrics"):

* shapes: compared after squeezing size-1 dims (as msprobe does); a real shape mismatch
  gives ``status="shape_mismatch"`` and no numbers.
* empty tensors: equal when both are empty (``status="empty"``).
* NaN/Inf: where the NaN/+Inf/-Inf positions agree on both sides they are zeroed and the
  rest is compared (msprobe's rule); where they disagree, ``status="nonfinite_mismatch"``.
* zeros: two (near) zero vectors have cosine 1.0 and relative error 0; a zero bench
  element makes that element's relative error 0 if the NPU element is also 0, else inf.
* dtype: metrics are computed in float64 whatever the dtypes (fold.py: one pass, compiled
  where built, numpy as referee); a dtype difference is reported by the caller, not hidden.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pytest_accuracy.compare.fold import Folded, as_float64, fold
from pytest_accuracy.dumps.model import Stats

_TINY = 2.2e-16


@dataclass(frozen=True, slots=True)
class TensorMetrics:
    """Element-wise comparison of one NPU tensor with its bench counterpart."""

    status: str  # ok | empty | shape_mismatch | nonfinite_mismatch | no_finite
    cosine: float | None = None
    euc_dist: float | None = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    one_thousandth_err_ratio: float | None = None
    five_thousandths_err_ratio: float | None = None
    rel_l2_err: float | None = None  # ||n - b|| / ||b||: scale-free, robust to near-zero elements
    norm_npu: float | None = None  # L2 norms of the finite values, to check each record's Norm
    norm_bench: float | None = None
    worst_index: tuple[int, ...] | None = None
    nonfinite_npu: int = 0
    nonfinite_bench: int = 0


def tensor_metrics(npu: np.ndarray, bench: np.ndarray) -> TensorMetrics:
    """Compare two arrays in float64 (bf16 and other ml_dtypes are widened exactly)."""
    if npu.shape != bench.shape:
        npu, bench = np.squeeze(npu), np.squeeze(bench)  # [2,8,1] vs [2,8], as msprobe does
        if npu.shape != bench.shape:
            return TensorMetrics(status="shape_mismatch")
    if npu.size == 0:
        return TensorMetrics(status="empty")
    folded = fold(npu, bench)  # one pass, no float64 copy of either tensor
    if folded is None:
        return _with_nonfinite(as_float64(npu.reshape(-1)), as_float64(bench.reshape(-1)),
                               npu.shape)
    return _result(folded, npu.shape, npu.size, (0, 0))


def _result(
    f: Folded, shape: tuple[int, ...], size: int, counts: tuple[int, int]
) -> TensorMetrics:
    norm_n, norm_b, dist = math.sqrt(f.nn), math.sqrt(f.bb), math.sqrt(f.dd)
    return TensorMetrics(
        status="ok",
        cosine=_cosine(f.nb, norm_n, norm_b),
        euc_dist=dist,
        max_abs_err=f.max_abs,
        max_rel_err=f.max_rel,
        one_thousandth_err_ratio=f.below[0] / size,
        five_thousandths_err_ratio=f.below[1] / size,
        rel_l2_err=(dist / norm_b) if norm_b > _TINY else (0.0 if dist <= _TINY else math.inf),
        worst_index=tuple(int(i) for i in np.unravel_index(f.worst, shape)),
        nonfinite_npu=counts[0],
        nonfinite_bench=counts[1],
        norm_npu=norm_n,
        norm_bench=norm_b,
    )


def _with_nonfinite(n: np.ndarray, b: np.ndarray, shape: tuple[int, ...]) -> TensorMetrics:
    """NaN/Inf at identical positions are zeroed and the rest compared; else a mismatch."""
    n_bad, b_bad = ~np.isfinite(n), ~np.isfinite(b)
    counts = (int(n_bad.sum()), int(b_bad.sum()))
    same = np.array_equal(n_bad, b_bad) and np.array_equal(n[n_bad], b[b_bad], equal_nan=True)
    if not same:
        return TensorMetrics(
            "nonfinite_mismatch", nonfinite_npu=counts[0], nonfinite_bench=counts[1]
        )
    if counts[0] == n.size:  # NaN/Inf in every place on both sides: nothing to compare
        return TensorMetrics("no_finite", nonfinite_npu=counts[0], nonfinite_bench=counts[1])
    folded = fold(np.where(n_bad, 0.0, n), np.where(b_bad, 0.0, b))
    assert folded is not None  # every NaN/Inf was zeroed
    return _result(folded, shape, n.size, counts)


def _cosine(dot: float, norm_n: float, norm_b: float) -> float:
    if norm_n <= _TINY and norm_b <= _TINY:
        return 1.0
    if norm_n <= _TINY or norm_b <= _TINY:
        return 0.0
    return max(-1.0, min(1.0, dot / (norm_n * norm_b)))


@dataclass(slots=True)  # ~5 per node of a big statistics dump; frozen took 2.5 us to make
class StatsMetrics:
    """Differences of the recorded statistics (NPU minus bench), for statistics dumps.

    Relative errors are fractions (msprobe prints percentages).  ``range_rel_err``
    divides the max/min/mean deltas by the bench tensor's magnitude
    ``max(|max|, |min|)`` so near-zero means or minima do not explode.
    """

    status: str  # ok | missing_stats
    finite_pairs: int = 0  # statistics recorded finite on both sides
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
    # Min -inf on one side and <= -1e4 on the other, Max finite on both: a mask written
    # two ways (another codebase), not an overflow
    masked_otherwise: bool = False


def stats_metrics(npu: Stats, bench: Stats) -> StatsMetrics:
    """Compare two tensors by their recorded Max/Min/Mean/Norm.

    Written out statistic by statistic, no dicts: a 100k-node dump compares ~500k pairs,
    twice (the metadata scan and the node's compare)."""
    n_max, n_min, n_mean, n_norm = npu.max, npu.min, npu.mean, npu.norm
    b_max, b_min, b_mean, b_norm = bench.max, bench.min, bench.mean, bench.norm
    try:  # one test for the common case: all eight recorded and finite (a sum that overflows
        # or meets a NaN/Inf, or a None, takes the general path below, which is exact always)
        all_finite = math.isfinite(n_max + n_min + n_mean + n_norm  # type: ignore[operator]
                                   + b_max + b_min + b_mean + b_norm)
    except TypeError:
        all_finite = False
    if all_finite:
        return _finite_metrics(n_max, n_min, n_mean, n_norm,  # type: ignore[arg-type]
                               b_max, b_min, b_mean, b_norm)  # type: ignore[arg-type]
    nonfinite_npu = _nonfinite(n_max) + _nonfinite(n_min) + _nonfinite(n_mean) + _nonfinite(n_norm)
    nonfinite_bench = (_nonfinite(b_max) + _nonfinite(b_min) + _nonfinite(b_mean)
                       + _nonfinite(b_norm))
    # a mask on each side written apart (-inf or another large negative constant): its Min
    # says so; Max, Mean and Norm mix mask and scores, and nothing here can part them
    masked = (n_min is not None and b_min is not None and n_max is not None
              and b_max is not None and math.isfinite(n_max) and math.isfinite(b_max)
              and max(n_min, b_min) <= MASK_VALUE and n_min != b_min
              and (-math.inf in (n_min, b_min) or max(abs(n_min), abs(b_min))
                   > 2 * min(abs(n_min), abs(b_min))))
    if ((n_max is None or b_max is None) and (n_min is None or b_min is None)
            and (n_mean is None or b_mean is None) and (n_norm is None or b_norm is None)):
        return StatsMetrics(status="missing_stats", nonfinite_npu=nonfinite_npu,
                            nonfinite_bench=nonfinite_bench)
    finite = (_both_finite(n_max, b_max) + _both_finite(n_min, b_min)
              + _both_finite(n_mean, b_mean) + _both_finite(n_norm, b_norm))
    d_max, d_min = _stat_diff(n_max, b_max), _stat_diff(n_min, b_min)
    d_mean, d_norm = _stat_diff(n_mean, b_mean), _stat_diff(n_norm, b_norm)
    # the range that scales Max/Min/Mean: the finite ends only (a masked -inf Min must not
    # make every other difference relative to infinity); without ends, the mean's size
    ends = [abs(v) for v in (b_max, b_min) if v is not None and math.isfinite(v)]
    scale = max(ends, default=abs(b_mean) if b_mean is not None and math.isfinite(b_mean)
                else 0.0)
    ranged = [abs(d) for d in (d_max, d_min, d_mean) if d is not None]
    return StatsMetrics(
        status="ok",
        max_diff=d_max,
        min_diff=d_min,
        mean_diff=d_mean,
        l2norm_diff=d_norm,
        max_relative_err=_rel(d_max, b_max),
        min_relative_err=_rel(d_min, b_min),
        mean_relative_err=_rel(d_mean, b_mean),
        norm_relative_err=_rel(d_norm, b_norm),
        range_rel_err=_rel(max(ranged), scale) if ranged else None,
        finite_pairs=finite,
        nonfinite_npu=nonfinite_npu,
        nonfinite_bench=nonfinite_bench,
        masked_otherwise=masked,
    )


def _finite_metrics(n_max: float, n_min: float, n_mean: float, n_norm: float,
                    b_max: float, b_min: float, b_mean: float, b_norm: float) -> StatsMetrics:
    """``stats_metrics`` where all eight statistics are finite: the same operations in the
    same order, without the tests that only NaN, Inf or None need (no statistic is
    non-finite, every one is paired, the range's ends are both the bench's Max and Min; a
    difference of two finite values is never NaN, so ``_rel`` is written out without that
    test; both Mins at most MASK_VALUE is their max at most it)."""
    d_max, d_min, d_mean, d_norm = n_max - b_max, n_min - b_min, n_mean - b_mean, n_norm - b_norm
    a_max, a_min, a_mean = abs(d_max), abs(d_min), abs(d_mean)
    s_max, s_min = abs(b_max), abs(b_min)
    masked = (n_min <= MASK_VALUE and b_min <= MASK_VALUE and n_min != b_min
              and max(abs(n_min), s_min) > 2 * min(abs(n_min), s_min))
    inf = math.inf
    ranged = max(a_max, a_min, a_mean)
    return StatsMetrics(
        "ok", 4, d_max, d_min, d_mean, d_norm,
        0.0 if d_max == 0 else (a_max / s_max if b_max != 0 else inf),
        0.0 if d_min == 0 else (a_min / s_min if b_min != 0 else inf),
        0.0 if d_mean == 0 else (a_mean / abs(b_mean) if b_mean != 0 else inf),
        0.0 if d_norm == 0 else (abs(d_norm) / abs(b_norm) if b_norm != 0 else inf),
        0.0 if ranged == 0 else (ranged / scale if (scale := max(s_max, s_min)) != 0 else inf),
        0, 0, masked)


# A mask written as a large negative number where another codebase writes -inf or another
# one: -1e4 is the smallest fill in use (BERT's extended attention mask, MindFormers' scores
# plus mask * -10000, a little above it): softmax makes them all 0.
MASK_VALUE = -9e3


def negated(stats: Stats) -> Stats | None:
    """The statistics of the negated tensor (None where one is not recorded)."""
    high, low, mean, norm = stats.max, stats.min, stats.mean, stats.norm
    if high is None or low is None or mean is None or norm is None:
        return None
    return Stats(-low, -high, -mean, abs(norm))


def _nonfinite(value: float | None) -> int:
    return 0 if value is None or math.isfinite(value) else 1


def _both_finite(npu: float | None, bench: float | None) -> int:
    return int(npu is not None and bench is not None and math.isfinite(npu)
               and math.isfinite(bench))


def _stat_diff(npu: float | None, bench: float | None) -> float | None:
    """npu - bench; equal infinities (both -inf after a mask) and both NaN differ by 0."""
    if npu is None or bench is None:
        return None
    if math.isfinite(npu) and math.isfinite(bench):
        return npu - bench
    if npu == bench or (math.isnan(npu) and math.isnan(bench)):
        return 0.0
    return math.inf


def _rel(diff: float | None, ref: float | None) -> float | None:
    if diff is None or ref is None:
        return None
    if math.isnan(diff):
        return math.nan
    if diff == 0:
        return 0.0
    return abs(diff) / abs(ref) if ref != 0 else math.inf
