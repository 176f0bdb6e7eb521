"""A bench of another data-parallel size seen as the NPU's: each DP rank's part of the batch.

An NPU run at DP=2 against a bench at DP=1 (the same global batch, one micro-batch a step)
reads half of each batch on each DP rank: its activations are slices of the bench's along
the batch dimension, its loss the mean over its half. ``dp_matched`` makes, for every NPU DP
rank, a bench dump of the NPU's DP size (the bench's TP and PP kept, so that ``shards``
relayouts it further where those differ too):

* a tensor whose NPU shape is the bench's times Db/Dn along one dimension (the batch; the
  first such, before a TP shard's) is the NPU rank's slice of the bench rank's (an NPU of
  more DP ranks), or the bench DP ranks' joined (of fewer: their statistics combine);
* a tensor of the bench's shape made by a call that reads a batch slice (the loss, a
  parameter's gradient: sums over the batch; the DP all-reduce that completes a gradient is
  outside the dump) is the DP ranks' sum: where its parts are known (tensors, a scalar's
  value) and the TP sizes agree, the NPU DP peers' values added up (over the backward's
  scale, ``SumRecord`` in the NPU record's place) meet the bench's, or the bench DP ranks'
  meet the NPU's; else it is left out, and so is what reads it;
* a gradient of a loss averaged over the rank's part of the batch is Dn/Db times the bench's
  slice: the backward is compared at the scale the first batch gradient shows (1 or Dn/Db);
* any other tensor (weights, masks) is the bench's as it is.

From statistics an NPU rank's slice of a coarser bench has none: its DP peers' parts are
joined instead (``batch_parts.dp_joins``) and met with the bench's whole batch, the joined
records taking the NPU records' place as a coarser bench's TP shards do (``with_joined``).
"""

from __future__ import annotations

from pytest_accuracy.dumps.model import Arg, Call, Dump, DumpSet, TensorRecord, is_collective
from pytest_accuracy.dumps.stats import Stats
from pytest_accuracy.pairing.batch_parts import (
    Joins,
    batch_axis,
    dp_group,
    dp_sources,
    records_of,
)
from pytest_accuracy.pairing.layouts import Layout
from pytest_accuracy.pairing.shard_records import (
    BatchRecord,
    SumRecord,
    joined_stats,
    remade_call,
    summable,
)

Key = tuple[str, tuple[int, ...], tuple[float | None, ...]]


def dp_matched(npu: DumpSet, npu_layout: Layout, bench: DumpSet, bench_layout: Layout,
               joins: Joins, scale: tuple[float, str]) -> tuple[DumpSet, Layout]:
    """The bench as a run of the NPU's DP size and the bench's TP and PP (its layout): one
    dump per NPU DP rank and bench TP and PP place, made of the bench DP ranks that read its
    part of the batch (``dp_sources``); the batch parts the NPU ranks' ``joins`` join are
    the bench's whole; gradients at ``scale`` (``batch_parts.backward_scale``). Places whose
    bench ranks are not loaded are left out."""
    layout = Layout(bench_layout.tp, npu_layout.dp, bench_layout.pp)
    made: dict[tuple[int, int], Dump] = {}
    for step in sorted({s for s, _ in npu.dumps}):
        for d in range(npu_layout.dp):
            for t in range(bench_layout.tp):
                for p in range(bench_layout.pp):
                    reference, joined = _reference(npu, npu_layout, step, (t, d, p), joins)
                    sources = [bench.dumps.get((step, bench_layout.rank(t, e, p)))
                               for e in dp_sources(npu_layout, bench_layout, d)]
                    found = [s for s in sources if s is not None]
                    if reference and len(found) == len(sources):
                        view = _DpView(found, reference, npu_layout, bench_layout, d)
                        view.joined, view.scale = joined, scale
                        view.peers = _peers(npu, npu_layout, bench_layout, step, (t, d, p))
                        made[(step, layout.rank(t, d, p))] = view.dump()
    return DumpSet(bench.root, made, bench.unmade), layout


def _peers(npu: DumpSet, npu_layout: Layout, bench_layout: Layout, step: int,
           place: tuple[int, int, int]) -> list[Dump] | None:
    """The NPU ranks whose parts of the batch make one bench DP rank's, at place (t, d, p)
    where the runs' TP sizes agree (their sums over the batch add up to the bench's), in DP
    order; None where one is not loaded or the TP sizes differ."""
    if npu_layout.tp != bench_layout.tp or npu_layout.dp <= bench_layout.dp:
        return None
    found = [npu.dumps.get((step, r))
             for r in dp_group(npu_layout, bench_layout, npu_layout.rank(*place))]
    return [f for f in found if f is not None] if None not in found else None


def _reference(npu: DumpSet, layout: Layout, step: int, place: tuple[int, int, int],
               joins: Joins) -> tuple[dict[str, Call], set[tuple[str, str]]]:
    """The NPU's calls at DP rank d of place (t, d, p) by name, rank (t, d, p)'s first (its
    values at one TP size), then any TP place's: their shapes say which dimension is the
    batch; and the (call, path) whose parts the NPU joins."""
    calls: dict[str, Call] = {}
    joined: set[tuple[str, str]] = set()
    own = layout.rank(*place) if place[0] < layout.tp else -1
    for (s, rank), dump in sorted(npu.dumps.items(), key=lambda kv: (kv[0][1] != own, kv[0])):
        if s == step and layout.coords(rank)[1] == place[1]:
            for call in dump.calls:
                calls.setdefault(call.name, call)
            joined.update((name, path) for name, (_, records) in joins.get((s, rank), {}).items()
                          for path in records)
    return calls, joined


