"""The report writers' fast paths give what the plain ways gave: the CSV csv.writer's bytes
for ``{Step, Rank, Status, Cause, **row}`` dicts through ``csv_cell``, the JSON one
``json.dumps`` per node, the node table the markup it had, the rows the values they had."""

from __future__ import annotations

import csv
import io
import json
import math
import random
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_accuracy.report import cells, document
from pytest_accuracy.report.cells import RowFormat, TextFields, csv_cell, csv_line
from pytest_accuracy.report.document import document_text, write_compare_csv
from pytest_accuracy.report.html_page import Memo, esc

ROWS_HTML = Path(__file__).parent / "data" / "report" / "node_table_rows.html"


class _Text(str):
    """A str subclass: csv_cell makes text of its str()."""


_STRINGS = ["plain", "a,b", 'q"uote', "line\nbreak", "cr\rx", "\ttab", "=SUM(A1)", "+1", "-0.5",
            "-inf", "@x", "-2+3", "x\ud800y", "a\x7fb", "c1\x85d", "bidi\u202ex", "é中文", "",
            " ", "'", "nodes-0", '"nodes-0"', "NaN", "Infinity", "<b>&'", "%s%r%%", "\x00nul",
            ",", '"', "\r\n", "1e5", ".5"]
_CELLS: list[Any] = [*_STRINGS, None, True, False, 0, -1, 10**20, 0.0, -0.0, 1.5, math.nan,
                     math.inf, -math.inf, 1e-300, np.float64(0.25), np.float32(0.5), np.int64(7),
                     np.bool_(True), Decimal("1.5"), [1, 2], ["a,b", "=c"], (1, 2), {"k": "v"},
                     _Text("=sub"), _Text("fine"), Path("/p,q")]


def _csv_writer_bytes(rows: list[list[Any]]) -> str:
    out = io.StringIO()
    csv.writer(out).writerows([[csv_cell(c) for c in row] for row in rows])
    return out.getvalue()


def test_row_formats_write_csv_writer_bytes_for_every_kind_of_cell() -> None:
    rng = random.Random(5)
    fields = TextFields()
    for _ in range(3000):
        cells_ = [rng.choice(_CELLS) for _ in range(rng.randint(1, 7))] + [None]
        picks = [rng.randrange(len(cells_)) for _ in range(rng.randint(1, 9))]
        form = RowFormat(picks, [type(c) for c in cells_])
        expected = _csv_writer_bytes([[cells_[i] for i in picks]])
        assert form.line(cells_, fields) == expected
        assert csv_line([cells_[i] for i in picks]) == expected


def test_the_text_cache_starts_over_when_full(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cells, "_TEXTS_KEPT", 4)
    fields = TextFields()
    for text in _STRINGS:
        assert fields[text] == csv_line([text, 0])[:-4]  # the field, as in a record
        assert len(fields) <= 4
    assert fields["=x"] == "'=x"  # neutralised after a clear as before it


def _old_compare_csv(nodes: list[dict[str, Any]], first: dict[str, Any] | None) -> str:
    """The table as it was written before: a dict per row, columns by scanning every row."""
    from pytest_accuracy.report.records import node_status, row_dict

    rows = []
    for n in sorted(nodes, key=lambda n: (n["step"], n["rank"], n.get("order", 0))):
        if n.get("rows"):
            status, cause = node_status(n, first)
            dicts = [row_dict(row) for row in n["rows"]]  # a record's compact rows too
            rows += [{**{k: row[k] for k in ("Step", "Rank") if k in row}, "Status": status,
                      "Cause": cause, **row} for row in dicts]
    columns = list(dict.fromkeys(key for row in rows for key in row))
    return _csv_writer_bytes([columns, *([row.get(c) for c in columns] for row in rows)])


def _random_row(rng: random.Random) -> dict[str, Any] | list[Any]:
    """A row as a dict of any keys, or compact as node records keep theirs: [kind, *values]."""
    if rng.random() < 0.3:
        from pytest_accuracy.report.records import _ROW_KEYS

        kind = rng.choice(sorted(_ROW_KEYS))
        return [kind, *(rng.choice(_CELLS) for _ in _ROW_KEYS[kind])]
    keys = ["Step", "Rank", "NPU Name", "Bench Name", "Max diff", "NPU MD5", "Cosine", "Result"]
    if rng.random() < 0.1:
        keys += ["Status", "Cause", rng.choice(_STRINGS)]
    picked = [k for k in keys if rng.random() < 0.8]
    if rng.random() < 0.3:
        rng.shuffle(picked)
    return {k: rng.choice(_CELLS) for k in picked}


