"""Parallel layouts: which ranks hold which shard (TP x DP x PP, Megatron's rank order)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from pytest_accuracy.dumps.model import Dump, DumpSet

_PART = re.compile(r"\s*(tp|dp|pp)\s*=\s*(\d+)\s*")


@dataclass(frozen=True)
class Layout:
    """A run's parallel layout. Ranks are numbered as Megatron-LM does (its default order
    tp-dp-pp): ``rank = tp_rank + tp * (dp_rank + dp * pp_rank)``."""

    tp: int = 1
    dp: int = 1
    pp: int = 1

    @property
    def world(self) -> int:
        return self.tp * self.dp * self.pp

    def coords(self, rank: int) -> tuple[int, int, int]:
        """(tp_rank, dp_rank, pp_rank) of ``rank``."""
        return rank % self.tp, rank // self.tp % self.dp, rank // (self.tp * self.dp)

    def rank(self, tp_rank: int, dp_rank: int, pp_rank: int) -> int:
        return tp_rank + self.tp * (dp_rank + self.dp * pp_rank)

    def __str__(self) -> str:
        return f"tp={self.tp},dp={self.dp},pp={self.pp}"


def parse_layout(text: str) -> Layout:
    """'tp=2,dp=2' (any of tp, dp, pp; the rest 1) -> Layout; ValueError on anything else."""
    sizes: dict[str, int] = {}
    for part in text.split(","):
        match = _PART.fullmatch(part)
        if match is None or match.group(1) in sizes or int(match.group(2)) < 1:
            raise ValueError(f"expected tp=N,dp=N,pp=N (each at most once, N >= 1), got "
                             f"{text!r}")
        sizes[match.group(1)] = int(match.group(2))
    return Layout(**sizes)


def bench_ranks(npu: Layout, bench: Layout, rank: int) -> list[int]:
    """The bench ranks that hold the part of the model and the data NPU ``rank`` holds: its
    TP group where the data (dp) is the same, in the bench stage that holds the NPU's (a
    bench of fewer pipeline stages holds several of the NPU's in one; of more, the NPU's
    stage is several of the bench's: their ranks stage by stage)."""
    from pytest_accuracy.pairing.batch_parts import dp_sources

    tp_rank, dp_rank, pp_rank = npu.coords(rank)
    first = tp_rank * bench.tp // npu.tp
    last = max(first, (tp_rank + 1) * bench.tp // npu.tp - 1) if bench.tp >= npu.tp else first
    per = max(1, bench.pp // npu.pp)
    stages = range(pp_rank * bench.pp // npu.pp, pp_rank * bench.pp // npu.pp + per)
    return [bench.rank(j, e, s) for s in stages for e in dp_sources(npu, bench, dp_rank)
            for j in range(first, last + 1)]


def stage_place(npu: Layout, bench: Layout, rank: int) -> float:
    """Where NPU ``rank``'s pipeline stage sits inside its bench stage: 0 first, 1 last."""
    per = npu.pp // bench.pp
    return (npu.coords(rank)[2] % per) / (per - 1) if per > 1 else 0.0


def layouts_problem(npu: Layout, bench: Layout) -> str | None:
    """Why the two layouts cannot be compared rank by rank, else None."""
    if npu.dp % bench.dp and bench.dp % npu.dp:
        return (f"the NPU layout {npu} has dp={npu.dp}, the bench {bench} dp={bench.dp}: a DP "
                "rank of one must read whole parts of the batch of the other (one dp a "
                "divisor of the other)")
    if npu.dp != bench.dp and npu.pp != bench.pp:
        return (f"the NPU layout {npu} and the bench layout {bench} differ in both dp and pp: "
                "compare runs that differ in one of them")
    if npu.dp != bench.dp and npu.tp != bench.tp and bench.tp * npu.dp == npu.tp * bench.dp:
        return (f"the NPU layout {npu} splits the batch and the model by the same ratio against "
                f"the bench {bench}: a tensor smaller on one dimension could be either; compare "
                "against a bench at the NPU's tp or dp")
    if npu.pp % bench.pp and bench.pp % npu.pp:
        return (f"the NPU layout {npu} has pp={npu.pp}, the bench {bench} pp={bench.pp}: a stage "
                "of one must hold whole stages of the other (one pp a divisor of the other)")
    return None


def infer_layouts(npu: DumpSet, bench: DumpSet) -> tuple[Layout, Layout, str] | None:
    """The two runs' layouts read from their data, where they differ: the ranks of one
    tensor-parallel group read the same batch (consecutive ranks, Megatron's order), the
    data-parallel groups each their own, parts of the bench's batches where their number
    differs; and a tensor the NPU shards must be a shard of the bench's by the same ratio.
    None where the dumps do not say it that plainly (then the layouts must be given), or
    where the layouts are the same."""
    step = min((s for s, _ in npu.dumps if any(k[0] == s for k in bench.dumps)), default=None)
    if step is None:
        return None
    mine, theirs = _batches(npu, step), _batches(bench, step)
    if mine is None or theirs is None or (len(mine) == len(theirs) and _group_size(mine) == (
            _group_size(theirs)) is not None and _staged(npu, step) == _staged(bench, step)):
        return None  # the same ranks reading the same batches alike, in as many stages
    pn, pb = _stages(npu, step), _stages(bench, step)
    if pn is None or pb is None:
        return None
    mine, theirs = mine[:len(mine) // pn], theirs[:len(theirs) // pb]  # the first stage's
    tn, tb = _group_size(mine), _group_size(theirs)
    if tn is None or tb is None:
        return None
    dn, db = len(mine) // tn, len(theirs) // tb
    if not _same_batches(mine[::tn], theirs[::tb]):
        return None  # another split of the data: not the same batches rank for rank
    npu_layout, bench_layout = Layout(tp=tn, dp=dn, pp=pn), Layout(tp=tb, dp=db, pp=pb)
    if npu_layout == bench_layout or layouts_problem(npu_layout, bench_layout) or not _shards_agree(
            npu.dumps[(step, 0)], bench.dumps[(step, 0)], npu_layout, bench_layout):
        return None
    why = (f"inferred from the dumps: {_ranks(len(mine) * pn)} of the NPU against "
           f"{_ranks(len(theirs) * pb)} of the bench; "
           f"{_first(tn)} of the NPU and {_first(tb)} of the bench read one batch")
    if tn != tb:
        why += f", and the NPU's sharded tensors are {_part(tn)} where the bench's are {_part(tb)}"
    if dn != db:
        why += (f"; the NPU's {dn} data-parallel groups read {_share(dn)} each, the bench's "
                f"{db} {_share(db)} (their first inputs together hold the same values)")
    if pn != pb:
        why += (f"; the NPU's ranks make {pn} different sequences of calls (pipeline stages), "
                f"the bench's {pb}")
    return npu_layout, bench_layout, why


def _staged(dumps: DumpSet, step: int) -> bool:
    """Whether the first and the last rank at ``step`` make different operations (stages)."""
    from pytest_accuracy.pairing.stages import operations

    ranks = sorted(r for s, r in dumps.dumps if s == step)
    return len(ranks) > 1 and operations(dumps.dumps[(step, ranks[0])]) != operations(
        dumps.dumps[(step, ranks[-1])])


def _stages(dumps: DumpSet, step: int) -> int | None:
    """How many pipeline stages the ranks at ``step`` form: runs of consecutive ranks making
    the same operations (Megatron's order puts the stage outermost), all of one size."""
    from pytest_accuracy.pairing.stages import operations

    ranks = sorted(r for s, r in dumps.dumps if s == step)
    seen = [operations(dumps.dumps[(step, r)]) for r in ranks]
    blocks = [k for k in range(len(seen)) if k == 0 or seen[k] != seen[k - 1]]
    size = len(seen) // len(blocks) if blocks else 0
    if not size or any(b != k * size for k, b in enumerate(blocks)) or len(
            set(map(tuple, seen))) != len(blocks):
        return None
    return len(blocks)


def _ranks(n: int) -> str:
    return "1 rank" if n == 1 else f"{n} ranks"


def _first(n: int) -> str:
    return "rank 0" if n == 1 else f"ranks 0-{n - 1}"


def _share(n: int) -> str:
    return "the whole batch" if n == 1 else f"1/{n} of the batch"


def _part(n: int) -> str:
    return "whole" if n == 1 else f"1/{n}"


Batch = tuple[tuple[int, ...], tuple[float | None, ...]]


def _batches(dumps: DumpSet, step: int) -> list[Batch] | None:
    """Per rank 0..n-1 at ``step``, what its first call reads (shape and statistics)."""
    ranks = sorted(r for s, r in dumps.dumps if s == step)
    if ranks != list(range(len(ranks))):
        return None
    out = []
    for rank in ranks:
        calls = dumps.dumps[(step, rank)].calls
        first = next((r for c in calls for r in c.input_tensors), None)
        if first is None:
            return None
        out.append((first.shape, tuple(first.stats)))
    return out


def _group_size(batches: list[Batch]) -> int | None:
    """How many consecutive ranks read each batch, the same for every group."""
    size = next((k for k in range(1, len(batches)) if batches[k] != batches[0]), len(batches))
    if len(batches) % size:
        return None
    groups = [batches[g:g + size] for g in range(0, len(batches), size)]
    if any(len(set(g)) != 1 for g in groups):
        return None
    return size


def _same_batches(mine: list[Batch], theirs: list[Batch]) -> bool:
    """Whether the NPU's DP groups read the bench's batches: one for one, or parts of them
    along one dimension whose statistics together are the whole's (Max, Min, Mean by element
    counts, Norm)."""
    if len(mine) == len(theirs):
        return mine == theirs
    few, many = sorted((mine, theirs), key=len)
    if len(many) % len(few):
        return False
    per = len(many) // len(few)
    return all(_joined_batch(many[k * per:(k + 1) * per], whole, len(many), len(few))
               for k, whole in enumerate(few))


def _joined_batch(parts: list[Batch], whole: Batch, n_parts: int, n_whole: int) -> bool:
    """Whether ``parts`` along the batch make ``whole``: shapes, and each statistic recorded
    on all of them (msprobe records no Mean or Norm of integer ids) combined; Max and Min
    at least."""
    from pytest_accuracy.pairing.batch_parts import batch_axis

    shape, recorded = whole
    if any(batch_axis(s, shape, n_parts, n_whole) is None for s, _ in parts):
        return False
    counts = [math.prod(s) for s, _ in parts]
    total = sum(counts)
    columns = [[st[k] for _, st in parts] for k in range(4)]
    combine: tuple[Callable[[list[float]], float], ...] = (
        max, min, lambda v: sum(x * c for x, c in zip(v, counts, strict=True)) / total,
        lambda v: math.sqrt(sum(x * x for x in v)))
    checked = 0
    for k, (values, made) in enumerate(zip(columns, combine, strict=True)):
        found = [v for v in values if v is not None]
        if recorded[k] is None or len(found) < len(values):
            continue
        if not math.isclose(made(found), recorded[k] or 0.0, rel_tol=1e-6, abs_tol=1e-9):
            return False
        checked += 1 << k
    return total == math.prod(shape) and checked & 3 == 3


def _shards_agree(npu: Dump, bench: Dump, npu_layout: Layout, bench_layout: Layout) -> bool:
    """Some tensor is sharded by the TP sizes' ratio (at one TP size none), and every shape
    that differs does so, along the batch by the DP sizes', or both."""
    tn, tb, dn, db = npu_layout.tp, bench_layout.tp, npu_layout.dp, bench_layout.dp
    seen = False
    for call in npu.calls:
        other = bench.get(call.name)
        if other is None:
            continue
        theirs = {r.path: r.shape for r in other.input_tensors + other.output_tensors}
        for record in call.input_tensors + call.output_tensors:
            shape = theirs.get(record.path)
            if shape is None or shape == record.shape:
                continue
            differ = [(a, b) for a, b in zip(record.shape, shape, strict=False) if a != b]
            tp = [a * tn == b * tb for a, b in differ]
            dp = [a * dn == b * db for a, b in differ]
            if (len(record.shape) != len(shape) or sum(tp) > 1 or sum(dp) > 1
                    or not all(t or d for t, d in zip(tp, dp, strict=True))):
                return False
            seen = seen or any(tp)
    return seen or tn == tb  # at one TP size (the stages differ), no shape may differ
