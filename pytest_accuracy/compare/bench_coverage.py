"""Coverage from the bench's side: its calls no NPU call pairs with, and modules the NPU skips."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_accuracy.compare.engine import Comparison

# A module of a group of like siblings (decoder layers under one model) whose others all pair
# and which has no NPU counterpart is skipped by the NPU run: at least this many siblings, and
# at most this share of them unpaired (a codebase that fuses q, k and v leaves 3 of 4 Linear
# siblings unpaired, one that has none of them leaves all: neither is a skip).
_MIN_SIBLINGS = 3
_MAX_SKIPPED_SHARE = 0.25


@dataclass
class BenchCoverage:
    """How much of the bench run the NPU run's pairs reach, over the compared steps and ranks."""

    paired: int = 0
    total: int = 0
    # (step, rank, bench module call, paired siblings, siblings in all)
    skipped: list[tuple[int, int, str, int, int]] = field(default_factory=list)

    def as_dict(self) -> dict[str, int]:
        return {"bench_matched": self.paired, "bench_total": self.total}

    def skipped_lines(self) -> list[str]:
        """The skipped modules, one line each (the first ten)."""
        return [f"step {s} rank {r}: bench {name} has no NPU counterpart while {paired} of "
                f"its {group} like siblings pair"
                for s, r, name, paired, group in self.skipped[:10]]


def bench_coverage(cmp: Comparison) -> BenchCoverage:
    """Count the bench calls of each compared (step, rank) that some NPU call pairs with, and
    name the bench modules the NPU run skips (layer 13 of 20 with no NPU counterpart)."""
    out = BenchCoverage()
    for key in sorted(set(cmp.npu.dumps) & set(cmp.bench.dumps)):
        bench = cmp.bench.dumps[key]
        used = set(cmp.pairs_of(key).values())
        out.total += len(bench.calls)
        out.paired += sum(c.name in used for c in bench.calls)
        groups: dict[tuple[str | None, str], list[str]] = defaultdict(list)
        for call in bench.calls:
            if call.kind == "module" and call.direction == "forward":
                groups[(call.parent, call.op)].append(call.name)
        for names in groups.values():
            missing = [n for n in names if n not in used]
            paired = len(names) - len(missing)
            if (len(names) >= _MIN_SIBLINGS and paired >= 2 and missing
                    and len(missing) <= _MAX_SKIPPED_SHARE * len(names)):
                out.skipped += [(key[0], key[1], n, paired, len(names)) for n in missing]
    return out
