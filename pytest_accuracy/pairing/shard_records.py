"""What one NPU rank holds of a bench sharded otherwise: slices of its tensors, and their
statistics where only statistics were dumped (``pairing/shards.py`` builds the views)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from pytest_accuracy.compare.fold import as_float64
from pytest_accuracy.dumps.model import (
    Arg,
    Call,
    RecordSource,
    TensorRecord,
    is_float_dtype,
)
from pytest_accuracy.dumps.stats import Stats


class MadeRecord(TensorRecord):
    """A record made of other records (``parts``), its statistics given where they combine
    exactly, else computed from the parts' tensors (once) where they have them."""

    __slots__ = ("_parts", "_stats")

    def __init__(self, template: TensorRecord, shape: tuple[int, ...],
                 parts: Sequence[TensorRecord], stats: Stats) -> None:
        super().__init__(template.path, template.role, template.dtype, template.raw_dtype,
                         shape, RecordSource(stats, None, template.dump_json, template.confine),
                         requires_grad=template.requires_grad)
        self._parts = tuple(parts)
        self._stats: Stats | None = stats if stats.norm is not None else None

    @property
    def stats(self) -> Stats:
        if self._stats is None:
            self._stats = _measured(self.load()) if self.has_data else Stats()
        return self._stats

    @property
    def stats_row(self) -> None:
        return None

    @property
    def has_data(self) -> bool:
        return all(p.has_data for p in self._parts)


class ShardRecord(MadeRecord):
    """A record made of bench records: the slice ``span`` along ``axis`` of their
    concatenation, times ``scale`` (a gradient of a loss averaged over another batch)."""

    __slots__ = ("_axis", "_scale", "_span")

    def __init__(self, template: TensorRecord, shape: tuple[int, ...],
                 parts: Sequence[TensorRecord], axis: int, span: tuple[int, int],
                 stats: Stats, scale: float = 1.0) -> None:
        super().__init__(template, shape, parts, _scaled(stats, scale))
        self._axis, self._span, self._scale = axis, span, scale

    def load(self) -> np.ndarray:
        arrays = [as_float64(p.load()) for p in self._parts]
        joined = np.concatenate(arrays, axis=self._axis)
        taken = np.take(joined, range(*self._span), axis=self._axis)
        return taken * self._scale if self._scale != 1.0 else taken


class SumRecord(MadeRecord):
    """A record made of records of one shape: their sum times ``factor`` (a sum over the batch
    that several DP ranks made a part of each)."""

    __slots__ = ("_factor",)

    def __init__(self, template: TensorRecord, parts: Sequence[TensorRecord],
                 factor: float) -> None:
        super().__init__(template, template.shape, parts, _scalar_sum(parts, factor))
        self._factor = factor

    def load(self) -> np.ndarray:
        total = as_float64(self._parts[0].load()).copy()
        for part in self._parts[1:]:
            total += as_float64(part.load())
        return total * self._factor


def remade_call(base: Call, ours: Call, view: Callable[[list[Arg]], list[Arg]],
                own_scalars: bool) -> Call:
    """The bench call ``base`` with its arguments as ``view`` makes them (``own_scalars``:
    its non-tensor inputs the NPU call's, a process group or a vocabulary range being the
    layout's, not a difference)."""
    inputs = view(base.inputs)
    if own_scalars:
        theirs = {a.path: a for a in ours.inputs if not isinstance(a, TensorRecord)}
        inputs = [theirs.get(a.path, a) if not isinstance(a, TensorRecord) else a
                  for a in inputs]
    made = replace(base, inputs=inputs, outputs=view(base.outputs),
                   parameters=[r for r in view(list(base.parameters))
                               if isinstance(r, TensorRecord)],
                   fixed_inputs=None, fixed_outputs=None, fixed_signature=None)
    made.fix_tensors()
    return made


def summable(records: Sequence[TensorRecord]) -> bool:
    """Whether the sum of ``records`` can be known: their tensors, or scalars' values."""
    return all(r.has_data for r in records) or _scalar_sum(records, 1.0).norm is not None


def _scalar_sum(parts: Sequence[TensorRecord], factor: float) -> Stats:
    """The statistics of a sum of scalars from their recorded values, else none."""
    if any(math.prod(p.shape) != 1 or p.stats.mean is None for p in parts):
        return Stats()
    value = sum(float(p.stats.mean or 0.0) for p in parts) * factor
    return Stats(max=value, min=value, mean=value, norm=abs(value))


