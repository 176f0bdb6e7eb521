"""Run-wide facts from metadata alone: where divergence shows, who produced each input.

Built once per process from dump.json contents (dtypes, statistics, checksums, arguments)
without reading a tensor file, so every pytest-xdist worker has the same facts and
decides each of its nodes the same way as a serial run would.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from pytest_accuracy.compare.criteria import CompareCriteria, judge_md5, judge_stats, less_precise
from pytest_accuracy.compare.findings import (
    argument_finding,
    precision_finding,
    scalar_diffs,
)
from pytest_accuracy.compare.judge import diverging_in_metadata, outputs_diverge_in_metadata
from pytest_accuracy.compare.metrics import negated, stats_metrics
from pytest_accuracy.compare.results import Finding
from pytest_accuracy.compare.stats_table import StatsTable, output_pairs, rows_diverge
from pytest_accuracy.compare.twins import identical_steps, same_record, twin_step_before
from pytest_accuracy.dumps.model import (
    FLOAT_EPS,
    Call,
    Dump,
    TensorRecord,
    is_float_dtype,
)
from pytest_accuracy.pairing.anchors import leading
from pytest_accuracy.pairing.dp import stats_gap

StatsKey = tuple[str, float | None, float | None, float | None, float | None]


@dataclass
class Provenance:
    """Per node: metadata findings, a divergence flag, and who produced each input."""

    findings: list[list[Finding]] = field(default_factory=list)
    stats: StatsTable | None = None  # every paired output's statistics, compared at once
    flagged: list[bool] = field(default_factory=list)
    matched: list[bool] = field(default_factory=list)  # the node has a bench counterpart
    first_flag_before: list[int | None] = field(default_factory=list)
    twin_step: list[int | None] = field(default_factory=list)
    entries: list[tuple[Dump, Call]] = field(default_factory=list)  # the nodes, in run order
    _producers: dict[tuple[int, int], dict[StatsKey, int]] | None = None
    flagged_inside: dict[int, int] = field(default_factory=dict)  # module -> first descendant
    repeat_of: dict[int, int] = field(default_factory=dict)  # node -> same finding, earlier
    # node -> module whose code made it, found on demand (only a failing node asks)
    made_inside: Callable[[int], int | None] = lambda index: None
    # node -> the same call (name, rank) in the first earlier step that has it
    same_call_earlier: dict[int, int] = field(default_factory=dict)

    def origin(self, index: int) -> int:
        """The node that made the divergence first seen at ``index``."""
        module = self.made_inside(index)
        return index if module is None else module

    def carrier_of(self, module: int) -> int | None:
        """The first node whose divergence ``module``'s own code made, if any (only a module
        call makes one: ``made_inside`` names modules; for any other node, no scan)."""
        if self.entries[module][1].kind != "module":
            return None
        for i in range(len(self.entries)):
            if self.first_flag_before[i] is not None:
                break  # nothing after the first divergence is placed
            if self.made_inside(i) == module:
                return i
        return None

    def producer_of(self, dump: Dump, record: TensorRecord, before: int) -> int | None:
        """The earliest earlier node whose output has exactly this input's statistics."""
        key = _stats_key(record)
        if key is None:
            return None
        here = self.producers.get((dump.step, dump.rank))
        found = here.get(key) if here is not None else None
        return found if found is not None and found < before else None

    @property
    def producers(self) -> dict[tuple[int, int], dict[StatsKey, int]]:
        """(step, rank) -> (an output's dtype and statistics) -> the earliest node that output
        it. Indexed when first asked (a run whose dtypes and nodes all agree never asks);
        ``producer_of`` takes only nodes before the asker, as a scan in order would have.
        A dict per dump: no (step, rank, key) tuple a record (6 MB at 100k nodes)."""
        if self._producers is None:
            producers: dict[tuple[int, int], dict[StatsKey, int]] = {}
            last: Dump | None = None
            here: dict[StatsKey, int] = {}
            for index, (dump, call) in enumerate(self.entries):
                if dump is not last:
                    here, last = producers.setdefault((dump.step, dump.rank), {}), dump
                for record in call.output_tensors:
                    # _stats_key, inline (every output of the run): Stats is (max, min, mean,
                    # norm), the key's order after the dtype
                    s = record.stats
                    if s.max is not None or s.norm is not None:
                        here.setdefault((record.dtype, *s), index)
            self._producers = producers
        return self._producers


