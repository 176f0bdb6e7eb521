"""Judge one node: compare its tensors with the bench's and settle its status."""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING

import numpy as np

from pytest_accuracy.compare.criteria import (
    CompareCriteria,
    Judgement,
    Tolerance,
    judge_md5,
    judge_stats,
    judge_tensor,
    less_precise,
)
from pytest_accuracy.compare.fold import as_float64
from pytest_accuracy.compare.integrity import check_md5_agrees, check_norm, dtype_kind, loaded
from pytest_accuracy.compare.metrics import (
    MASK_VALUE,
    StatsMetrics,
    TensorMetrics,
    negated,
    stats_metrics,
    tensor_metrics,
)
from pytest_accuracy.compare.results import NodeResult, TensorComparison
from pytest_accuracy.dumps.model import FLOAT_EPS, Call, TensorRecord

if TYPE_CHECKING:
    from pytest_accuracy.compare.stats_table import StatsTable

# Sorting is the layout-free compare of a tensor pair that fails element by element: bounded.
_LAYOUT_MAX_ELEMENTS = 1 << 24
_COSINE_CELLS = 1 << 27  # column matching by cosine: cols^2 x rows multiply-adds at most
_GREEDY_COLUMNS = 1024  # a greedy one-to-one matching walks up to cols^2 pairs in Python


def outputs_diverge_in_metadata(
    npu: Call, bench: Call, dtype: str, criteria: CompareCriteria,
    table: StatsTable | None = None,
) -> bool:
    """Do the outputs differ by their recorded checksums or statistics (no tensor is read)?"""
    return bool(diverging_in_metadata(npu.output_tensors, bench.output_tensors, dtype, criteria,
                                      table))


def diverging_in_metadata(
    records: list[TensorRecord], bench: list[TensorRecord], dtype: str, criteria: CompareCriteria,
    table: StatsTable | None = None,
) -> list[TensorRecord]:
    """The records that differ from the bench's by checksum or statistics (no tensor is read);
    ``table`` holds statistics already compared."""
    # one bench record (most calls' outputs): matched by its path, without a dict
    only = bench[0] if len(bench) == 1 else None
    by_path = {r.path: r for r in bench} if only is None else {}
    out = []
    for rec in records:
        if only is not None:
            other = only if rec.path == only.path else None
        else:
            other = by_path.get(rec.path)
        if other is None:
            continue
        eff = less_precise(dtype, rec.dtype) if rec.dtype in FLOAT_EPS else rec.dtype
        if rec.md5 is not None and other.md5 is not None:
            same = judge_md5(rec.md5, other.md5).ok
        else:
            tol = criteria.tolerance(eff)
            known = table.agree(rec, other, eff, tol) if table is not None else None
            same = known if known is not None else judge_stats(
                stats_metrics(rec.stats, other.stats), eff, tol).ok
        if not same:
            out.append(rec)
    return out


def settle(result: NodeResult) -> None:
    if result.waiver is not None and result.waiver.known_divergence:
        result.status, result.reason = "waived", f"known divergence: {result.waiver.reason}"
    elif not result.outputs:
        result.status, result.reason = "skip", "no tensor outputs to compare"
    elif result.failing_outputs:
        result.status = "fail"
    elif both := next((b for t in result.outputs if (b := _overflow_on_both(t))), None):
        # equal NaN/Inf on both sides is no evidence that the NPU is right: never a pass
        result.status, result.reason = "skip", (
            f"not compared: NaN/Inf on both sides ({both}), which no tolerance can judge; "
            "both runs overflow here or before (the overflow items, --acc-npu alone, name the "
            "first node that made it)")
    elif not any(t.judgement.checked for t in result.outputs):
        # no pass without evidence: a node whose outputs had nothing comparable is not checked
        why = "; ".join(sorted({f"{t.path}: {t.judgement.detail}" for t in result.outputs}))
        result.status, result.reason = "skip", f"nothing compared ({why})"
    else:
        result.status = "pass"


def _overflow_on_both(t: TensorComparison) -> str | None:
    """'output.0 Max nan vs bench Max nan' when both tensors hold NaN, or Inf in every element
    (Min +inf or Max -inf); an Inf at one end only (a -inf mask) is compared as it stands."""
    ours = _unjudgeable(t.npu)
    theirs = _unjudgeable(t.bench) if ours and t.bench is not None else None
    return f"{t.path} {ours} vs bench {theirs}" if theirs else None


