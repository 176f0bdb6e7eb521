"""The vectorized statistics table gives stats_metrics' metrics and judge_stats' verdicts, bit
for bit, whatever the values (finite rows from numpy, the rest from the scalar functions)."""

from __future__ import annotations

import math
import random

import pytest

from pytest_accuracy.compare.criteria import CompareCriteria, judge_stats
from pytest_accuracy.compare.metrics import stats_metrics
from pytest_accuracy.compare.stats_table import StatsTable
from pytest_accuracy.dumps.model import Stats, TensorRecord
from pytest_accuracy.dumps.stats import StatsColumns

_SPECIAL = [0.0, -0.0, 1.0, -1.0, 5e-324, 1e-300, 1e300, 1.7e308, -1.7e308, 3.0, 1.0000001,
            math.inf, -math.inf, math.nan, None]


def _record(stats: tuple[object, ...], columns: StatsColumns | None = None) -> TensorRecord:
    """A record with its own Stats, or kept in ``columns`` as a reader keeps it."""
    if columns is None:
        return TensorRecord("output.0", "output", "float32", "torch.float32", (4,),
                            Stats(*stats))  # type: ignore[arg-type]
    return TensorRecord("output.0", "output", "float32", "torch.float32", (4,), columns,
                        row=columns.add(stats))  # type: ignore[arg-type]


def _value(rng: random.Random) -> object:
    roll = rng.random()
    if roll < 0.3:
        return rng.choice(_SPECIAL)
    if roll < 0.35:
        return rng.randint(-3, 3)  # an int: never taken from numpy
    return rng.uniform(-1, 1) * 10 ** rng.randint(-30, 30)


def _pairs(count: int, seed: int,
           columns: bool = False) -> list[tuple[TensorRecord, TensorRecord]]:
    """Random pairs; with ``columns`` nine in ten records kept in two dumps' columns."""
    rng = random.Random(seed)
    sides = (StatsColumns(), StatsColumns())

    def kept(side: int) -> StatsColumns | None:
        return sides[side] if columns and rng.random() < 0.9 else None

    pairs = []
    for _ in range(count):
        npu = tuple(_value(rng) for _ in range(4))
        # half the bench sides near the NPU's: the values a real pair has
        near = rng.random() < 0.5 and all(isinstance(v, float) and math.isfinite(v) for v in npu)
        bench = (tuple(v * (1 + rng.uniform(-1e-4, 1e-4)) for v in npu)  # type: ignore[operator]
                 if near else tuple(_value(rng) for _ in range(4)))
        pairs.append((_record(npu, kept(0)), _record(bench, kept(1))))
    return pairs


def _same(a: object, b: object) -> bool:
    """Equal to the bit, and of the same type (0 is not 0.0 in the JSON document)."""
    return type(a) is type(b) and repr(a) == repr(b)


@pytest.mark.parametrize("columns", [False, True])
def test_metrics_are_stats_metrics_to_the_bit(columns: bool) -> None:
    pairs = _pairs(20_000, seed=7, columns=columns)
    table = StatsTable(pairs)
    taken = 0
    for npu, bench in pairs:
        ours, theirs = table.metrics(npu, bench), stats_metrics(npu.stats, bench.stats)
        fields = type(theirs).__slots__
        assert all(_same(getattr(ours, f), getattr(theirs, f)) for f in fields), (npu, bench)
        taken += table._row(npu, bench) is not None
    assert 5_000 < taken < 20_000  # numpy's rows and scalar rows both checked


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "int64", "bool"])
def test_verdicts_are_judge_stats(dtype: str) -> None:
    pairs = _pairs(5_000, seed=11)
    table = StatsTable(pairs)
    for criteria in (CompareCriteria(), CompareCriteria(rel_err=0.5),
                     CompareCriteria().held_to_rounding()):
        tol = criteria.tolerance(dtype)
        for npu, bench in pairs:
            expected = judge_stats(stats_metrics(npu.stats, bench.stats), dtype, tol).ok
            known = table.agree(npu, bench, dtype, tol)
            assert known is None or known == expected, (npu, bench, dtype)
            assert (known is None) == (table._row(npu, bench) is None)


def test_a_pair_the_table_does_not_hold_is_computed() -> None:
    (npu, bench), (other, _) = _pairs(2, seed=3)
    table = StatsTable([(npu, bench)])
    assert table.agree(other, bench, "float32", CompareCriteria().tolerance("float32")) is None
    assert table.agree(npu, other, "float32", CompareCriteria().tolerance("float32")) is None
    # repr: NaN metrics compare unequal to themselves
    assert repr(table.metrics(npu, other)) == repr(stats_metrics(npu.stats, other.stats))
    assert repr(StatsTable([]).metrics(npu, bench)) == repr(stats_metrics(npu.stats, bench.stats))
