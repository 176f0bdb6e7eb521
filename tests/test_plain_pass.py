"""A plain pass's record (compare/plain.py, records.plain_record) is the full compare's record
of the same node, key for key, value for value and in the same order; and the plain lane is
only ever taken where the full compare passes the node."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pytest_accuracy.compare import Comparison
from pytest_accuracy.compare.criteria import CompareCriteria, Waiver
from pytest_accuracy.compare.plain import plain_pass
from pytest_accuracy.dumps.layout import load_dumps
from pytest_accuracy.pairing.runs import pair_runs
from pytest_accuracy.report.records import (
    json_native,
    node_record,
    plain_record,
    verdict_record,
)
from tests.helpers import dump

ZOO = Path(__file__).parent / "data" / "zoo"


def _as_statistics(src: Path, dst: Path) -> Path:
    """A copy of a tensor dump as a statistics dump: the same records, no tensor files."""
    for dump_json in src.rglob("dump.json"):
        out = dst / dump_json.relative_to(src)
        out.parent.mkdir(parents=True, exist_ok=True)
        doc = json.loads(dump_json.read_text())
        doc["task"] = "statistics"
        text = json.dumps(doc).replace('"data_name"', '"data_name_dropped"')
        out.write_text(text)
        for side in ("stack.json", "construct.json"):
            if (dump_json.parent / side).exists():
                shutil.copy(dump_json.parent / side, out.parent / side)
    return dst


def _pairs(tmp: Path) -> list[tuple[Path, Path, bool]]:
    """(npu, bench, cross-framework) statistics pairs: bundled real dumps, and zoo tensor
    dumps (bf16 noise, two steps) re-read as statistics."""
    zoo = [(ZOO / "bf16_noise" / s / "L0") for s in ("npu", "bench")]
    steps = [(ZOO / "ln_eps_bf16" / s / "L0") for s in ("npu", "bench")]
    fp32 = [(ZOO / "fp32_noise" / s / "L1") for s in ("npu", "bench")]
    return [
        (dump("pt_bug", "mix_statistics"), dump("pt_fp32", "mix_statistics"), False),
        (dump("pt_bf16", "mix_statistics"), dump("pt_fp32", "mix_statistics"), False),
        (dump("ms_fp32", "mix_statistics"), dump("pt_fp32", "mix_statistics"), True),
        *[(_as_statistics(n, tmp / f"{i}n"), _as_statistics(b, tmp / f"{i}b"), False)
          for i, (n, b) in enumerate((zoo, steps, fp32))],
    ]


def _comparison(npu: Path, bench: Path, cross: bool, **kwargs: object) -> Comparison:
    return Comparison(load_dumps(npu), load_dumps(bench),
                      pairing=(lambda n, b: pair_runs(n, b).pairs) if cross else None,
                      **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("rows", [False, True])
def test_plain_records_are_the_full_compare_records(tmp_path: Path, rows: bool) -> None:
    plain_nodes = full_nodes = 0
    for npu, bench, cross in _pairs(tmp_path):
        cmp = _comparison(npu, bench, cross)
        for i in range(len(cmp)):
            plain = plain_pass(cmp, i)
            full = cmp.node(i)
            if plain is None:
                full_nodes += 1
                continue
            plain_nodes += 1
            assert full.status == "pass", (npu, full.npu.name)
            ours, theirs = plain_record(plain, rows=rows), node_record(full, None, rows=rows)
            # region items vouch for these without a check (suite/region_items.py)
            assert rows or json_native(ours), full.npu.name
            assert json_native(verdict_record(plain))  # a gate's record of the same pass
            # repr: the same keys in the same order, the same types (0 is not 0.0)
            assert repr(list(ours.items())) == repr(list(theirs.items())), full.npu.name
    assert plain_nodes > 200 and full_nodes > 50  # both lanes exercised


def test_waivers_and_full_inputs_take_the_full_compare(tmp_path: Path) -> None:
    npu, bench = dump("pt_bug", "mix_statistics"), dump("pt_fp32", "mix_statistics")
    plain = _comparison(npu, bench, False)
    assert any(plain_pass(plain, i) is not None for i in range(len(plain)))
    waived = _comparison(npu, bench, False,
                         criteria=CompareCriteria(waivers=(Waiver("nothing*", "none"),)))
    every = _comparison(npu, bench, False, inputs="all")
    assert all(plain_pass(c, i) is None for c in (waived, every) for i in range(len(c)))