def build(
    entries: list[tuple[Dump, Call]],
    bench_call: Callable[[int], Call | None],
    bench_framework: Callable[[Dump], str],
    dtypes: list[str],
    criteria: CompareCriteria,
    in_region: Callable[[int], bool] = lambda index: False,
    other_code: Callable[[int], bool] = lambda index: False,
) -> Provenance:
    """Scan every node's metadata once (O(nodes); no tensor is read). A region-node pair
    (``in_region``) shares only its leading output with the bench: no findings, and only
    that output is compared."""
    prov = Provenance(entries=entries)
    pairs = [(dump, call, bench_call(i)) for i, (dump, call) in enumerate(entries)]
    paired, counts = output_pairs(pairs)
    prov.stats = StatsTable(paired)
    del paired  # held no longer than before (6 MB at 100k nodes): rows are read by number
    row = 0  # node i's output pairs are the table's rows row .. row + counts[i] - 1
    dumps = {id(d): d for d, _ in entries}.values()  # each dump once, not each node
    # a rank with one step has no earlier call of a name (the table: ~20 MB at 100k nodes),
    # nor a step that a later one follows: no twin (identical_steps judges none; a scan less)
    several_steps = len(dumps) > len({d.rank for d in dumps})
    identical = identical_steps(pairs) if several_steps else set()
    # the first flagged node a node may carry: of an earlier step (any rank: the optimizer's
    # all-reduce carries it), else of its own step and rank (another rank's error reaches
    # this one within a step only through a collective this rank records)
    first_earlier: int | None = None
    first_this_step: int | None = None
    first_here: dict[tuple[int, int], int] = {}
    step_now: int | None = None
    held: list[CompareCriteria] = []
    changed: set[tuple[int, int]] = set()  # (step, rank) where an output dtype already differed
    seen: dict[tuple[str, str, tuple[str, ...]], int] = {}
    first_calls: dict[tuple[int, str], tuple[int, int]] = {}  # (rank, name) -> (step, node)
    rounding = criteria.held_to_rounding()  # after an identical step (one object: its memo)
    for i, (dump, call, bench) in enumerate(pairs):
        if dump.step != step_now:
            first_earlier = first_earlier if first_earlier is not None else first_this_step
            first_this_step, step_now = None, dump.step
        first = (first_earlier if first_earlier is not None or not first_here
                 else first_here.get((dump.step, dump.rank)))
        prov.matched.append(bench is not None)
        prov.first_flag_before.append(first)
        twin = twin_step_before(identical, dump.step, dump.rank)
        prov.twin_step.append(twin)
        node_criteria = rounding if twin is not None else criteria  # no waiver: as held
        held.append(node_criteria)
        region = bench is not None and in_region(i)
        twin_asked = twin if first is None else None
        same_dtypes = bench is not None and call.dtype_signature == bench.dtype_signature
        if region or bench is None or (
                same_dtypes and twin_asked is None and not call.scalar_inputs):
            found = []  # what _findings_at finds there (most nodes), without its call
        else:
            found = _findings_at(
                prov, i, dump, call, bench, twin_asked,
                dump.framework == bench_framework(dump), dtypes[i], node_criteria,
                (dump.step, dump.rank) in changed,
            )
        if found and other_code(i):  # the precision the step went through before this node
            before = dtypes[i - 1] if i and entries[i - 1][0] is dump else "float64"
            found = _beyond_run_precision(found, call, before)
        prov.findings.append(found or _NO_FINDINGS)
        if found:
            # the same change at the same kind of call (each bf16 Linear of an autocast run,
            # each step's call of a mis-configured norm) is one cause, failed once
            same = seen.setdefault((call.prefix, call.op, tuple(f.detail for f in found)), i)
            if same != i:
                prov.repeat_of[i] = same
        flagged = bool(found) or (bench is not None and (
            _diverges(call, bench, True, dtypes[i], node_criteria, prov.stats) if region
            else rows_diverge(prov.stats, call, bench, row, counts[i], dtypes[i],
                              node_criteria)))
        row += counts[i]
        prov.flagged.append(flagged)
        if several_steps:
            earlier = first_calls.setdefault((dump.rank, call.name), (dump.step, i))
            if earlier[0] < dump.step:
                prov.same_call_earlier[i] = earlier[1]
        if flagged:
            first_here.setdefault((dump.step, dump.rank), i)
            first_this_step = i if first_this_step is None else first_this_step
        if bench is not None and not same_dtypes and _output_dtype_differs(call, bench):
            changed.add((dump.step, dump.rank))
    _index_containment(prov, entries)
    cross = {(d.step, d.rank) for d in dumps if d.framework != bench_framework(d)}
    prov.made_inside = _MadeInside(prov, _Triples(entries, bench_call), dtypes, held, cross)
    return prov