def _unjudgeable(record: TensorRecord) -> str | None:
    high, low = record.stats.max, record.stats.min
    if high is not None and high != high:  # NaN (asked of every output: no calls)
        return f"Max {high}"
    if low is not None and low != low:
        return f"Min {low}"
    if low == math.inf or high == -math.inf:
        return f"Min {low}" if low == math.inf else f"Max {high}"
    return None


def records_of(call: Call) -> list[TensorRecord]:
    return call.input_tensors + call.parameters + call.output_tensors


def compare_all(
    records: list[TensorRecord], bench: Call, dtype: str, criteria: CompareCriteria,
    table: StatsTable | None = None,
) -> list[TensorComparison]:
    if not records:  # nothing to pair (a backward's inputs, most often)
        return []
    by_path = {r.path: r for r in records_of(bench)}
    if bench.direction == "backward":
        by_path.update(_gradients_by_shape(records, by_path))
    out = []
    for rec in records:
        other = by_path.get(rec.path)
        if other is None:
            continue  # e.g. a gradient that only one framework records
        # integer/bool tensors must be equal, so they keep their own dtype
        eff = less_precise(dtype, rec.dtype) if rec.dtype in FLOAT_EPS else rec.dtype
        out.append(compare_tensor(rec, other, eff, criteria, table))
    return out


def _gradients_by_shape(records: list[TensorRecord], by_path: dict[str, TensorRecord]
                        ) -> dict[str, TensorRecord]:
    """A backward's gradients in another order than the bench's (msprobe-MindSpore records a
    primitive's input gradients last input first: Mul(x, r)'s as (dr, dx)): paired by their
    shapes where every shape is one gradient's on both sides, else left by position."""
    mine = [r for r in records if r.role == "output"]
    if len(mine) < 2:  # one gradient (most backwards) pairs by its position
        return {}
    theirs = [r for p, r in by_path.items() if p.startswith("output")]
    shapes = [r.shape for r in mine]
    if (len(set(shapes)) != len(shapes) or len(theirs) != len(mine)
            or sorted(shapes) != sorted(r.shape for r in theirs)
            or all(by_path.get(r.path) is not None and by_path[r.path].shape == r.shape
                   for r in mine)):
        return {}
    of_shape = {r.shape: r for r in theirs}
    return {r.path: of_shape[r.shape] for r in mine}


def compare_tensor(
    npu: TensorRecord, bench: TensorRecord, dtype: str, criteria: CompareCriteria,
    table: StatsTable | None = None,
) -> TensorComparison:
    """Compare one tensor pair with the best evidence both sides have (``table``: statistics
    already compared)."""
    tol = criteria.tolerance(dtype)
    # two float dtypes (most pairs) are of one kind without asking dtype_kind
    kinds = (("float", "float") if npu.dtype in FLOAT_EPS and bench.dtype in FLOAT_EPS
             else (dtype_kind(npu.dtype), dtype_kind(bench.dtype)))
    if kinds[0] != kinds[1]:  # integers where the bench has floats: another computation
        judged = Judgement(False, f"dtype differs: npu {npu.dtype} vs bench {bench.dtype}")
        return TensorComparison(npu.path, npu, bench, dtype, judged, None, "metadata")
    if npu.has_data and bench.has_data:
        arrays = loaded(npu), loaded(bench)
        metrics = tensor_metrics(*arrays)
        check_norm(npu, metrics.norm_npu, arrays[0])
        check_norm(bench, metrics.norm_bench, arrays[1])
        judged = judge_tensor(metrics, dtype, tol)
        if not judged.ok and kinds[0] == "float":  # -inf, or two large negative fills
            masked = _mask_written_otherwise(*arrays, dtype, tol)
            if masked is not None:
                return TensorComparison(npu.path, npu, bench, dtype, masked[0], masked[1],
                                        "tensor")
        if not judged.ok and kinds[0] == "float":
            other = another_layout(*arrays, dtype, tol)
            if other is not None:
                return TensorComparison(npu.path, npu, bench, dtype, other[0], other[1],
                                        "tensor")
        return TensorComparison(npu.path, npu, bench, dtype, judged, metrics, "tensor")
    if npu.shape != bench.shape and _squeezed(npu.shape) != _squeezed(bench.shape) and (
            npu.md5 is not None or npu.numel != bench.numel):
        # statistics carry no layout (Norm, Max, Min, Mean hold under any reshape or
        # permutation): another layout of as many elements is compared on them
        judged = Judgement(False, f"shape differs: npu {list(npu.shape)} vs bench "
                           f"{list(bench.shape)}")
        return TensorComparison(npu.path, npu, bench, dtype, judged, None, "metadata")
    if npu.md5 is not None and bench.md5 is not None:
        check_md5_agrees(npu, bench)
        return TensorComparison(
            npu.path, npu, bench, dtype, judge_md5(npu.md5, bench.md5), None, "md5"
        )
    stats = table.metrics(npu, bench) if table is not None else stats_metrics(npu.stats,
                                                                                bench.stats)
    return TensorComparison(
        npu.path, npu, bench, dtype, judge_stats(stats, dtype, tol), stats, "statistics"
    )


