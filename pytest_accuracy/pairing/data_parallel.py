"""A bench of another data-parallel size seen as the NPU's: each DP rank's part of the batch.

An NPU run at DP=2 against a bench at DP=1 (the same global batch, one micro-batch a step)
reads half of each batch on each DP rank: its activations are slices of the bench's along
the batch dimension, its loss the mean over its half. ``dp_matched`` makes, for every NPU DP
rank, a bench dump of the NPU's DP size (the bench's TP and PP kept, so that ``shards``
relayouts it further where those differ too):

* a tensor whose NPU shape is the bench's times Db/Dn along one dimension (the batch; the
  first such, before a TP shard's) is the NPU rank's slice of the bench rank's (an NPU of
  more DP ranks), or the bench DP ranks' joined (of fewer: their statistics combine);
* a tensor of the bench's shape read or made by a call that reads a batch slice (the loss,
  a parameter's gradient: sums over the batch; the DP all-reduce that completes a gradient
  is outside the dump) is not compared: left out, and so is what reads it;
* a gradient of a loss averaged over the rank's part of the batch is Dn/Db times the bench's
  slice: the backward is compared at the scale the first batch gradient shows (1 or Dn/Db);
* any other tensor (weights, masks) is the bench's as it is.

From statistics an NPU rank's slice of a coarser bench has none (not compared, said so).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from pytest_accuracy.compare.fold import as_float64
from pytest_accuracy.dumps.model import Arg, Call, Dump, DumpSet, TensorRecord, is_collective
from pytest_accuracy.dumps.stats import Stats
from pytest_accuracy.pairing.layouts import Layout
from pytest_accuracy.pairing.shard_records import BatchRecord, ShardRecord, joined_stats

Key = tuple[str, tuple[int, ...], tuple[float | None, ...]]


def dp_matched(npu: DumpSet, npu_layout: Layout, bench: DumpSet, bench_layout: Layout
               ) -> tuple[DumpSet, Layout]:
    """The bench as a run of the NPU's DP size and the bench's TP and PP (its layout): one
    dump per NPU DP rank and bench TP and PP place, made of the bench DP ranks that read its
    part of the batch (``dp_sources``). Places whose bench ranks are not loaded are left out."""
    layout = Layout(bench_layout.tp, npu_layout.dp, bench_layout.pp)
    made: dict[tuple[int, int], Dump] = {}
    for step in sorted({s for s, _ in npu.dumps}):
        for d in range(npu_layout.dp):
            for t in range(bench_layout.tp):
                for p in range(bench_layout.pp):
                    reference = _reference(npu, npu_layout, step, (t, d, p))
                    if not reference:
                        continue
                    sources = [bench.dumps.get((step, bench_layout.rank(t, e, p)))
                               for e in dp_sources(npu_layout, bench_layout, d)]
                    found = [s for s in sources if s is not None]
                    if len(found) == len(sources):
                        peers = _peers(npu, npu_layout, bench_layout, step, (t, d, p))
                        view = _DpView(found, reference, npu_layout, bench_layout, d, peers)
                        made[(step, layout.rank(t, d, p))] = view.dump()
    return DumpSet(bench.root, made, bench.unmade), layout


def dp_sources(npu: Layout, bench: Layout, dp_rank: int) -> list[int]:
    """The bench DP ranks that read NPU DP rank ``dp_rank``'s part of the batch."""
    if bench.dp <= npu.dp:
        return [dp_rank * bench.dp // npu.dp]
    per = bench.dp // npu.dp
    return list(range(dp_rank * per, (dp_rank + 1) * per))


def _peers(npu: DumpSet, npu_layout: Layout, bench_layout: Layout, step: int,
           place: tuple[int, int, int]) -> list[Dump]:
    """The NPU ranks whose parts of the batch make up one bench DP rank's, at the TP and PP
    place (t, d, p) where the two runs share those (their joined statistics meet a coarser
    bench's): in DP order, all of them loaded, else none."""
    t, d, p = place
    if npu_layout.dp <= bench_layout.dp or npu_layout.tp != bench_layout.tp:
        return []
    per = npu_layout.dp // bench_layout.dp
    ranks = [npu_layout.rank(t, e, p) for e in range(d // per * per, d // per * per + per)]
    found = [dump for r in ranks if (dump := npu.dumps.get((step, r))) is not None]
    return found if len(found) == len(ranks) else []


def _reference(npu: DumpSet, layout: Layout, step: int, place: tuple[int, int, int]
               ) -> dict[str, Call]:
    """The NPU's calls at DP rank d of place (t, d, p) by name, rank (t, d, p)'s first (its
    values at one TP size), then any TP place's: their shapes say which dimension is the
    batch."""
    calls: dict[str, Call] = {}
    own = layout.rank(*place) if place[0] < layout.tp else -1
    for (s, rank), dump in sorted(npu.dumps.items(), key=lambda kv: (kv[0][1] != own, kv[0])):
        if s == step and layout.coords(rank)[1] == place[1]:
            for call in dump.calls:
                calls.setdefault(call.name, call)
    return calls


class _DpView:
    """One NPU DP rank's view of the bench DP ranks that read its part of the batch."""

    def __init__(self, sources: list[Dump], reference: dict[str, Call], npu: Layout,
                 bench: Layout, dp_rank: int, peers: list[Dump]) -> None:
        self.sources, self.reference, self.peers = sources, reference, peers
        self.joined: dict[str, tuple[tuple[int, ...], dict[str, TensorRecord]]] = {}
        self.dn, self.db, self.dp_rank = npu.dp, bench.dp, dp_rank
        self.reduced: set[Key] = set()  # values summed over the batch (bench side)
        self.left_out: dict[str, str] = {}
        self.scale: float | None = None  # the backward's, once the first gradient shows it
        # in the backward pass (from its first call on: collectives there keep forward names)
        self.backward = False

    def dump(self) -> Dump:
        first = self.sources[0]
        calls = []
        for call in first.calls:
            self.backward = self.backward or call.direction != "forward"
            parts = [c for d in self.sources if (c := d.get(call.name)) is not None]
            ours = self.reference.get(call.name)
            if len(parts) == len(self.sources):
                calls.append(self._call(parts, ours) if ours is not None else call)
        ranks = tuple(d.rank for d in self.sources)
        notes = [f"the bench DP ranks reading NPU DP rank {self.dp_rank}'s part of the batch: "
                 + ", ".join(map(str, ranks))]
        if self.scale not in (None, 1.0):
            notes.append(f"the NPU's batch gradients are compared at {self.scale:g}x the "
                         "bench's: each NPU DP rank's loss is the mean over its part of the "
                         "batch")
        return Dump(first.path, first.framework, first.level, first.mode, first.step,
                    first.rank, calls, notes, self.left_out, joined=self.joined,
                    bench_ranks=ranks, call_ranks={c.name: ranks for c in calls})

    def _call(self, parts: list[Call], ours: Call) -> Call:
        mine = {r.path: r for r in _records(ours)}
        tables = [{r.path: r for r in _records(c)} for c in parts]
        base = parts[0]
        sliced = any(self._axis(mine.get(r.path), r) is not None for r in base.input_tensors)
        reads_reduced = any(_key(r) in self.reduced for r in base.input_tensors)
        dropped = False

        def view(args: list[Arg]) -> list[Arg]:
            nonlocal dropped
            out: list[Arg] = []
            for arg in args:
                if not isinstance(arg, TensorRecord):
                    out.append(arg)
                    continue
                found = [t.get(arg.path) for t in tables]
                npu = mine.get(arg.path)
                records = [r for r in found if r is not None]
                if npu is None or len(records) != len(found):
                    out.append(arg)
                    continue
                axis = self._axis(npu, arg)
                if axis is None and (_key(arg) in self.reduced or arg.role == "grad" or (
                        arg.role == "output" and (sliced or reads_reduced))):
                    self.reduced.add(_key(arg))  # a sum over the batch: not this rank's
                    dropped = True
                    continue
                out.append(arg if axis is None else self._part(records, npu, axis, base))
            return out

        inputs = view(base.inputs)
        if is_collective(ours):  # its process group is the layout's: the NPU's own
            theirs = {a.path: a for a in ours.inputs if not isinstance(a, TensorRecord)}
            inputs = [theirs.get(a.path, a) if not isinstance(a, TensorRecord) else a
                      for a in inputs]
        made = replace(base, inputs=inputs, outputs=view(base.outputs),
                       parameters=[r for r in view(list(base.parameters))
                                   if isinstance(r, TensorRecord)],
                       fixed_inputs=None, fixed_outputs=None, fixed_signature=None)
        made.fix_tensors()
        if dropped:
            self.left_out[base.name] = (
                f"not compared: a value summed over the batch (the loss, a parameter's "
                f"gradient) is over {_share(self.dn)} on NPU DP rank {self.dp_rank}, over "
                f"{_share(self.db)} on the bench's (DP={self.dn} against DP={self.db}; the "
                "all-reduce that completes a gradient runs after the dump): the values made "
                "per sample are compared")
        return made

    def _axis(self, npu: TensorRecord | None, bench: TensorRecord) -> int | None:
        """The batch dimension: the first along which the NPU's size is the bench's times
        Db/Dn (a TP shard's dimension has another ratio: ``layouts_problem``)."""
        if npu is None or len(npu.shape) != len(bench.shape):
            return None
        return next((k for k, (a, b) in enumerate(zip(npu.shape, bench.shape, strict=True))
                     if a != b and a * self.dn == b * self.db), None)

    def _part(self, records: list[TensorRecord], npu: TensorRecord, axis: int,
              call: Call) -> TensorRecord:
        """The bench's part of the batch the NPU rank reads (a gradient at the backward's
        scale): a slice of one bench DP rank's record, or several joined."""
        first = records[0]
        if self.dn < self.db:
            width = first.shape[axis] * len(records)
            stats = joined_stats(records)
            scale = self._scale_of(npu.stats.norm, stats.norm) if self.backward else 1.0
            return BatchRecord(first, _resized(first.shape, axis, width), records, axis,
                               (0, width), stats, scale)
        if not first.has_data:
            whole = self._join(call.name, npu, axis, first)
            if whole is not None:  # the NPU's parts joined meet the bench's whole
                scale = (self._scale_of(whole.stats.norm, first.stats.norm) if self.backward
                         else 1.0)
                return BatchRecord(first, first.shape, records, axis, (0, first.shape[axis]),
                                   first.stats, scale)
        width = first.shape[axis] * self.db // self.dn
        j = self.dp_rank % (self.dn // self.db)
        span = (j * width, (j + 1) * width)
        scale = 1.0
        if self.backward:
            part = _norm(first, axis, span) if first.has_data and npu.shape == _resized(
                first.shape, axis, width) else None
            scale = self._scale_of(npu.stats.norm, part)
        return BatchRecord(first, _resized(first.shape, axis, width), records, axis, span,
                           Stats(), scale)

    def _scale_of(self, mine: float | None, part: float | None) -> float:
        """The backward's scale, from the first batch gradient whose Norm both sides show
        (the NPU's, the bench part's): of 1 and Dn/Db, the one nearer their ratio."""
        if self.scale is not None:
            return self.scale
        if part is None or mine is None or part <= 0 or mine <= 0:
            return self.dn / self.db  # not shown yet: the usual mean loss, until it is
        ratio = math.log(mine / part)
        self.scale = min((1.0, self.dn / self.db), key=lambda s: abs(math.log(s) - ratio))
        return self.scale

    def _join(self, name: str, npu: TensorRecord, axis: int, bench: TensorRecord
              ) -> TensorRecord | None:
        """Against a coarser bench dumped as statistics: the NPU ranks' parts of its batch
        joined (``with_joined`` puts the join in the NPU record's place), where each of them
        recorded every statistic, else None."""
        records = []
        for peer in self.peers:
            call = peer.get(name)
            found = {r.path: r for r in _records(call)}.get(npu.path) if call else None
            if found is None or found.shape != npu.shape:
                return None
            records.append(found)
        stats = joined_stats(records) if records else Stats()
        if stats.norm is None:
            return None
        whole = ShardRecord(npu, bench.shape, records, axis, (0, bench.shape[axis]), stats)
        ranks = tuple(peer.rank for peer in self.peers)
        self.joined.setdefault(name, (ranks, {}))[1][npu.path] = whole
        return whole



def _share(dp: int) -> str:
    return "the whole batch" if dp == 1 else f"1/{dp} of the batch"


def _resized(shape: tuple[int, ...], axis: int, width: int) -> tuple[int, ...]:
    return (*shape[:axis], width, *shape[axis + 1:])


def _norm(record: TensorRecord, axis: int, span: tuple[int, int]) -> float:
    """The Norm of a slice of a record's tensor."""
    part = as_float64(record.load()).take(range(*span), axis=axis)
    return float(np.sqrt(np.square(part).sum()))


def _key(record: TensorRecord) -> Key:
    return record.dtype, record.shape, tuple(record.stats)


def _records(call: Call) -> list[TensorRecord]:
    return call.input_tensors + call.parameters + call.output_tensors
