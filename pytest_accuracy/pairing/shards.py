"""A bench sharded otherwise, seen from one NPU rank: each tensor the slice it holds.

An NPU run at TP=2 against a bench at TP=1 or TP=4 (same data-parallel split and pipeline
stages) is compared rank by rank against a *view* of the bench: for NPU rank r, the calls of
the bench ranks that hold r's part of the model (``layouts.bench_ranks``), each record
replaced by what r holds of it:

* a tensor sharded along one dimension (column-parallel outputs, sharded weights, a
  vocabulary-parallel head's logits: the NPU's shape times its TP size equals the bench's
  times its TP size there) is the slice of the bench shards concatenated along it;
* a full-shaped output of a call that reads a shard (a row-parallel Linear's partial sums
  before their all-reduce, a vocabulary-parallel embedding's lookup) is the sum of the bench
  ranks' partial sums over the same range where the bench splits finer; where it splits
  coarser, the bench holds no such partial sum and the record is left out (the value is
  compared after the all-reduce);
* any other full-shaped tensor is replicated: the bench's as it is.

Tensor dumps give every slice and sum. From statistics, a slice that is a union of whole
bench shards combines theirs (Max, Min; Mean by element counts; Norm as the root of the sum
of squares); any other slice or sum has no statistics (unchecked, said so).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from pytest_accuracy.compare.fold import as_float64
from pytest_accuracy.dumps.model import Arg, Call, Dump, DumpSet, RecordSource, TensorRecord
from pytest_accuracy.dumps.stats import Stats
from pytest_accuracy.pairing.layouts import Layout, bench_ranks


class ShardRecord(TensorRecord):
    """A record made of bench records: the slice ``[start, stop)`` along ``axis`` of their
    concatenation, or (``axis`` None) their sum."""

    __slots__ = ("_axis", "_parts", "_span", "_stats")

    def __init__(self, template: TensorRecord, shape: tuple[int, ...],
                 parts: Sequence[TensorRecord], axis: int | None, span: tuple[int, int],
                 stats: Stats) -> None:
        super().__init__(template.path, template.role, template.dtype, template.raw_dtype,
                         shape, RecordSource(stats, None, template.dump_json, template.confine),
                         requires_grad=template.requires_grad)
        self._parts, self._axis, self._span = tuple(parts), axis, span
        self._stats: Stats | None = stats if stats.norm is not None else None

    @property
    def stats(self) -> Stats:
        """Combined from the parts' statistics where the slice is whole shards, else computed
        from their tensors (once) where they have them, else not recorded."""
        if self._stats is None:
            self._stats = _measured(self.load()) if self.has_data else Stats()
        return self._stats

    @property
    def stats_row(self) -> None:
        return None

    @property
    def has_data(self) -> bool:
        return all(p.has_data for p in self._parts)

    def load(self) -> np.ndarray:
        arrays = [as_float64(p.load()) for p in self._parts]
        if self._axis is None:
            return np.asarray(sum(arrays[1:], arrays[0]))
        joined = np.concatenate(arrays, axis=self._axis)
        return np.take(joined, range(*self._span), axis=self._axis)


def relayout(npu: DumpSet, npu_layout: Layout, bench: DumpSet, bench_layout: Layout
             ) -> DumpSet:
    """The bench as each NPU rank sees it (keyed by the NPU's step and rank); ranks whose
    bench ranks are missing at a step are left out (the compare says so)."""
    if npu_layout.dp != bench_layout.dp or npu_layout.pp != bench_layout.pp:
        raise ValueError(
            f"the NPU layout {npu_layout} and the bench layout {bench_layout} differ in dp or "
            "pp: only tensor parallelism may differ (each rank's data and pipeline stage "
            "must be the same on both sides)")
    views: dict[tuple[int, int], Dump] = {}
    for (step, rank), mine in npu.dumps.items():
        group = [bench.dumps.get((step, r)) for r in bench_ranks(npu_layout, bench_layout, rank)]
        if any(d is None for d in group):
            continue
        tp_rank = npu_layout.coords(rank)[0]
        views[(step, rank)] = _view(mine, [d for d in group if d is not None], npu_layout.tp,
                                    bench_layout.tp, tp_rank)
    return DumpSet(bench.root, views)


def _view(mine: Dump, group: list[Dump], tn: int, tb: int, tp_rank: int) -> Dump:
    calls: list[Call] = []
    left_out: dict[str, str] = {}
    for call in group[0].calls:
        theirs = [d.get(call.name) for d in group]
        parts = [c for c in theirs if c is not None]
        if len(parts) != len(theirs):
            continue
        ours = mine.get(call.name)
        made = _call_view(parts, ours, tn, tb, tp_rank) if ours is not None else call
        if len(made.output_tensors) < len(call.output_tensors):
            left_out[call.name] = (
                f"not compared: its outputs are partial sums of NPU TP rank {tp_rank} of {tn} "
                f"(it reads a shard), and the bench at TP={tb} holds none of that range: the "
                "value is compared after the all-reduce that sums them")
        calls.append(made)
    notes = [f"the bench ranks holding NPU rank {mine.rank}'s part: "
             + ", ".join(str(d.rank) for d in group)]
    return Dump(group[0].path, group[0].framework, group[0].level, group[0].mode, mine.step,
                mine.rank, calls, notes, left_out)


def _call_view(parts: list[Call], ours: Call, tn: int, tb: int, tp_rank: int) -> Call:
    mine = {r.path: r for r in _records(ours)}
    base = parts[0]
    # a call that reads a tensor sharded on one side makes partial values of full shape
    reads_shard = any(r.path in mine and mine[r.path].shape != r.shape
                      for r in base.input_tensors + base.parameters)
    tables = [{r.path: r for r in _records(c)} for c in parts]

    def view(args: list[Arg]) -> list[Arg]:
        out: list[Arg] = []
        for arg in args:
            shards = ([t.get(arg.path) for t in tables] if isinstance(arg, TensorRecord)
                      else [])
            if not isinstance(arg, TensorRecord) or any(s is None for s in shards):
                out.append(arg)
                continue
            made = _record([s for s in shards if s is not None], mine.get(arg.path),
                           reads_shard and arg.role == "output", tn, tb, tp_rank)
            if made is not None:
                out.append(made)
        return out

    made = replace(base, inputs=view(base.inputs), outputs=view(base.outputs),
                   parameters=[r for r in view(list(base.parameters))
                               if isinstance(r, TensorRecord)],
                   fixed_inputs=None, fixed_outputs=None, fixed_signature=None)
    made.fix_tensors()
    return made


def _records(call: Call) -> list[TensorRecord]:
    return call.input_tensors + call.parameters + call.output_tensors


def _record(shards: list[TensorRecord], npu: TensorRecord | None, partial: bool, tn: int,
            tb: int, tp_rank: int) -> TensorRecord | None:
    """What NPU TP rank ``tp_rank`` holds of the bench's ``shards`` (see the module doc)."""
    first = shards[0]
    if npu is None or tn == tb or any(s.shape != first.shape for s in shards):
        return first
    if npu.shape == first.shape:
        if not partial:
            return first
        if tb < tn:
            return None  # a partial sum over less than one bench shard: the bench has none
        stats = first.stats if len(shards) == 1 else Stats()
        return ShardRecord(first, first.shape, shards, None, (0, 0), stats)
    axis = _shard_axis(npu.shape, first.shape, tn, tb)
    if axis is None:
        return first  # another shape: the compare reports it
    width = npu.shape[axis]
    offset = tp_rank * width - (tp_rank * tb // tn) * first.shape[axis]
    whole = offset == 0 and width == len(shards) * first.shape[axis]
    stats = _joined(shards) if whole else Stats()
    return ShardRecord(first, npu.shape, shards, axis, (offset, offset + width), stats)


def _shard_axis(npu: tuple[int, ...], bench: tuple[int, ...], tn: int, tb: int) -> int | None:
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


def _joined(shards: list[TensorRecord]) -> Stats:
    """The statistics of the concatenation of ``shards``, where all of them are recorded."""
    rows = [(s.stats.max, s.stats.min, s.stats.mean, s.stats.norm, s.numel) for s in shards]
    if any(v is None for row in rows for v in row):
        return Stats()
    values = np.array(rows, dtype=np.float64)
    total = float(values[:, 4].sum())
    return Stats(max=float(values[:, 0].max()), min=float(values[:, 1].min()),
                 mean=float((values[:, 2] * values[:, 4]).sum() / total),
                 norm=math.sqrt(float((values[:, 3] ** 2).sum())))
