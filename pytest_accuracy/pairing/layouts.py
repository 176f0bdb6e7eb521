"""Parallel layouts: which ranks hold which shard (TP x DP x PP, Megatron's rank order)."""

from __future__ import annotations

import re
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
    from pytest_accuracy.pairing.data_parallel import dp_sources

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
    """The two runs' layouts read from their data, where their ranks differ in number: the
    ranks of one tensor-parallel group read the same batch (consecutive ranks, Megatron's
    order), the data-parallel groups each their own, the same on both sides; and a tensor
    the NPU shards must be a shard of the bench's by the same ratio. None where the dumps do
    not say it that plainly (then the layouts must be given)."""
    step = min((s for s, _ in npu.dumps if any(k[0] == s for k in bench.dumps)), default=None)
    if step is None:
        return None
    pn, pb = _stages(npu, step), _stages(bench, step)
    mine, theirs = _batches(npu, step), _batches(bench, step)
    if mine is None or theirs is None or pn is None or pb is None or (
            len(mine) == len(theirs) and pn == pb):
        return None
    mine, theirs = mine[:len(mine) // pn], theirs[:len(theirs) // pb]  # the first stage's
    tn, tb = _group_size(mine), _group_size(theirs)
    if tn is None or tb is None or len(mine) // tn != len(theirs) // tb:
        return None
    dp = len(mine) // tn
    if any(mine[d * tn] != theirs[d * tb] for d in range(dp)):
        return None  # another split of the data: not the same batches rank for rank
    npu_layout, bench_layout = Layout(tp=tn, dp=dp, pp=pn), Layout(tp=tb, dp=dp, pp=pb)
    if layouts_problem(npu_layout, bench_layout) or not _shards_agree(
            npu.dumps[(step, 0)], bench.dumps[(step, 0)], tn, tb):
        return None
    why = (f"inferred from the dumps: {_ranks(len(mine) * pn)} of the NPU against "
           f"{_ranks(len(theirs) * pb)} of the bench; "
           f"{_first(tn)} of the NPU and {_first(tb)} of the bench read one batch, and the "
           f"NPU's sharded tensors are {_part(tn)} where the bench's are {_part(tb)}")
    if pn != pb:
        why += (f"; the NPU's ranks make {pn} different sequences of calls (pipeline stages), "
                f"the bench's {pb}")
    return npu_layout, bench_layout, why


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


def _shards_agree(npu: Dump, bench: Dump, tn: int, tb: int) -> bool:
    """Some tensor is sharded by tn against tb (at tn == tb none), and every shape that
    differs does so."""
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
            differ = [k for k, (a, b) in enumerate(zip(record.shape, shape, strict=False))
                      if a != b]
            if (len(record.shape) != len(shape) or len(differ) != 1
                    or record.shape[differ[0]] * tn != shape[differ[0]] * tb):
                return False
            seen = True
    return seen or tn == tb  # at one TP size (the stages differ), no shape may differ