def _beyond_run_precision(found: list[Finding], call: Call, dtype: str) -> list[Finding]:
    """Two codebases place their casts apart: a lower precision at a node of a step both
    runs already went through in that precision (``dtype``, the effective one) is theirs,
    judged by its values under that precision's tolerance; one below it is a finding."""
    lowest = "float64"
    for record in call.output_tensors:
        if is_float_dtype(record.dtype):
            lowest = less_precise(lowest, record.dtype)
    if less_precise(dtype, lowest) != dtype:
        return found
    return [f for f in found if f.kind != "precision"]


def _diverges(call: Call, bench: Call, region: bool, dtype: str, criteria: CompareCriteria,
              table: StatsTable) -> bool:
    if not region:
        return outputs_diverge_in_metadata(call, bench, dtype, criteria, table)
    mine, theirs = leading(call), leading(bench)
    if mine is None or theirs is None:
        return False
    if mine.md5 is not None and theirs.md5 is not None:
        return not judge_md5(mine.md5, theirs.md5).ok
    eff = less_precise(dtype, mine.dtype)
    tol = criteria.tolerance(eff)
    if judge_stats(stats_metrics(mine.stats, theirs.stats), eff, tol).ok:
        return False
    flipped = negated(mine.stats)  # the region's value before a negation not recorded
    return flipped is None or not judge_stats(stats_metrics(flipped, theirs.stats), eff, tol).ok


# the findings of a node without any: one list for them all (never changed; 5 MB at 100k)
_NO_FINDINGS: list[Finding] = []


class _Triples:
    """(dump, call, bench call) of each node, made when asked: the scan's list of them is
    7 MB at 100k nodes, and only a failing run's diagnosis reads them again."""

    def __init__(self, entries: list[tuple[Dump, Call]],
                 bench_call: Callable[[int], Call | None]) -> None:
        self._entries, self._bench_call = entries, bench_call

    def __getitem__(self, index: int) -> tuple[Dump, Call, Call | None]:
        dump, call = self._entries[index]
        return dump, call, self._bench_call(index)

    def __iter__(self) -> Iterator[tuple[Dump, Call, Call | None]]:
        return (self[i] for i in range(len(self._entries)))


def _findings_at(
    prov: Provenance, index: int, dump: Dump, call: Call, bench: Call | None,
    twin: int | None, same_framework: bool, dtype: str, criteria: CompareCriteria,
    after_change: bool,
) -> list[Finding]:
    """One node's metadata findings: precision, argument; after an identical step (and
    before any divergence), a parameter the update changed."""
    if bench is None:
        return []
    if call.dtype_signature == bench.dtype_signature and not call.scalar_inputs:
        found = []  # every tensor in the bench's dtype and no argument: nothing to find
    else:
        found = node_findings(call, bench, same_framework, dtype, criteria,
                              _produced_before(prov, dump, index, after_change),
                              _one_sided_producer(prov, dump, index, after_change))
    if twin is not None and not found:
        update = update_finding(call, bench, twin, dump.step,
                                _produced_before(prov, dump, index, False))
        found = [update] if update is not None else []
    return found


