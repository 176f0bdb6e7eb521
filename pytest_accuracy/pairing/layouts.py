"""Parallel layouts: which ranks hold which shard (TP x DP x PP, Megatron's rank order)."""

from __future__ import annotations

import re
from dataclasses import dataclass

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
    TP group where the data (dp) and the pipeline stage (pp) are the same."""
    tp_rank, dp_rank, pp_rank = npu.coords(rank)
    first = tp_rank * bench.tp // npu.tp
    last = max(first, (tp_rank + 1) * bench.tp // npu.tp - 1) if bench.tp >= npu.tp else first
    return [bench.rank(j, dp_rank, pp_rank) for j in range(first, last + 1)]
