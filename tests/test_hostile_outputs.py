"""Outputs that cannot be turned against CI: atomic writes; HTML, CSV, YAML, terminal escaping."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_accuracy.pairing.mapfiles import load_mapping_yaml
from pytest_accuracy.pairing.mapping_yaml import write_mapping_yaml
from pytest_accuracy.report.cells import csv_cell
from pytest_accuracy.report.document import write_compare_csv, write_html, write_json
from pytest_accuracy.report.merge import merge_files
from pytest_accuracy.safe_io import AccuracyOutputError, write_atomic
from tests.hostile_child import run_command

_EVIL = "<script>alert(1)</script>"


def _part(path: Path, **changes: Any) -> Path:
    node = {"npu_name": "Torch.add.0.forward", "bench_name": "Torch.add.0.forward",
            "step": 0, "rank": 0, "status": "pass", "rel_l2_err": 0.0}
    doc: dict[str, Any] = {"version": 1, "verdict": "pass", "inputs": {}, "criteria": {},
                           "compare": {"first_divergence": None, "coverage": None,
                                       "nodes": [node]}}
    for key, value in changes.items():
        if key.startswith("node_"):
            node[key[5:]] = value
        else:
            doc[key] = value
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("writer", ["json", "html", "csv", "golden", "mapping", "atomic"])
def test_a_symlink_planted_at_the_target_is_replaced_not_followed(tmp_path: Path,
                                                                  writer: str) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "out"
    out.mkdir()
    names = {"json": "acc.json", "html": "index.html", "csv": "compare_result.csv",
             "golden": "golden.json", "mapping": "inferred_mapping.yaml", "atomic": "x.txt"}
    target = out / names[writer]
    target.symlink_to(victim)
    doc = merge_files([_part(tmp_path / "p.json")])
    if writer == "json":
        write_json(doc, target)
    elif writer == "html":
        write_html(doc, out, [])
    elif writer == "csv":
        write_compare_csv([{"step": 0, "rank": 0, "rows": [{"NPU Name": "x"}]}], out)
    elif writer == "golden":
        from pytest_accuracy.logs import read_log, write_golden

        sample = Path(__file__).parent / "data" / "log_samples"
        write_golden(read_log(sample / "megatron_golden_values_excerpt.txt", "golden"), target)
    elif writer == "mapping":
        write_mapping_yaml({"a": "b"}, {}, target)
    else:
        write_atomic(target, "new\n")
    assert victim.read_text() == "precious\n"
    assert target.is_file() and not target.is_symlink()
    assert sorted(p.name for p in out.iterdir()) == [names[writer]]  # no temporary left


def test_an_output_whose_folder_is_a_file_is_a_named_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(AccuracyOutputError, match="not a directory"):
        write_json({"version": 1}, tmp_path / "file" / "acc.json")


def test_acc_json_under_a_regular_file_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    proc = run_command([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                        f"--acc-json={tmp_path / 'file' / 'acc.json'}",
                        f"--acc-merge={_part(tmp_path / 'p.json')}"], tmp_path)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "--acc-json: " in proc.stderr and "not a directory" in proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "INTERNALERROR" not in proc.stdout + proc.stderr


def test_every_field_of_a_merge_part_is_escaped_in_html(tmp_path: Path) -> None:
    loss = {"steps_compared": _EVIL, "steps_skipped": _EVIL, "divergence_step": _EVIL,
            "checks": {_EVIL: {"status": _EVIL, "measured": {_EVIL: _EVIL}, "message": _EVIL,
                               "worst_steps": [_EVIL],
                               "bars": [{"param": _EVIL, "rel_diff": _EVIL}]}}}
    part = _part(tmp_path / "p.json", loss=loss, node_npu_name=_EVIL, node_bench_name=_EVIL,
                 node_tolerance={"rel_err": _EVIL}, node_effective_dtype=_EVIL,
                 node_rel_l2_err=_EVIL, node_reason=_EVIL, node_parent=_EVIL)
    doc = merge_files([part])
    page = write_html(doc, tmp_path, []).read_text()
    assert "<script>alert" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_csv_cells_are_neutralised_and_numbers_stay_numbers(tmp_path: Path) -> None:
    rows = [{"NPU Name": "=HYPERLINK(\"http://x\")", "Bench Name": "@SUM(A1)", "Max diff": -0.5,
             "Message": "-2+3+cmd|' /C calc'!A0", "Other": "+1", "Tab": "\tx",
             "Line": "a\nb\rc", "Surrogate": "x\ud800y", "Num": "-0.5", "Del": "a\x7fb"}]
    path = write_compare_csv([{"step": 0, "rank": 0, "rows": rows}], tmp_path)
    assert path is not None
    [read] = list(csv.DictReader(path.open(encoding="utf-8", newline="")))
    assert read["NPU Name"].startswith("'=") and read["Bench Name"] == "'@SUM(A1)"
    assert read["Message"].startswith("'-2+3") and read["Tab"] == "'\\tx"
    assert read["Max diff"] == "-0.5" and read["Num"] == "-0.5" and read["Other"] == "+1"
    assert read["Line"] == "a\\nb\\rc" and read["Surrogate"] == "x\\ud800y"
    assert read["Del"] == "a\\x7fb"
    assert path.read_text(encoding="utf-8").count("\n") == 2  # one header, one record
    assert csv_cell(-0.5) == -0.5 and csv_cell(None) == ""


def test_names_with_del_and_surrogates_round_trip_through_the_mapping_yaml(tmp_path: Path
                                                                           ) -> None:
    pairs = {"Module.a\x7fb.0.forward": "Module.c\x7fd.0.forward",
             "Torch.x\ud800.0.forward": "Torch.y\nz.0.forward"}
    evidence = {name: f"same path {name} \x7f\x1b[2K" for name in pairs}
    path = write_mapping_yaml(pairs, evidence, tmp_path / "inferred_mapping.yaml",
                              confidence={name: 0.9 for name in pairs},
                              unmatched=["Torch.u\x7f.0.forward"], source="npu\x7f vs bench")
    text = path.read_text(encoding="ascii")  # every character escaped to ASCII
    assert "\x7f" not in text and "\x1b" not in text
    assert load_mapping_yaml(path) == pairs


def test_merge_cli_escapes_control_characters_and_newlines(tmp_path: Path) -> None:
    name = "Torch.add\x1b[2K\nPASSED fake\u202e.0.forward"
    part = _part(tmp_path / "p.json", verdict="fail", node_npu_name=name, node_status="fail")
    proc = run_command([sys.executable, "-m", "pytest_accuracy.report.merge_cli", str(part)],
                       tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "\x1b" not in proc.stdout and "\u202e" not in proc.stdout
    assert "Torch.add\\x1b[2K\\nPASSED fake\\u202e.0.forward" in proc.stdout
    assert not any(line.startswith("PASSED") for line in proc.stdout.splitlines())


@pytest.mark.parametrize(("changes", "problem"), [
    ({"node_step": "abc"}, "compare node 0: step 'abc' is not an integer"),
    ({"node_step": float("inf")}, "compare node 0: step inf is not an integer"),
    ({"node_rank": 10**30}, "is out of range"),
    ({"compare": {"first_divergence": {"step": 0, "rank": 0}, "nodes": []}},
     "compare.first_divergence lacks npu_name, tensor, reason"),
    ({"inputs": [[[[]]]] * 2, "deep": json.loads("[" * 900 + "]" * 900)},
     "nesting depth: 65 is over the limit 64"),
    ({"verdict": None}, "verdict None: not pass or fail"),
])
def test_malformed_parts_are_named_errors_through_the_cli(tmp_path: Path,
                                                          changes: dict[str, Any],
                                                          problem: str) -> None:
    part = _part(tmp_path / "p.json", **changes)
    proc = run_command([sys.executable, "-m", "pytest_accuracy.report.merge_cli", str(part),
                        "-o", str(tmp_path / "merged.json")], tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith(f"pytest-accuracy-merge: {part}: "), proc.stderr
    assert problem in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "merged.json").exists()


def test_a_huge_step_x_rank_product_is_refused(tmp_path: Path) -> None:
    nodes = [{"npu_name": f"n{i}", "step": i, "rank": 0, "status": "pass"} for i in range(1100)]
    nodes += [{"npu_name": f"m{i}", "step": 0, "rank": i + 1, "status": "pass"}
              for i in range(1100)]
    part = _part(tmp_path / "p.json", compare={"nodes": nodes})
    proc = run_command([sys.executable, "-m", "pytest_accuracy.report.merge_cli", str(part)],
                       tmp_path)
    assert proc.returncode == 2 and "ACC_MAX_MERGE_SHARDS" in proc.stderr, proc.stderr
    proc = run_command([sys.executable, "-m", "pytest_accuracy.report.merge_cli", str(part),
                        "--ranks=0-1000000000000"], tmp_path)
    assert proc.returncode == 2 and "ACC_MAX_MERGE_SHARDS" in proc.stderr, proc.stderr