def node_findings(
    npu: Call,
    bench: Call,
    same_framework: bool,
    dtype: str,
    criteria: CompareCriteria,
    produced: Callable[[TensorRecord], bool] = lambda record: True,
    one_sided: Callable[[TensorRecord], str | None] = lambda record: None,
) -> list[Finding]:
    """Precision and argument findings: decided from metadata, whatever the value error."""
    found = []
    precision = precision_finding(npu, bench, criteria.allowed_precisions, produced, one_sided)
    if precision is not None:
        found.append(precision)
    diffs = scalar_diffs(npu, bench, same_framework)
    argument = argument_finding(diffs, criteria.tolerance(dtype).rel_err) if diffs else None
    if argument is not None:
        found.append(argument)

    return found


def update_finding(
    npu: Call, bench: Call, twin: int, step: int, produced: Callable[[TensorRecord], bool]
) -> Finding | None:
    """After an identical step, the first input no recorded node produced (a parameter)
    that is not identical was changed by the update between the steps, however little."""
    theirs = {r.path: r for r in bench.input_tensors + bench.parameters}
    for record in npu.input_tensors + npu.parameters:
        other = theirs.get(record.path)
        if other is None or same_record(record, other) or produced(record):
            continue
        return Finding(
            "update",
            f"{record.path} differs from the bench's although step {twin} was identical: the "
            f"update between step {twin} and step {step} changed it differently",
        )
    return None


def _produced_before(
    prov: Provenance, dump: Dump, index: int, after_change: bool
) -> Callable[[TensorRecord], bool]:
    """Whether an input of node ``index`` came from an earlier recorded node: its output by
    statistics, or (views and splits change statistics) any input after an earlier node of
    the step already changed dtype."""
    return lambda record: after_change or prov.producer_of(dump, record, index) is not None


def _one_sided_producer(
    prov: Provenance, dump: Dump, index: int, after_change: bool
) -> Callable[[TensorRecord], str | None]:
    """The name of the node only the NPU run records (a cast) that produced an input, unless
    an earlier node of the step already changed dtype (this one carries that change)."""
    def name(record: TensorRecord) -> str | None:
        if after_change:
            return None
        producer = prov.producer_of(dump, record, index)
        if producer is None or prov.matched[producer]:
            return None
        return prov.entries[producer][1].name
    return name


def _output_dtype_differs(npu: Call, bench: Call) -> bool:
    if npu.dtype_signature == bench.dtype_signature:
        return False
    theirs = {r.path: r.dtype for r in bench.output_tensors}
    return any(r.path in theirs and theirs[r.path] != r.dtype for r in npu.output_tensors)


def _index_containment(prov: Provenance, entries: list[tuple[Dump, Call]]) -> None:
    """For each module node, the earliest flagged node recorded inside it."""
    if not any(prov.flagged):
        return  # nothing flagged is inside anything (the tables below cost 0.1 s at 100k)
    where: dict[tuple[int, int, str], int] = {}
    for i, (dump, call) in enumerate(entries):
        if call.kind == "module":
            where[(dump.step, dump.rank, call.name)] = i
    if not where:
        return  # no module node (an API-level dump): nothing to be inside, no parents table
    parents = {(d.step, d.rank, c.name): c.parent for d, c in entries}
    for i, (dump, call) in enumerate(entries):
        if not prov.flagged[i]:
            continue
        parent, seen = call.parent, 0
        while parent is not None and seen < 256:  # construct.json chains are shallow
            module = where.get((dump.step, dump.rank, parent))
            if module is not None and module > i:
                prov.flagged_inside.setdefault(module, i)
            parent, seen = parents.get((dump.step, dump.rank, parent)), seen + 1