def _mask_written_otherwise(npu: np.ndarray, bench: np.ndarray, dtype: str, tol: Tolerance
                            ) -> tuple[Judgement, TensorMetrics] | None:
    """A mask written another way on each side at the same positions (-inf against finfo.min,
    -1e9, or MindFormers' score - 10000), the rest compared as usual: each side's masked
    values are one constant (up to the scores added to it), or -inf."""
    if npu.shape != bench.shape:
        return None
    n, b = as_float64(npu.reshape(-1)), as_float64(bench.reshape(-1))
    if np.isnan(n).any() or np.isnan(b).any() or np.isposinf(n).any() or np.isposinf(b).any():
        return None
    masked = (n <= MASK_VALUE) | (b <= MASK_VALUE)
    if (not masked.any() or not ((n[masked] <= MASK_VALUE) & (b[masked] <= MASK_VALUE)).all()
            or not (_one_constant(n[masked]) and _one_constant(b[masked]))):
        return None
    if np.isinf(n[~masked]).any() or np.isinf(b[~masked]).any():
        return None
    keep = ~masked
    metrics = tensor_metrics(n[keep], b[keep]) if keep.any() else None
    if metrics is None or not judge_tensor(metrics, dtype, tol).ok:
        return None
    return Judgement(True, f"a mask written as -inf on one side and a large negative number on "
                     f"the other at the same {int(masked.sum())} positions (another "
                     "codebase's mask); the other values compared"), metrics


