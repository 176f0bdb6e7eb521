"""Parts of a batch across data-parallel sizes: which dimension, the NPU's parts joined, and
the scale of the backward (``data_parallel`` builds the bench's view with them)."""

from __future__ import annotations

import math

import numpy as np

from pytest_accuracy.compare.fold import as_float64
from pytest_accuracy.dumps.model import Call, Dump, DumpSet, TensorRecord
from pytest_accuracy.pairing.layouts import Layout
from pytest_accuracy.pairing.shard_records import ShardRecord, joined_stats

# (step, NPU rank) -> call name -> (the NPU ranks joined, the joined records by path)
Joins = dict[tuple[int, int], dict[str, tuple[tuple[int, ...], dict[str, TensorRecord]]]]


def dp_sources(npu: Layout, bench: Layout, dp_rank: int) -> list[int]:
    """The bench DP ranks that read NPU DP rank ``dp_rank``'s part of the batch."""
    if bench.dp <= npu.dp:
        return [dp_rank * bench.dp // npu.dp]
    per = bench.dp // npu.dp
    return list(range(dp_rank * per, (dp_rank + 1) * per))


def dp_group(npu: Layout, bench: Layout, rank: int) -> list[int]:
    """NPU ``rank`` and its DP peers whose parts of the batch make one bench DP rank's (the
    same TP and PP place), in DP order: the rank alone where the bench has as many DP ranks
    or more."""
    t, d, p = npu.coords(rank)
    per = max(1, npu.dp // bench.dp)
    return [npu.rank(t, e, p) for e in range(d // per * per, d // per * per + per)]


def batch_axis(npu: tuple[int, ...], bench: tuple[int, ...], dn: int, db: int) -> int | None:
    """The batch dimension: the first along which the NPU's size is the bench's times Db/Dn
    (a TP shard's dimension has another ratio: ``layouts_problem``)."""
    if len(npu) != len(bench):
        return None
    return next((k for k, (a, b) in enumerate(zip(npu, bench, strict=True))
                 if a != b and a * dn == b * db), None)


def source_dumps(bench: DumpSet, npu_layout: Layout, bench_layout: Layout, step: int,
                 rank: int) -> list[Dump] | None:
    """The bench DP ranks' dumps that read NPU ``rank``'s part of the batch, at the first
    bench TP place of its own (the same pipeline stage), or None where one is not loaded."""
    t, d, p = npu_layout.coords(rank)
    place = t * bench_layout.tp // npu_layout.tp
    found = [bench.dumps.get((step, bench_layout.rank(place, e, p)))
             for e in dp_sources(npu_layout, bench_layout, d)]
    return [f for f in found if f is not None] if None not in found else None


def dp_joins(npu: DumpSet, npu_layout: Layout, bench: DumpSet, bench_layout: Layout) -> Joins:
    """Against a bench of fewer DP ranks dumped as statistics (no slice of its tensors to
    take): each NPU rank's batch parts joined with its DP peers' (the same TP and PP place)
    into the bench DP rank's whole, where every one of them recorded every statistic."""
    joins: Joins = {}
    if npu_layout.dp <= bench_layout.dp:
        return joins
    for (step, rank), dump in npu.dumps.items():
        peers = [npu.dumps.get((step, r)) for r in dp_group(npu_layout, bench_layout, rank)]
        sources = source_dumps(bench, npu_layout, bench_layout, step, rank)
        if sources and None not in peers:
            found = [peer for peer in peers if peer is not None]
            joins[(step, rank)] = _joined_calls(dump, found, sources[0], npu_layout.dp,
                                                bench_layout.dp)
    return joins


def _joined_calls(dump: Dump, peers: list[Dump], bench: Dump, dn: int, db: int
                  ) -> dict[str, tuple[tuple[int, ...], dict[str, TensorRecord]]]:
    made: dict[str, tuple[tuple[int, ...], dict[str, TensorRecord]]] = {}
    ranks = tuple(peer.rank for peer in peers)
    for call in dump.calls:
        theirs = bench.get(call.name)
        if theirs is None:
            continue
        shapes = {r.path: r.shape for r in records_of(theirs)}
        for record in records_of(call):
            axis = batch_axis(record.shape, shapes.get(record.path, ()), dn, db)
            if axis is None or record.has_data:
                continue
            parts = [_record(peer.get(call.name), record.path) for peer in peers]
            if any(r is None or r.shape != record.shape for r in parts):
                continue
            found = [r for r in parts if r is not None]
            stats = joined_stats(found)
            if stats.norm is not None:
                width = record.shape[axis] * len(found)
                shape = (*record.shape[:axis], width, *record.shape[axis + 1:])
                made.setdefault(call.name, (ranks, {}))[1][record.path] = ShardRecord(
                    record, shape, found, axis, (0, width), stats)
    return made


def backward_scale(npu: DumpSet, npu_layout: Layout, bench: DumpSet, bench_layout: Layout,
                   joins: Joins) -> tuple[float, str]:
    """How much larger the NPU's batch gradients are than the bench's for the same samples:
    a loss averaged over each rank's part of the batch makes them Dn/Db times the bench's, one
    normalised over the whole batch 1x. Of the two, the one nearer the Norms' ratio at the
    first batch gradient of the backward both sides show; Dn/Db where none does. With why."""
    usual = npu_layout.dp / bench_layout.dp
    for (step, rank), dump in sorted(npu.dumps.items()):
        sources = source_dumps(bench, npu_layout, bench_layout, step, rank)
        if sources is None:
            continue
        found = _first_ratio(dump, sources, joins.get((step, rank), {}), npu_layout.dp,
                             bench_layout.dp, npu_layout.coords(rank)[1])
        if found is not None:
            ratio, where = found
            scale = min((1.0, usual), key=lambda s: abs(math.log(s) - math.log(ratio)))
            return scale, f"{where} on rank {rank}: NPU / bench Norm {ratio:.4g}"
    return usual, "assumed: no batch gradient both sides recorded showed it"


def _first_ratio(dump: Dump, sources: list[Dump], joined: dict[str, tuple[
        tuple[int, ...], dict[str, TensorRecord]]], dn: int, db: int, dp_rank: int
                 ) -> tuple[float, str] | None:
    """The NPU's Norm over the bench part's at the first batch gradient both show."""
    backward = False
    for call in dump.calls:
        backward = backward or call.direction != "forward"
        parts = [source.get(call.name) for source in sources]
        if not backward or None in parts:
            continue
        for record in records_of(call):
            theirs = [_record(c, record.path) for c in parts if c is not None]
            if None in theirs or not theirs:
                continue
            mine = joined.get(call.name, ((), {}))[1].get(record.path, record)
            part = _part_norm(mine, [r for r in theirs if r is not None], dn, db,
                              joined=mine is not record, dp_rank=dp_rank)
            if part and mine.stats.norm:
                return mine.stats.norm / part, f"{call.name} {record.path}"
    return None


def _part_norm(mine: TensorRecord, theirs: list[TensorRecord], dn: int, db: int,
               joined: bool, dp_rank: int) -> float | None:
    """The Norm of the bench's part of the batch that ``mine`` holds, where it is known and
    ``mine`` differs from it only along the batch (no TP shard)."""
    first = theirs[0]
    if joined:
        return first.stats.norm if mine.shape == first.shape else None
    axis = batch_axis(mine.shape, first.shape, dn, db)
    if axis is None or any(a != b for k, (a, b) in enumerate(zip(mine.shape, first.shape,
                                                                  strict=True)) if k != axis):
        return None
    if dn < db:
        return joined_stats(theirs).norm
    if not first.has_data:
        return None
    width = first.shape[axis] * db // dn
    j = dp_rank % (dn // db)  # the NPU rank's place within its bench DP rank's batch
    part = as_float64(first.load()).take(range(j * width, (j + 1) * width), axis=axis)
    return float(np.sqrt(np.square(part).sum()))


def _record(call: Call | None, path: str) -> TensorRecord | None:
    if call is None:
        return None
    return next((r for r in records_of(call) if r.path == path), None)


def records_of(call: Call) -> list[TensorRecord]:
    return call.input_tensors + call.parameters + call.output_tensors