class _MadeInside:
    """Flagged nodes whose differing inputs no recorded node produced, made by a module.

    At L0 only modules are recorded: a Linear whose input differs, produced by code its
    parent runs between its recorded submodules (a softmax, a scale, a mask), did not make
    the error; the innermost enclosing module whose own inputs still agree did. Decided per
    node when asked (each node's answer depends on its own inputs and on facts the scan
    already fixed): a run where nothing fails never asks.
    """

    def __init__(self, prov: Provenance, pairs: _Triples,
                 dtypes: list[str], held: list[CompareCriteria],
                 cross: set[tuple[int, int]]) -> None:
        self.prov, self.pairs, self.dtypes, self.held, self.cross = prov, pairs, dtypes, held, cross
        self._where: dict[tuple[int, int, str], int] | None = None
        self._known: dict[int, int | None] = {}

    def __call__(self, index: int) -> int | None:
        if index not in self._known:
            self._known[index] = self._module(index)
        return self._known[index]

    def _module(self, i: int) -> int | None:
        prov, pairs, dtypes, held = self.prov, self.pairs, self.dtypes, self.held
        if prov.first_flag_before[i] is not None:
            return None  # only the first divergence is placed; later ones carry it
        dump, call, bench = pairs[i]
        if prov.findings[i] or bench is None:
            return None
        if diverging_in_metadata(call.parameters, bench.parameters, dtypes[i], held[i]):
            return None  # its own parameters differ: the node itself is where it shows
        # inputs computed by unrecorded code differ at all (noise the code amplified counts);
        # a module's input that is a submodule's output agreeing with the bench's was changed
        # by unrecorded code too (a residual add left out)
        differing = (
            # across frameworks no input is bit-identical: only one off beyond rounding counts
            _beyond_rounding(call.input_tensors, bench.input_tensors)
            if (dump.step, dump.rank) in self.cross
            else _not_identical(call.input_tensors, bench.input_tensors))
        if not differing or any(
                not _unrecorded_source(prov, pairs, i, r, dtypes[i], held[i]) for r in differing):
            return None
        if self._where is None:
            self._where = {(d.step, d.rank, c.name): k for k, (d, c, _) in enumerate(pairs)
                           if c.kind == "module"}
        parent, depth = call.parent, 0
        while parent is not None and depth < 256:  # construct.json chains are shallow
            module = self._where.get((dump.step, dump.rank, parent))
            if module is None or module < i:
                return None
            _, outer, outer_bench = pairs[module]
            if outer_bench is None or _not_identical(outer.parameters, outer_bench.parameters):
                return None  # its parameters differ (an update, a load): they enter at the child
            if not diverging_in_metadata(
                    outer.input_tensors, outer_bench.input_tensors, dtypes[module], held[module]):
                return module
            parent, depth = outer.parent, depth + 1
        return None


def _unrecorded_source(prov: Provenance, pairs: _Triples,
                       index: int, record: TensorRecord, dtype: str,
                       criteria: CompareCriteria) -> bool:
    """Unrecorded code made this input: no recorded node produced it; or, for a module, one
    that agrees with the bench did while the input itself is off (a residual add left out)."""
    dump, call, bench = pairs[index]
    producer = prov.producer_of(dump, record, index)
    if producer is None:
        return True
    if call.kind != "module" or bench is None or pairs[producer][2] is None:
        return False
    off = diverging_in_metadata([record], bench.input_tensors, dtype, criteria)
    return bool(off) and not prov.flagged[producer]


# Statistics of the same tensor from two frameworks' kernels differ by a few eps; a change
# made by code (an fp16 softmax inside an attention: 1e-4 relative) by far more.
_ROUNDING_EPS = 16.0


def _beyond_rounding(records: list[TensorRecord], bench: list[TensorRecord]) -> list[TensorRecord]:
    """The records whose statistics differ from the bench's by more than rounding."""
    by_path = {r.path: r for r in bench}
    return [rec for rec in records if (other := by_path.get(rec.path)) is not None and (
        rec.dtype != other.dtype
        or stats_gap(rec.stats.values(), other.stats.values())
        > _ROUNDING_EPS * FLOAT_EPS.get(rec.dtype, 0.0))]


def _not_identical(records: list[TensorRecord], bench: list[TensorRecord]) -> list[TensorRecord]:
    by_path = {r.path: r for r in bench}
    return [r for r in records if r.path in by_path and not same_record(r, by_path[r.path])]


def _stats_key(record: TensorRecord) -> StatsKey | None:
    s = record.stats
    if s.max is None and s.norm is None:
        return None
    return (record.dtype, s.max, s.min, s.mean, s.norm)