def test_compare_csv_is_the_row_dicts_table(tmp_path: Path) -> None:
    """Mixed layouts (md5, metrics, missing and reordered keys, a row's own Status) and every
    kind of cell: the same bytes as the dict-per-row table."""
    rng = random.Random(11)
    statuses = ["fail", "carried", "pass", "waived", "unmatched", "skip", "error"]
    nodes = [{"step": rng.randint(0, 2), "rank": rng.randint(0, 1), "order": i,
              "status": rng.choice(statuses), "reason": rng.choice(_STRINGS),
              "first_divergence": rng.random() < 0.1, "carried_from": rng.choice(_STRINGS),
              "findings": [{"detail": "=cmd|x"}] if rng.random() < 0.2 else [],
              "rows": [_random_row(rng) for _ in range(rng.randint(0, 3))]}
             for i in range(400)]
    first = {"likely_cause": "-bad"}
    path = write_compare_csv(nodes, tmp_path, first)
    assert path is not None
    assert path.read_bytes().decode("utf-8") == \
        _old_compare_csv(nodes, first)


def test_compare_csv_without_rows_writes_nothing(tmp_path: Path) -> None:
    assert write_compare_csv([{"step": 0, "rank": 0, "rows": []}], tmp_path) is None
    assert not (tmp_path / "compare_result.csv").exists()


def _old_node_lines(nodes: list[dict[str, Any]]) -> list[str]:
    """Each node as it was written before: its own json.dumps, report-only keys left out."""
    return [document._strict_text(json.dumps(
        {k: v for k, v in n.items() if k not in ("rows", "order")}, default=str))
        for n in nodes]