class BatchRecord(ShardRecord):
    """A bench record's part of the batch another DP rank reads (``data_parallel``): not a
    shard of the model, so never a call's own shard (engine's ``_shard_inputs``)."""

    __slots__ = ()


def _scaled(stats: Stats, scale: float) -> Stats:
    """The statistics of a tensor times ``scale`` (> 0)."""
    if scale == 1.0:
        return stats
    return Stats(*(None if v is None else v * scale for v in stats))


def same_values(records: list[TensorRecord]) -> bool:
    """Whether the records hold one value: by their data or checksums where they have them;
    by their statistics only for floats (a bool mask's Max and Min say little)."""
    first = records[0]
    if any(r.shape != first.shape or r.dtype != first.dtype for r in records):
        return False
    if all(r.has_data for r in records):
        return all(np.array_equal(r.load(), first.load()) for r in records[1:])
    if all(r.md5 is not None for r in records):
        return len({r.md5 for r in records}) == 1
    return is_float_dtype(first.dtype) and len({tuple(r.stats) for r in records}) == 1


# bf16 rounds an element by up to 2**-8 (and two codebases round apart); a partial sum of
# TP ranks differs from the complete value by a part of its size, far more
NEAR = 2e-2


def near(npu: TensorRecord, bench: TensorRecord) -> bool:
    """Whether an NPU value is the bench's within ``NEAR`` of its size (data, else Norm and
    Mean): which of two differing TP peers holds the complete value, not a verdict."""
    if npu.shape != bench.shape or not is_float_dtype(npu.dtype):
        return False
    if npu.has_data and bench.has_data:
        a, b = as_float64(npu.load()), as_float64(bench.load())
        scale = float(np.abs(b).max(initial=0.0))
        return bool(np.abs(a - b).max(initial=0.0) <= NEAR * scale)
    x, y = npu.stats, bench.stats
    if x.norm is None or y.norm is None or x.mean is None or y.mean is None:
        return False
    return abs(x.norm - y.norm) <= NEAR * abs(y.norm) and abs(x.mean - y.mean) <= NEAR * (
        abs(y.norm) / math.sqrt(max(1, math.prod(bench.shape))))


def shard_of(shards: list[TensorRecord], npu: TensorRecord | None, tn: int, tb: int,
            tp_rank: int) -> TensorRecord:
    """What NPU TP rank ``tp_rank`` holds of the bench's ``shards`` (see the module doc)."""
    first = shards[0]
    if npu is None or tn == tb or npu.shape == first.shape or any(
            s.shape != first.shape for s in shards):
        return first
    axis = shard_axis(npu.shape, first.shape, tn, tb)
    if axis is None:
        return first  # another shape: the compare reports it
    width = npu.shape[axis]
    offset = tp_rank * width - (tp_rank * tb // tn) * first.shape[axis]
    whole = offset == 0 and width == len(shards) * first.shape[axis]
    stats = joined_stats(shards) if whole else Stats()
    return ShardRecord(first, npu.shape, shards, axis, (offset, offset + width), stats)


def shard_axis(npu: tuple[int, ...], bench: tuple[int, ...], tn: int, tb: int) -> int | None:
    """The one dimension along which the two shapes are shards of one full shape."""
    if len(npu) != len(bench):
        return None
    differ = [k for k, (a, b) in enumerate(zip(npu, bench, strict=True)) if a != b]
    if len(differ) != 1 or npu[differ[0]] * tn != bench[differ[0]] * tb:
        return None
    return differ[0]


def _measured(values: np.ndarray) -> Stats:
    """A tensor's Max, Min, Mean and Norm as msprobe records them (of the finite values)."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return Stats()
    return Stats(max=float(finite.max()), min=float(finite.min()), mean=float(finite.mean()),
                 norm=float(np.sqrt(np.square(finite).sum())))


def joined_stats(shards: list[TensorRecord]) -> Stats:
    """The statistics of the concatenation of ``shards``, where all of them are recorded."""
    rows = [(s.stats.max, s.stats.min, s.stats.mean, s.stats.norm, s.numel) for s in shards]
    if any(v is None for row in rows for v in row):
        return Stats()
    values = np.array(rows, dtype=np.float64)
    total = float(values[:, 4].sum())
    return Stats(max=float(values[:, 0].max()), min=float(values[:, 1].min()),
                 mean=float((values[:, 2] * values[:, 4]).sum() / total),
                 norm=math.sqrt(float((values[:, 3] ** 2).sum())))
