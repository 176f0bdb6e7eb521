"""A dump's statistics kept as columns read back as the dump.json's values, record for record,
and compare by value (the table from columns: tests/test_stats_table.py)."""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from pytest_accuracy.compare.metrics import stats_metrics
from pytest_accuracy.compare.stats_table import StatsTable
from pytest_accuracy.dumps.layout import load_dumps
from pytest_accuracy.dumps.model import Stats, TensorRecord
from pytest_accuracy.dumps.stats import StatsColumns
from tests.helpers import dump

_KEYS = ("Max", "Min", "Mean", "Norm")


def _row(rng: random.Random) -> tuple[float | None, ...]:
    return tuple(rng.choice([None, math.inf, -0.0, math.nan]) if rng.random() < 0.1
                 else rng.uniform(-1, 1) * 10 ** rng.randint(-300, 300) for _ in range(4))


def _same(a: object, b: object) -> bool:
    return type(a) is type(b) and repr(a) == repr(b)  # to the bit, NaN and -0.0 included


def test_columns_give_back_each_row() -> None:
    rng = random.Random(5)
    rows = [_row(rng) for _ in range(3000)]
    columns = StatsColumns()
    assert [columns.add(r) for r in rows] == list(range(len(rows)))  # type: ignore[arg-type]
    for i, row in enumerate(rows):
        got = columns.get(i)
        assert type(got) is Stats and all(_same(a, b) for a, b in zip(got, row, strict=True))
    table = columns.array()
    assert table.shape == (len(rows), 4)
    for i, row in enumerate(rows):  # None reads NaN in the array, and its whole row with it
        expected = [math.nan] * 4 if None in row else row
        assert [repr(v) for v in table[i].tolist()] == [repr(v) for v in expected]


def _tensor_dicts(value: Any) -> list[dict[str, Any]]:
    """Every dict of the JSON tree that carries statistics: found without the reader."""
    if isinstance(value, dict):
        found = [value] if "Max" in value else []
        return found + [d for v in value.values() for d in _tensor_dicts(v)]
    if isinstance(value, list):
        return [d for v in value for d in _tensor_dicts(v)]
    return []


@pytest.mark.parametrize(("variant", "config"), [("pt_bug", "mix_statistics"),
                                                 ("ms_fp32", "mix_statistics"),
                                                 ("pt_fp32", "L1_tensor")])
def test_records_hold_the_dump_json_statistics(variant: str, config: str) -> None:
    for one in load_dumps(dump(variant, config)):
        doc = json.loads(one.path.read_text())
        expected = Counter(tuple(d.get(k) for k in _KEYS) for d in _tensor_dicts(doc["data"]))
        records = [r for c in one.calls for r in (*c.input_tensors, *c.parameters,
                                                  *c.output_tensors)]
        assert all(r.stats_row is not None for r in records)  # kept as columns
        assert Counter(tuple(r.stats) for r in records) == expected
        assert len(records) > 50


def test_null_and_string_statistics(tmp_path: Path) -> None:
    """msprobe's null reads None and its "inf" strings floats; the table leaves such rows to
    ``stats_metrics``, which gets the record's own values."""
    def out(**stats: object) -> dict[str, object]:
        return {"input_args": [], "input_kwargs": {}, "output": [
            {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], **stats}]}

    data = {"Torch.add.0.forward": out(Max=None, Min=0.0, Mean=0.5, Norm=1.0),
            "Torch.add.1.forward": out(Max="inf", Min=0.0, Mean=0.5, Norm=1),
            "Torch.add.2.forward": out(Max=1.5, Min=0.0, Mean=0.5, Norm=1.0)}
    root = tmp_path / "d"
    root.mkdir()
    (root / "dump.json").write_text(json.dumps({"task": "statistics", "level": "L1",
                                                "data": data}))
    calls = next(iter(load_dumps(root))).calls
    stats = [c.output_tensors[0].stats for c in calls]
    assert stats == [Stats(None, 0.0, 0.5, 1.0), Stats(math.inf, 0.0, 0.5, 1.0),
                     Stats(1.5, 0.0, 0.5, 1.0)]
    assert all(type(v) is float for v in stats[1])  # the int Norm read as a float
    pairs = [(a.output_tensors[0], b.output_tensors[0]) for a in calls for b in calls]
    table = StatsTable(pairs)
    for npu, bench in pairs:
        assert repr(table.metrics(npu, bench)) == repr(stats_metrics(npu.stats, bench.stats))
    assert table._row(*pairs[-1]) is not None and table._row(*pairs[0]) is None


def test_records_compare_by_value_wherever_their_statistics_are_kept() -> None:
    columns = StatsColumns()
    row = columns.add((1.0, 0.0, 0.5, 2.0))
    kept = TensorRecord("output.0", "output", "float32", "float32", (2,), columns, row=row)
    own = TensorRecord("output.0", "output", "float32", "float32", (2,),
                       Stats(1.0, 0.0, 0.5, 2.0))
    other = TensorRecord("output.0", "output", "float32", "float32", (2,),
                         Stats(1.0, 0.0, 0.5, 2.5))
    assert kept == own and kept != other and own.stats_row is None
    assert kept.stats_row == (columns, row)
    assert repr(kept) == repr(own) and "norm=2.0" in repr(kept)
    with pytest.raises(TypeError):
        hash(kept)