@pytest.mark.parametrize("count", [1, 2, 3, 4, 6, 7])
def test_json_nodes_encoded_in_batches_are_the_per_node_lines(
        monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    """Batch boundaries (3 nodes here) fall anywhere; strings that look like the separator,
    NaN/Infinity inside and outside strings, objects JSON has no type for."""
    monkeypatch.setattr(document, "_NODES_PER_CHUNK", 3)
    odd = [math.nan, math.inf, -math.inf, 'x", "nodes-0", "y', ', "nodes-', "NaN Infinity",
           {1, 2}, Path("/x"), None, "\u2028", [1.5, math.nan], {"k": -math.inf}]
    nodes = [{"npu_name": f"n{i}", "step": 0, "rank": 0, "order": i, "rows": [{"A": 1}],
              "value": odd[i % len(odd)], "other": odd[(i * 5) % len(odd)]}
             for i in range(count)]
    doc = {"version": 1, "compare": {"first_divergence": None, "nodes": nodes}}
    lines = document_text(doc).splitlines()
    start = lines.index('    "nodes": [')
    expected = [f"      {t}{',' if i < count - 1 else ''}"
                for i, t in enumerate(_old_node_lines(nodes))]
    assert lines[start + 1: start + 1 + count] == expected
    assert lines[start + 1 + count] == "    ]"
    assert nodes[0]["rows"] == [{"A": 1}]  # the records themselves keep their report keys


def test_node_table_rows_are_the_markup_they_were() -> None:
    """Rows of every kind (pass, carried, first and carried, waived, skip, no status), as the
    table wrote them one helper per cell (tests/data/report/node_table_rows.html)."""
    from pytest_accuracy.report.html_compare import compare_section_parts
    from pytest_accuracy.report.html_page import joined

    nodes: list[dict[str, Any]] = [
        {"npu_name": "Module.layers.0.Linear.forward.0",
         "bench_name": "Module.layers.0.Linear.forward.0", "step": 0, "rank": 0,
         "status": "pass", "reason": "", "tensor": "output.0", "effective_dtype": "float32",
         "rel_l2_err": 1.25e-05, "cosine": 0.9999999, "max_abs_err": 3e-06,
         "tolerance": {"rel_err": 0.0001}, "first_divergence": False},
        {"npu_name": "Torch.add.3.forward", "bench_name": "Torch.add.3.forward", "step": 0,
         "rank": 0, "status": "carried", "reason": "it <b>adds</b> 'no' error & \"carries\"",
         "tensor": "output.0", "effective_dtype": "bfloat16", "norm_relative_err": 0.5,
         "carried_from": "Torch.mul.2.forward", "first_divergence": False},
        {"npu_name": "Tensor.__add__.5.forward", "bench_name": "Tensor.add.5.forward",
         "step": 1, "rank": 2, "status": "fail", "reason": "Relative error 0.95 (up to 0.004)",
         "tensor": "output.0", "effective_dtype": None, "rel_l2_err": math.inf,
         "finding": "layer_norm.eps/x 0.95", "first_divergence": True},
        {"npu_name": "Torch.matmul.7.forward", "bench_name": None, "step": 1, "rank": 2,
         "status": "waived", "waiver": "known: <matmul> in fp16", "reason": "ignored",
         "tensor": None, "effective_dtype": "float16", "rel_l2_err": "inf"},
        {"npu_name": "A&B.0.forward", "bench_name": "A&B.0.forward", "step": 2, "rank": 0,
         "status": "carried", "first_divergence": True, "carried_from": "x",
         "md5_equal": False, "finding": "dtype_mismatch"},
        {"npu_name": "Torch.x.1.forward", "step": 2, "rank": 0, "status": "skip",
         "md5_equal": True, "reason": "no bench node"},
        {"npu_name": "Torch.y.1.forward", "bench_name": "Torch.y.1.forward", "step": 2,
         "rank": 0, "status": None, "cosine": True, "max_abs_err": 7},
    ]
    criteria = {"tolerances": {"float16": {"rel_err": 0.005}, "bfloat16": {"rel_err": 0.04}}}
    table = joined(compare_section_parts({"nodes": nodes, "first_divergence": None},
                                         criteria)[-1])
    expected = ROWS_HTML.read_text(encoding="utf-8").splitlines()
    assert "<tbody>" + "".join(expected) + "</tbody>" in table


def test_memo_escapes_as_esc_and_keeps_apart_what_compares_equal() -> None:
    memo = Memo(esc)
    for value in ["<a&b>", 1, 1.0, True, None, "1", "<a&b>", 1, ["<x>"], -0.0, 0, False]:
        assert memo(value) == esc(value)
    assert memo(1) == "1" and memo(True) == "True" and memo(1.0) == "1.0"
    memo._KEPT = 2
    for i in range(10):
        assert memo(f"<{i}>") == f"&lt;{i}&gt;"
        assert len(memo) <= 2


def test_tensor_rows_keep_their_layout_and_values() -> None:
    """Each metric kind's columns in msprobe's order; NaN empty; statistics' relative errors
    in percent where the node record keeps fractions; every row the node's stack line."""
    from pytest_accuracy.compare import Comparison
    from pytest_accuracy.dumps.layout import load_dumps
    from pytest_accuracy.report.records import node_record, row_dict, tensor_row
    from tests.helpers import dump

    front = ["Step", "Rank", "NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype",
             "NPU Tensor Shape", "Bench Tensor Shape", "Effective Dtype"]
    back = ["NPU max", "NPU min", "NPU mean", "NPU l2norm", "Bench max", "Bench min",
            "Bench mean", "Bench l2norm", "Result", "Err_message", "NPU_Stack_Info"]
    middle = {"L1_tensor": ["Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr",
                            "One Thousandth Err Ratio", "Five Thousandths Err Ratio",
                            "RelL2Err"],
              "mix_statistics": ["Max diff", "Min diff", "Mean diff", "L2norm diff",
                                 "MaxRelativeErr", "MinRelativeErr", "MeanRelativeErr",
                                 "NormRelativeErr"],
              "L1_md5": ["NPU MD5", "BENCH MD5"]}
    for config, columns in middle.items():
        cmp = Comparison(load_dumps(dump("pt_bug", config)), load_dumps(dump("pt_fp32", config)))
        try:
            results = cmp.results()
        finally:
            cmp.close()
        for result in results:
            record = node_record(result, None)
            rows = [row_dict(row) for row in record["rows"]]
            assert rows == [tensor_row(result, t) for t in result.inputs + result.outputs]
            for row in rows:
                assert list(row)[:9] == front and list(row)[-11:] == back
                assert list(row)[9:-11] in (columns, [])  # [] for a metadata-only pair
                assert row["NPU_Stack_Info"] == result.npu.stack_line()
                assert not any(isinstance(v, float) and math.isnan(v) for v in row.values())
            worst = record.get("norm_relative_err")
            if config == "mix_statistics" and worst is not None and result.outputs:
                out = next(r for r in rows if r["NPU Name"].endswith(
                    "." + record["tensor"]))
                assert out["NormRelativeErr"] == pytest.approx(worst * 100.0)