def _one_constant(values: np.ndarray) -> bool:
    """Mask values: all -inf, or finite ones within 0.1 % of one another (a fill constant,
    plus the scores added to it)."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return True
    if finite.size != values.size:
        return False
    return bool(finite.max() - finite.min() <= 1e-3 * abs(finite.min()))


def negated_region(npu: TensorRecord, bench: TensorRecord, dtype: str,
                   criteria: CompareCriteria) -> TensorComparison | None:
    """A region's boundary value that agrees with the bench's up to its sign: the value
    before a negation the dump does not record (a loss written -mean(log p) against
    cross_entropy). Only asked of region-node pairs, whose calls differ by design."""
    tol = criteria.tolerance(dtype)
    if npu.has_data and bench.has_data:
        a, b = loaded(npu), loaded(bench)
        if a.shape != b.shape or dtype_kind(npu.dtype) != "float":  # bf16 is no np.floating
            return None
        metrics = tensor_metrics(-as_float64(a), as_float64(b))
        judged = judge_tensor(metrics, dtype, tol)
        detail: TensorMetrics | StatsMetrics = metrics
    else:
        flipped = negated(npu.stats)
        if flipped is None:
            return None
        detail = stats_metrics(flipped, bench.stats)
        judged = judge_stats(detail, dtype, tol)
    if not judged.ok or not judged.checked:
        return None
    note = Judgement(True, "the same value up to its sign: the region's value before a "
                     "negation the dump does not record (another codebase's loss)")
    return TensorComparison(npu.path, npu, bench, dtype, note, detail, "tensor")


def another_layout(npu: np.ndarray, bench: np.ndarray, dtype: str, tol: Tolerance
                    ) -> tuple[Judgement, TensorMetrics] | None:
    """The same values in another layout: a transpose, a view of another shape, or the last
    dimension's entries permuted alike in every row (q/k rows a weight conversion permuted
    for another rotary convention). Each candidate layout is compared element by element
    with the same tolerance; a structural difference of two codebases, said in the
    judgement. None where no layout makes the values agree."""
    if npu.size != bench.size or npu.size == 0 or npu.size > _LAYOUT_MAX_ELEMENTS:
        return None
    for layout, candidate in _layouts(npu, bench.shape):
        tried = [] if candidate is npu and npu.shape == bench.shape else [(layout, candidate)]
        for how, arranged in (*tried, *_columns_matched(candidate, bench, layout)):
            metrics = tensor_metrics(arranged, bench)
            if metrics.status == "ok" and judge_tensor(metrics, dtype, tol).ok:
                return Judgement(True, f"the same values {how} (npu {list(npu.shape)} vs "
                                 f"bench {list(bench.shape)}): a layout of another codebase "
                                 "or weight conversion"), metrics
    return None


def _layouts(npu: np.ndarray, shape: tuple[int, ...]) -> list[tuple[str, np.ndarray]]:
    """``npu`` arranged into ``shape``: as it is, transposed, or reshaped in memory order."""
    out: list[tuple[str, np.ndarray]] = []
    if npu.shape == shape:
        out.append(("in the same layout", npu))
    elif npu.ndim == len(shape) and npu.ndim <= 5:
        for axes in itertools.permutations(range(npu.ndim)):
            if tuple(npu.shape[k] for k in axes) == shape and axes != tuple(range(npu.ndim)):
                out.append((f"transposed {list(axes)}", npu.transpose(axes)))
    if npu.shape != shape:
        out.append(("reshaped", npu.reshape(shape)))
    return out


def _columns_matched(npu: np.ndarray, bench: np.ndarray, layout: str
                     ) -> list[tuple[str, np.ndarray]]:
    """``npu`` with the entries of its last (or first) dimension reordered to the bench's,
    matched by the norm of each entry over the rest (one permutation for every row: a
    weight's gradient whose rows a conversion permuted), where one exists."""
    out: list[tuple[str, np.ndarray]] = []
    if bench.ndim == 0 or npu.shape != bench.shape:
        return out
    where = "" if layout == "in the same layout" else f"{layout}, "
    for axis, words in ((-1, "last"), (0, "first")):
        if bench.ndim < 2 and axis == 0:
            continue
        a = np.moveaxis(npu, axis, -1).astype(np.float64)
        b = np.moveaxis(bench, axis, -1).astype(np.float64)
        cols = b.shape[-1] if b.ndim else 0
        if cols < 2 or b.size // cols < 2:
            continue
        a2, b2 = a.reshape(-1, cols), b.reshape(-1, cols)
        source = _matching_columns(a2, b2)
        if source is None:
            continue
        arranged = a2[:, source]
        out.append((f"{where}its {words} dimension permuted",
                    np.moveaxis(arranged.reshape(b.shape), -1, axis)))
    return out


def _matching_columns(a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """For each column of ``b``, the column of ``a`` it is (``a[:, source]`` ~ ``b``): the
    most similar by cosine where that is a permutation other than the identity, matched by
    norms where the cosine matrix would be too big (cols^2 x rows past _COSINE_CELLS)."""
    rows, cols = a.shape
    na, nb = np.sqrt((a * a).sum(axis=0)), np.sqrt((b * b).sum(axis=0))
    if cols * cols * rows <= _COSINE_CELLS:
        with np.errstate(divide="ignore", invalid="ignore"):
            cosine = (a / np.where(na > 0, na, 1.0)).T @ (b / np.where(nb > 0, nb, 1.0))
        source = np.argmax(cosine, axis=0)
        if len(np.unique(source)) != cols and cols <= _GREEDY_COLUMNS:
            source = _greedy(cosine)  # equal columns (a rotary table's repeated pairs)
    else:
        oa, ob = np.argsort(na, kind="stable"), np.argsort(nb, kind="stable")
        if not np.allclose(na[oa], nb[ob], rtol=1e-2, atol=0.0):
            return None
        source = np.empty(cols, dtype=np.intp)
        source[ob] = oa
    if len(np.unique(source)) != cols or np.array_equal(source, np.arange(cols)):
        return None
    return source


def _greedy(similarity: np.ndarray) -> np.ndarray:
    """A one-to-one assignment taking the most similar free pair first (ties in order)."""
    cols = similarity.shape[1]
    source = np.full(cols, -1, dtype=np.intp)
    used = np.zeros(similarity.shape[0], dtype=bool)
    for flat in np.argsort(-similarity, axis=None, kind="stable"):
        i, j = divmod(int(flat), cols)
        if source[j] < 0 and not used[i]:
            source[j], used[i] = i, True
    return source


def _squeezed(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(d for d in shape if d != 1)