class _DpView:
    """One NPU DP rank's view of the bench DP ranks that read its part of the batch."""

    def __init__(self, sources: list[Dump], reference: dict[str, Call], npu: Layout,
                 bench: Layout, dp_rank: int) -> None:
        self.sources, self.reference = sources, reference
        self.dn, self.db, self.dp_rank = npu.dp, bench.dp, dp_rank
        self.joined: set[tuple[str, str]] = set()  # (call, path) the NPU's peers join
        self.scale = (npu.dp / bench.dp, "")  # the backward's, and why
        self.reduced: set[Key] = set()  # values summed over the batch (bench side)
        self.left_out: dict[str, str] = {}
        # the NPU's DP peers whose sums over the batch add up to the bench's (an NPU of more
        # DP ranks at the bench's TP size), and those sums by call and path
        self.peers: list[Dump] | None = None
        self.sums: dict[str, tuple[tuple[int, ...], dict[str, TensorRecord]]] = {}
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
        return Dump(first.path, first.framework, first.level, first.mode, first.step,
                    first.rank, calls, notes, self.left_out, joined=self.sums,
                    bench_ranks=ranks, call_ranks={c.name: ranks for c in calls})

    def _call(self, parts: list[Call], ours: Call) -> Call:
        mine = {r.path: r for r in records_of(ours)}
        tables = [{r.path: r for r in records_of(c)} for c in parts]
        base = parts[0]
        sliced = any(self._axis(mine.get(r.path), r) is not None for r in base.input_tensors)
        name = base.name
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
                    summed = self._summed(name, arg, records) if arg.role != "input" else None
                    dropped = dropped or summed is None
                    if summed is not None:
                        out.append(summed)
                    continue
                whole = (name, arg.path) in self.joined  # the NPU's peers join theirs
                out.append(arg if axis is None else self._part(records, axis, whole))
            return out

        made = remade_call(base, ours, view, own_scalars=is_collective(ours))
        if dropped:
            self.left_out[base.name] = (
                f"not compared: a value summed over the batch (the loss, a parameter's "
                f"gradient) is over {_share(self.dn)} on NPU DP rank {self.dp_rank}, over "
                f"{_share(self.db)} on the bench's (DP={self.dn} against DP={self.db}; the "
                "all-reduce that completes a gradient runs after the dump), and the DP "
                "ranks' sum of it is not known here (their tensors, a scalar's value, at one "
                "TP size): the values made per sample are compared")
        return made

    def _summed(self, name: str, bench: TensorRecord, records: list[TensorRecord]
                ) -> TensorRecord | None:
        """A sum over the batch where its parts add up: the bench's against the NPU DP peers'
        sum over the backward's scale (``self.sums``), or the bench DP ranks' sum at it
        against the NPU's; None where the parts are not all known."""
        scale = self.scale[0]
        if self.dn < self.db:
            return SumRecord(bench, records, scale) if summable(records) else None
        if self.peers is None:
            return None
        found = [next((r for r in records_of(c) if r.path == bench.path), None)
                 for peer in self.peers if (c := peer.get(name)) is not None]
        parts = [r for r in found if r is not None and r.shape == bench.shape]
        if len(parts) != len(self.peers) or not summable(parts):
            return None
        ranks = tuple(peer.rank for peer in self.peers)
        self.sums.setdefault(name, (ranks, {}))[1][bench.path] = SumRecord(
            parts[0], parts, 1.0 / scale)
        return bench

    def _axis(self, npu: TensorRecord | None, bench: TensorRecord) -> int | None:
        return None if npu is None else batch_axis(npu.shape, bench.shape, self.dn, self.db)

    def _part(self, records: list[TensorRecord], axis: int, whole: bool) -> TensorRecord:
        """The bench's part of the batch the NPU rank reads (a gradient at the backward's
        scale): a slice of one bench DP rank's record, several joined, or (``whole``: the
        NPU's parts joined) the bench DP rank's whole."""
        first = records[0]
        scale = self.scale[0] if self.backward else 1.0
        if self.dn < self.db or whole:
            width = first.shape[axis] * len(records)
            return BatchRecord(first, (*first.shape[:axis], width, *first.shape[axis + 1:]),
                               records, axis, (0, width), joined_stats(records), scale)
        width = first.shape[axis] * self.db // self.dn
        j = self.dp_rank % (self.dn // self.db)
        return BatchRecord(first, (*first.shape[:axis], width, *first.shape[axis + 1:]),
                           records, axis, (j * width, (j + 1) * width), Stats(), scale)


def _share(dp: int) -> str:
    return "the whole batch" if dp == 1 else f"1/{dp} of the batch"


def _key(record: TensorRecord) -> Key:
    return record.dtype, record.shape, tuple(record.stats)
