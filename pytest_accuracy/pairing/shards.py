"""A bench sharded otherwise, seen from one NPU rank: each tensor the slice it holds.

An NPU run at TP=2 against a bench at TP=1 or TP=4 (same data-parallel split and pipeline
stages) is compared rank by rank against a *view* of the bench: for NPU rank r, the calls of
the bench ranks that hold r's part of the model (``layouts.bench_ranks``), each record
replaced by what r holds of it:

* a tensor sharded along one dimension (column-parallel outputs, sharded weights, a
  vocabulary-parallel head's logits: the NPU's shape times its TP size equals the bench's
  times its TP size there) is the slice of the bench shards concatenated along it;
* a *partial* value (the full-shaped output of a call that reads a shard, such as a
  row-parallel Linear's partial sums or a vocabulary-parallel lookup, of a call whose
  arguments depend on the TP rank, or of a call that reads a partial value) is not compared
  unless the ranks that hold it hold it alike; the collective that completes it is, and what
  follows (``_View``);
* any other full-shaped tensor is replicated: the bench's as it is.

Tensor dumps give every slice. From statistics, a slice that is a union of whole bench shards
combines theirs (Max, Min; Mean by element counts; Norm as the root of the sum of squares);
any other slice takes them from the bench's tensors where it dumped them; else, against a
coarser bench (NPU TP=2 against TP=1), the NPU ranks that share a bench shard are joined the
same way and compared with it whole (``with_joined``: a difference shows on each of them, and
which rank's shard makes it needs tensors); else it has none (unchecked, said so).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from pytest_accuracy.dumps.model import (
    Arg,
    Call,
    Dump,
    DumpSet,
    TensorRecord,
    is_collective,
)
from pytest_accuracy.pairing.batch_parts import Joins, backward_scale, dp_joins
from pytest_accuracy.pairing.data_parallel import dp_matched
from pytest_accuracy.pairing.layouts import Layout, bench_ranks, layouts_problem, stage_place
from pytest_accuracy.pairing.shard_records import (
    ShardRecord,
    joined_stats,
    near,
    remade_call,
    same_values,
    shard_axis,
    shard_of,
)
from pytest_accuracy.pairing.stages import stage_view, stages_joined


def relayout(npu: DumpSet, npu_layout: Layout, bench: DumpSet, bench_layout: Layout
             ) -> DumpSet:
    """The bench as each NPU rank sees it (keyed by the NPU's step and rank); ranks whose
    bench ranks are missing at a step are left out (the compare says so). The NPU ranks of
    one TP group loaded together tell a replicated value from a partial one."""
    problem = layouts_problem(npu_layout, bench_layout)
    if problem:
        raise ValueError(problem)
    joins: Joins = {}
    if npu_layout.dp != bench_layout.dp:
        joins = dp_joins(npu, npu_layout, bench, bench_layout)
        scale = backward_scale(npu, npu_layout, bench, bench_layout, joins)
        bench, bench_layout = dp_matched(npu, npu_layout, bench, bench_layout, joins, scale)
        bench.notes.append(f"batch gradients compared at {scale[0]:g}x the bench's "
                           f"({scale[1]})")
        if (npu_layout.tp, npu_layout.pp) == (bench_layout.tp, bench_layout.pp):
            return _with_joins(bench, joins)  # the NPU's layout now: keyed by its ranks
        npu = _joins_swapped(npu, joins)  # the TP view meets the NPU's joined parts
    views: dict[tuple[int, int], _View] = {}
    unmade: dict[tuple[int, int], str] = {}
    for (step, rank), mine in npu.dumps.items():
        group = [d for r in bench_ranks(npu_layout, bench_layout, rank)
                 if (d := bench.dumps.get((step, r))) is not None]
        if len(group) < len(bench_ranks(npu_layout, bench_layout, rank)):
            continue
        group, why = _staged(group, mine, npu_layout, bench_layout)
        if why:
            unmade[(step, rank)] = why
            continue
        tp_rank, dp_rank, pp_rank = npu_layout.coords(rank)
        peers = {j: d for j in range(npu_layout.tp)
                 if (d := npu.dumps.get((step, npu_layout.rank(j, dp_rank, pp_rank))))}
        views[(step, rank)] = _View(mine, peers, group, npu_layout.tp, bench_layout.tp, tp_rank)
    made = {key: view.dump() for key, view in views.items()}
    # a value is partial on every rank of its TP group or on none: one rank alone reading a
    # partial value where its peers read the complete one (an all-reduce it skipped) is
    # compared, and fails there
    for (step, rank), view in views.items():
        _, dp_rank, pp_rank = npu_layout.coords(rank)
        group = [made[k] for j in range(npu_layout.tp)
                 if (k := (step, npu_layout.rank(j, dp_rank, pp_rank))) in made]
        agreed = set.intersection(*(set(d.left_out) for d in group))
        if agreed != set(made[(step, rank)].left_out):
            view.agreed = agreed
            view.partial, view.left_out = set(), {}  # its exchanges stay what they were
            made[(step, rank)] = view.dump()
    if npu_layout.pp != bench_layout.pp:
        for (_, rank), dump in made.items():
            dump.stage, dump.stages = npu_layout.coords(rank)[2], npu_layout.pp
    return _with_joins(DumpSet(bench.root, made, unmade, bench.notes), joins)


def _with_joins(view: DumpSet, joins: Joins) -> DumpSet:
    """The view with the NPU's joined DP parts added to each rank's joined records (a TP
    join made of them stays: it holds both)."""
    for key, calls in joins.items():
        dump = view.dumps.get(key)
        if dump is None:
            continue
        for name, (ranks, records) in calls.items():
            had_ranks, had = dump.joined.get(name, ((), {}))
            merged = tuple(sorted(set(ranks) | set(had_ranks)))
            dump.joined[name] = (merged, {**records, **had})
    return view


def _joins_swapped(npu: DumpSet, joins: Joins) -> DumpSet:
    """The NPU run with its joined DP parts in place of each rank's own."""
    if not joins:
        return npu
    made = dict(npu.dumps)
    for key, calls in joins.items():
        dump = npu.dumps[key]
        made[key] = replace(dump, calls=[_swapped(c, calls[c.name][1]) if c.name in calls
                                         else c for c in dump.calls])
    return DumpSet(npu.root, made, npu.unmade)


def _staged(group: list[Dump], mine: Dump, npu_layout: Layout, bench_layout: Layout
            ) -> tuple[list[Dump], str]:
    """The bench ranks' dumps as the NPU rank's pipeline stage makes its calls, or why not:
    a bench of fewer stages, the calls of its stage that the NPU's makes; of more, its
    stages (``per``, stage by stage in ``group``) joined per TP position."""
    if bench_layout.pp > npu_layout.pp:
        per = bench_layout.pp // npu_layout.pp
        size = len(group) // per
        joined = [stages_joined(group[j::size], mine) for j in range(size)]
        if any(d is None for d in joined):
            return group, ("its pipeline stage's calls are not found in order among those of "
                           "the bench stages it holds (the NPU makes operations the bench "
                           "does not, or in another order)")
        return [d for d in joined if d is not None], ""
    if npu_layout.pp == bench_layout.pp:
        return group, ""
    place = stage_place(npu_layout, bench_layout, mine.rank)
    staged = [stage_view(d, mine, place) for d in group]
    if any(d is None for d in staged):
        return group, (f"its pipeline stage's calls are not found in order among bench rank "
                       f"{group[0].rank}'s (the stage makes operations the bench does not, or "
                       "in another order)")
    return [d for d in staged if d is not None], ""


def with_joined(npu: DumpSet, view: DumpSet) -> DumpSet:
    """The NPU run with the records ``view`` joined over their TP groups in place of each
    rank's own shard (``relayout``), so that both sides hold the bench shard's whole."""
    if not any(d.joined for d in view.dumps.values()):
        return npu
    made: dict[tuple[int, int], Dump] = {}
    for key, dump in npu.dumps.items():
        other = view.dumps.get(key)
        if other is None or not other.joined:
            made[key] = dump
            continue
        calls = []
        for call in dump.calls:
            records = other.joined.get(call.name, ((), {}))[1]
            calls.append(_swapped(call, records) if records else call)
        made[key] = replace(dump, calls=calls)
    return DumpSet(npu.root, made, npu.unmade)


def _swapped(call: Call, records: dict[str, TensorRecord]) -> Call:
    def swap(args: Sequence[Arg]) -> list[Arg]:
        return [records.get(a.path, a) if isinstance(a, TensorRecord) else a for a in args]

    made = replace(call, inputs=swap(call.inputs), outputs=swap(call.outputs),
                   parameters=[r for r in swap(call.parameters) if isinstance(r, TensorRecord)],
                   fixed_inputs=None, fixed_outputs=None, fixed_signature=None)
    made.fix_tensors()
    return made


class _View:
    """One NPU rank's view of its bench ranks, call by call in execution order.

    A *partial* value differs from rank to rank of a TP group by design: the full-shaped
    output of a call that reads a shard (a row-parallel Linear's partial sums, a vocabulary-
    parallel lookup), of one whose arguments depend on the TP rank (a vocabulary range), or of
    one that reads a partial value, until a collective completes it; unless the bench ranks
    (or, at bench TP=1, the NPU's own TP peers) hold it alike, which shows it complete (a
    module that all-reduces inside). Partial values are not compared: the value is, after the
    collective."""

    def __init__(self, mine: Dump, peers: dict[int, Dump], group: list[Dump], tn: int,
                 tb: int, tp_rank: int, agreed: set[str] | None = None) -> None:
        self.mine, self.by_tp, self.group = mine, peers, group
        self.peers = list(peers.values())
        self.agreed = agreed  # the calls partial on every rank of the TP group
        self.tn, self.tb, self.tp_rank = tn, tb, tp_rank
        self.partial: set[Key] = set()  # the NPU rank's partial values
        self.left_out: dict[str, str] = {}
        self.exchanges: set[str] = set()
        self.joined: dict[str, tuple[tuple[int, ...], dict[str, TensorRecord]]] = {}

    def dump(self) -> Dump:
        calls: list[Call] = []
        for call in self.group[0].calls:
            parts = [c for d in self.group if (c := d.get(call.name)) is not None]
            ours = self.mine.get(call.name)
            if len(parts) != len(self.group):
                continue
            calls.append(self._call(parts, ours) if ours is not None else call)
        ranks = tuple(r for d in self.group for r in d.bench_ranks or (d.rank,))
        notes = [f"the bench ranks holding NPU rank {self.mine.rank}'s part: "
                 + ", ".join(map(str, sorted(ranks)))]
        first = self.group[0]
        by_call = {c.name: tuple(sorted(r for d in self.group
                                         for r in d.call_ranks.get(c.name, (d.rank,))))
                   for c in calls if c.name in first.call_ranks}
        left_out = {k: v for d in self.group for k, v in d.left_out.items()}
        return Dump(first.path, first.framework, first.level, first.mode, self.mine.step,
                    self.mine.rank, calls, notes, {**left_out, **self.left_out},
                    self.exchanges,
                    joined=self.joined, bench_ranks=tuple(sorted(ranks)), call_ranks=by_call)

    def _call(self, parts: list[Call], ours: Call) -> Call:
        mine = {r.path: r for r in _records(ours)}
        base = parts[0]
        why = self._partial_reason(parts, ours, mine)
        if self.agreed is not None and base.name not in self.agreed:
            why = ""
        tables = [{r.path: r for r in _records(c)} for c in parts]
        dropped = False

        def view(args: list[Arg]) -> list[Arg]:
            nonlocal dropped
            out: list[Arg] = []
            for arg in args:
                shards = ([t.get(arg.path) for t in tables] if isinstance(arg, TensorRecord)
                          else [])
                if not isinstance(arg, TensorRecord) or any(s is None for s in shards):
                    out.append(arg)
                    continue
                found = [s for s in shards if s is not None]
                npu = mine.get(arg.path)
                if arg.role == "input" and npu is not None and _key(npu) in self.partial:
                    continue  # a partial value read: it differs by design, like its maker
                if why and arg.role == "output" and (npu is None or npu.shape == found[0].shape
                                                     or why.startswith("it gathers")):
                    if (npu is not None and not why.startswith("it gathers")
                            and self._alike(parts, ours, arg)):
                        # it completes the value inside, alike on its NPU peers: an error
                        # there may come from another rank (one that differs made its own)
                        if why == "it reads a shard" and self._peers_alike(ours, arg):
                            self.exchanges.add(base.name)
                    else:
                        dropped = True
                        if npu is not None:
                            self.partial.add(_key(npu))
                        continue
                record = shard_of(found, npu, self.tn, self.tb, self.tp_rank)
                if npu is not None and isinstance(record, ShardRecord) and not (
                        record.has_data or record.stats.norm is not None):
                    record = self._join(base.name, npu, found[0]) or record
                out.append(record)
            return out

        made = remade_call(base, ours, view, own_scalars=is_collective(ours) or bool(why))
        if dropped:
            self.left_out[base.name] = (
                f"not compared: its output on NPU rank {self.mine.rank} (TP rank "
                f"{self.tp_rank} of {self.tn}) is a partial value ({why}) that the bench at "
                f"TP={self.tb} does not make: the value is compared after the collective that "
                "completes it")
        return made

    def _join(self, name: str, npu: TensorRecord, bench: TensorRecord) -> TensorRecord | None:
        """Against a coarser bench dumped as statistics: the bench shard whole, where the NPU
        ranks sharing it recorded every statistic of theirs (their join takes the NPU
        record's place, ``with_joined``), else None."""
        if self.tn <= self.tb or self.tn % self.tb:
            return None
        per = self.tn // self.tb
        first = self.tp_rank // per * per
        records: list[TensorRecord] = []
        for j in range(first, first + per):
            call = self.by_tp[j].get(name) if j in self.by_tp else None
            found = {r.path: r for r in _records(call)}.get(npu.path) if call else None
            if found is None or found.shape != npu.shape:
                return None
            records.append(found)
        axis = shard_axis(npu.shape, bench.shape, self.tn, self.tb)
        stats = joined_stats(records)
        if axis is None or stats.norm is None:
            return None
        ranks = tuple(self.by_tp[j].rank for j in range(first, first + per))
        whole = ShardRecord(npu, bench.shape, records, axis, (0, bench.shape[axis]), stats)
        self.joined.setdefault(name, (ranks, {}))[1][npu.path] = whole
        return bench

    def _partial_reason(self, parts: list[Call], ours: Call,
                        mine: dict[str, TensorRecord]) -> str:
        """Why the call's full-shaped outputs may be partial values, else ''."""
        if is_collective(ours):
            if len(ours.output_tensors) != len(parts[0].output_tensors):
                return (f"it gathers {len(ours.output_tensors)} pieces where the bench's "
                        f"gathers {len(parts[0].output_tensors)}")
            return ""
        forward = ours.name.replace(".backward", ".forward")
        if forward != ours.name and forward in self.left_out:
            return "its forward's output was a partial value"
        if any(r.path in mine and mine[r.path].shape != r.shape
               for r in parts[0].input_tensors + parts[0].parameters):
            return "it reads a shard"
        if any(_key(r) in self.partial for r in ours.input_tensors):
            return "it reads a partial value"
        peers = [c for d in self.peers if (c := d.get(ours.name)) is not None]
        # the bench is clean: arguments that differ between its ranks are the layout's; the
        # NPU's may differ by a bug, unless they are integers (an index range such as a
        # vocabulary shard's start), which a float that differs (an eps) never is
        if len({_scalars(c) for c in parts}) > 1 or len({_scalars(c, ints=True)
                                                         for c in peers}) > 1:
            return "its arguments depend on the TP rank"
        return ""

    def _peers_alike(self, ours: Call, arg: TensorRecord) -> bool:
        calls = [c for d in self.peers if (c := d.get(ours.name)) is not None]
        found = [{r.path: r for r in _records(c)}.get(arg.path) for c in calls]
        records = [r for r in found if r is not None]
        return len(records) < 2 or (len(records) == len(found) and same_values(records))

    def _alike(self, parts: list[Call], ours: Call, arg: TensorRecord) -> bool:
        """Whether the value is the same on every rank that holds it: on the bench ranks
        (two or more), else on the NPU rank's TP peers."""
        if len(parts) > 1:
            calls = parts
        else:
            calls = [c for d in self.peers if (c := d.get(ours.name)) is not None]
            if len(calls) < 2:
                return False
        found = [{r.path: r for r in _records(c)}.get(arg.path) for c in calls]
        records = [r for r in found if r is not None]
        if len(records) == len(found) and same_values(records):
            return True
        # the peers differ: one of them skipped the exchange (a bug), the others made the
        # complete value, which is the bench's; partial sums near it would be a coincidence
        mine = {r.path: r for r in _records(ours)}.get(arg.path)
        return len(parts) == 1 and mine is not None and near(mine, arg)


Key = tuple[str, tuple[int, ...], tuple[float | None, ...]]


def _key(record: TensorRecord) -> Key:
    """A value as one rank's dump records it (a call's output read by a later call)."""
    return record.dtype, record.shape, tuple(record.stats)


def _scalars(call: Call, ints: bool = False) -> tuple[tuple[str, str], ...]:
    """The call's non-tensor arguments (``ints``: its integer ones only)."""
    return tuple((a.path, repr(a.value)) for a in call.scalar_inputs
                 if not ints or (isinstance(a.value, int) and not isinstance(a.value, bool)))


def _records(call: Call) -> list[TensorRecord]:
    return call.input_tensors + call.parameters + call.output_tensors
