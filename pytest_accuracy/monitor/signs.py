"""grad_probe's gradient-direction rule: per-step sign agreement of two runs' gradients."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.monitor.model import RankRecords

if TYPE_CHECKING:
    from pytest_accuracy.monitor.judge import KindResult, Parting

# msprobe's documented rule (docs/17.grad_probe.md): a parameter's gradients part at the first
# step whose sign agreement is below 0.97, or at a step where it drops by more than 0.03.
FIRST_MIN = 0.97
MAX_DROP = 0.03


class SignTracker:
    """Sign agreement step after step, for the parameters whose sign files both runs wrote."""

    def __init__(self, npu: RankRecords, bench: RankRecords) -> None:
        self.npu, self.bench = npu, bench
        self.previous: dict[str, float] = {}

    def step(self, rank: int, step: int, groups: list[tuple[list[str], list[str]]],
             result: KindResult) -> list[Parting]:
        from pytest_accuracy.monitor.judge import Parting

        found = []
        for names_a, names_b in groups:
            if len(names_a) != 1 or len(names_b) != 1:
                continue  # a fused parameter's parts have no one sign file to compare
            path_a = self.npu.signs.get((step, names_a[0]))
            path_b = self.bench.signs.get((step, names_b[0]))
            if path_a is None or path_b is None:
                continue
            sim = agreement(path_a, path_b)
            result.signs.setdefault(names_a[0], []).append((step, sim))
            result.compared += 1
            before = self.previous.get(names_a[0])
            self.previous[names_a[0]] = sim
            limit = FIRST_MIN if before is None else before - MAX_DROP
            if sim < limit:
                found.append(Parting(rank, "grad", "grad_summary", step, 0, names_a[0],
                                     names_b[0], "sign", sim, 1.0 if before is None else before,
                                     limit - sim, MAX_DROP, 0.0, "bool", 1.0 + (limit - sim)))
        return found


def agreement(path_a: object, path_b: object) -> float:
    """Share of elements whose gradient sign (``grad > 0``) is the same in both files."""
    from pathlib import Path

    from pytest_accuracy.dumps.tensors import load_array

    a, b = load_array(Path(str(path_a)), mmap=False), load_array(Path(str(path_b)), mmap=False)
    if a.dtype != np.bool_ or b.dtype != np.bool_:
        bad = path_a if a.dtype != np.bool_ else path_b
        raise AccuracyInputError(str(bad), f"not a grad_probe sign file: dtype "
                                 f"{(a if a.dtype != np.bool_ else b).dtype}, bool expected")
    if a.shape != b.shape:
        raise AccuracyInputError(str(path_a), f"shape {list(a.shape)} differs from the bench "
                                 f"sign file's {list(b.shape)} ({path_b})")
    return float(np.count_nonzero(a == b)) / a.size if a.size else 1.0
