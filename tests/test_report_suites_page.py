"""A user's own @accuracy tests on the report page (issue 38): one block per test, failing
first, with its summary, inputs, the first divergence its compare found (the marker's own
compare too) and the loss checks its logs were held to; the Inputs section lists what they read;
everything from an input escaped."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from pytest_accuracy.report.html import render
from tests.helpers import dump

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "example_data" / "logs"
EVIL = "<script>alert(1)</script>"
NODE = "Module.layers.1.n1.RMSNorm.forward.0"

SUITE = '''
import pytest
from pytest_accuracy import accuracy

BUG, GOOD = {bug!r}, {good!r}
NPU_LOG, BENCH = {npu_log!r}, {bench!r}


@accuracy(npu=BUG, bench=GOOD)
def test_marker_only_bug():
    pass


@accuracy(npu=BUG, bench=GOOD)
def test_fixture_bug(acc_compare):
    assert acc_compare.first_divergence.npu_name == {node!r}


@accuracy(npu_log=NPU_LOG, bench_logs=BENCH)
def test_drifting_logs(acc_npu_log, acc_bench_logs):
    pass


@accuracy(mean_rel=0.01)
@pytest.mark.parametrize("x", [{evil!r}])
def test_named_evil(x):
    pass
'''


def _run(pytester: pytest.Pytester) -> tuple[str, dict[str, Any]]:
    npu_log = pytester.path / "npu <b>.log"
    shutil.copy(LOGS / "npu_late_drift.log", npu_log)
    bench = [str(LOGS / "megatron_bench_a.log"), str(LOGS / "megatron_bench_b.log")]
    pytester.makepyfile(test_suite=SUITE.format(
        bug=str(dump("pt_bug", "L0_tensor")), good=str(dump("pt_fp32", "L0_tensor")),
        npu_log=str(npu_log), bench=bench, node=NODE, evil=EVIL))
    out, doc = pytester.path / "report", pytester.path / "acc.json"
    result = pytester.runpytest("-p", "no:cacheprovider", f"--acc-report={out}",
                                f"--acc-json={doc}")
    assert (out / "index.html").exists(), result.stdout.str()[-3000:]
    page = (out / "index.html").read_text().replace("<wbr>", "")  # long paths' break points
    return page, json.loads(doc.read_text())


def _tests(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {str(t["name"]).rsplit("::", 1)[-1]: t for t in doc["suites"]["tests"]}


def _block(page: str, short: str) -> str:
    head = r"<div class='suite-test' id='(suite-\d+)'[^>]*><h3><code>[^<]*::"
    end = r"</code>.*?</div>(?=<div class='suite-test'|</section>)"
    found = re.search(head + re.escape(short) + end, page, re.S)
    assert found, short
    return found.group()


def test_each_suite_test_has_a_block_failing_first_linked_from_its_row(
        pytester: pytest.Pytester) -> None:
    page, doc = _run(pytester)
    tests = _tests(doc)
    assert tests["test_marker_only_bug"]["status"] == "fail"
    assert tests["test_drifting_logs"]["status"] == "fail"
    ids = re.findall(r"<div class='suite-test' id='(suite-\d+)' data-status='(\w+)'", page)
    assert len(ids) == 4
    statuses = [s for _, s in ids]
    assert statuses == sorted(statuses, key=lambda s: s != "fail"), statuses
    for anchor, _ in ids:
        assert f"<a href='#{anchor}'>" in page
    block = _block(page, "test_marker_only_bug")
    assert f"First divergence: {NODE}" in block  # its summary
    assert str(dump("pt_bug", "L0_tensor")).split("/")[-1] in block  # its inputs


def test_the_marker_only_failing_compare_keeps_its_first_divergence(
        pytester: pytest.Pytester) -> None:
    page, doc = _run(pytester)
    tests = _tests(doc)
    for name in ("test_marker_only_bug", "test_fixture_bug"):
        first = tests[name].get("first_divergence")
        assert first and first["npu_name"] == NODE, name
        block = _block(page, name)
        assert "Where it diverges" in block and NODE in block and "likely cause" in block
        assert "step 0, rank 0" in block and "output.0" in block


def test_a_log_test_shows_its_loss_checks(pytester: pytest.Pytester) -> None:
    page, doc = _run(pytester)
    loss = _tests(doc)["test_drifting_logs"].get("loss")
    assert loss and any(c["status"] == "fail" for c in loss["checks"].values())
    block = _block(page, "test_drifting_logs")
    assert "<th>criterion</th>" in block and "criteria missed" in block
    assert "npu &lt;b&gt;.log" in block and "npu <b>.log" not in page


def test_inputs_section_lists_what_the_suite_tests_read_escaped(
        pytester: pytest.Pytester) -> None:
    page, _ = _run(pytester)
    inputs = re.search(r"<section id='inputs'>.*?</section>", page, re.S)
    assert inputs
    text = inputs.group()
    assert "L0_tensor" in text and "megatron_bench_a.log" in text
    assert "npu &lt;b&gt;.log" in text
    assert EVIL not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_a_record_from_json_renders_with_every_field_escaped(tmp_path: Path) -> None:
    first = {"npu_name": EVIL, "bench_name": EVIL, "step": 0, "rank": 0, "tensor": EVIL,
             "reason": EVIL, "likely_cause": EVIL}
    loss = {"status": "fail", "checks": {EVIL: {"status": "fail", "measured": {EVIL: 1.0},
                                                "allowed": {EVIL: 0.5}, "message": EVIL}}}
    doc = {"verdict": "fail", "inputs": {}, "suites": {"tests": [
        {"name": EVIL, "status": "fail", "reason": EVIL, "summary": EVIL,
         "inputs": {"npu": EVIL, "bench_logs": [EVIL]}, "first_divergence": first,
         "loss": loss}]}}
    page = render(doc, tmp_path, [])
    assert EVIL not in page
    assert "id='suite-0'" in page and "Where it diverges" in page


def test_a_log_test_draws_its_loss_and_difference_curves(pytester: pytest.Pytester) -> None:
    page, doc = _run(pytester)
    curves = _tests(doc)["test_drifting_logs"]["loss"]["curves"]
    # the NPU's values are the log's own, read again from its text: step k of epoch e of
    # 150-step epochs is step (e - 1) x 150 + k
    text = (LOGS / "npu_late_drift.log").read_text()
    logged = {(int(m[1]) - 1) * int(m[3]) + int(m[2]): float(m[4]) for m in re.finditer(
        r"Epoch:\[\s*(\d+)/\s*\d+\], step:\[\s*(\d+)/\s*(\d+)\], loss: ([\d.]+)", text)}
    assert len(logged) == 300
    drawn = dict(zip(curves["steps"], curves["npu"], strict=True))
    assert drawn and all(abs(v - logged[s]) < 1e-9 for s, v in drawn.items())
    assert len(curves["benches"]) == 2 and len(curves["benches"][0]) == len(curves["steps"])
    assert curves["divergence_step"] == _tests(doc)["test_drifting_logs"]["loss"][
        "divergence_step"] is not None
    block = _block(page, "test_drifting_logs")
    titles = re.findall(r"<svg class='chart'[^>]*aria-label='([^']*)'", block)
    assert titles == ["loss", "loss difference (NPU - bench)"]
    assert f"diverges from step {curves['divergence_step']}" in block
    assert block.count("<path d='M") >= 5  # two bench runs and the NPU; NPU - bench, band


def test_long_logs_are_thinned_keeping_the_divergence_and_the_worst_step() -> None:
    import numpy as np
    import pandas as pd

    from pytest_accuracy.curves.base import DEFAULT
    from pytest_accuracy.curves.sampled import loss_curves
    from pytest_accuracy.logs.table import LogTable

    steps = np.arange(1, 20_001)
    bench = 5 + np.exp(-steps / 4000.0)
    npu = bench.copy()
    npu[12_345] += 0.3  # one spike, between the evenly spaced points
    def table(values: np.ndarray) -> LogTable:
        frame = pd.DataFrame({"loss": values, "skipped": False}, index=pd.Index(steps,
                                                                                 name="step"))
        return LogTable(Path("x.log"), "test", frame)
    curves = loss_curves(table(npu), [table(bench)], DEFAULT, divergence_step=7_777)
    assert len(curves["steps"]) <= 500 and curves["steps_paired"] == 20_000
    assert {1, 20_000, 7_777, int(steps[12_345])} <= set(curves["steps"])
    assert curves["steps"] == sorted(set(curves["steps"]))
    at = curves["steps"].index(int(steps[12_345]))
    assert curves["npu"][at] == pytest.approx(npu[12_345])
    assert curves["tolerance"][at] == pytest.approx(max(0.01, 0.01 * bench[12_345]))


def test_curves_from_json_render_escaped_and_bad_ones_are_left_out(tmp_path: Path) -> None:
    curves = {"column": EVIL, "steps": [1, 2, 3], "npu": [1.0, 2.0, None],
              "benches": [[1.0, 1.5, 2.0]], "tolerance": [0.1, 0.1, 0.1], "divergence_step": 2}
    tests = [{"name": "a", "status": "fail", "loss": {"checks": {}, "curves": curves}},
             {"name": "b", "status": "fail", "loss": {"checks": {}, "curves": {
                 **curves, "npu": [1.0]}}}]
    page = render({"verdict": "fail", "inputs": {}, "suites": {"tests": tests}}, tmp_path, [])
    assert EVIL not in page and page.count("<svg class='chart'") == 2  # b's curves: no chart


def test_a_compare_test_draws_the_built_in_error_charts(pytester: pytest.Pytester) -> None:
    page, doc = _run(pytester)
    dumped = {key for f in dump("pt_bug", "L0_tensor").glob("step*/*/dump.json")
              for key in json.loads(f.read_text())["data"]}
    for name in ("test_marker_only_bug", "test_fixture_bug"):
        chart = _tests(doc)[name]["chart"]
        rows = chart["nodes"]
        assert chart["total"] == len(rows) > 10
        assert {r[0] for r in rows} <= dumped  # each row is a node the NPU dumped
        assert {r[1] for r in rows} == {0, 1}  # both steps
        at = [r for r in rows if r[0] == NODE]
        assert at and at[0][3] == "fail" and at[0][4] > at[0][5]  # error above its tolerance
        block = _block(page, name)
        assert "step 0, rank 0: relative error per node" in block
        assert "step 1, rank 0: relative error per node" in block
        assert ">first divergence</text>" in block
    assert "chart" not in _tests(doc)["test_drifting_logs"]  # no compare, no error chart


def test_a_compare_test_writes_its_compare_table_like_the_built_in_one(
        pytester: pytest.Pytester) -> None:
    import csv

    page, doc = _run(pytester)
    for name in ("test_marker_only_bug", "test_fixture_bug"):
        table = _tests(doc)[name]["table"]
        assert table.startswith("suites/") and table.endswith("/compare_result.csv")
        path = pytester.path / "report" / table
        rows = list(csv.DictReader(path.open(newline="")))
        # one row per output tensor of every node at least, msprobe's columns and ours
        assert len(rows) >= len(_tests(doc)[name]["chart"]["nodes"])
        assert {"Step", "Rank", "Status", "Cause", "NPU Name", "Bench Name"} <= set(rows[0])
        first = [r for r in rows if r["NPU Name"].startswith(NODE + ".output")]
        assert first and "first divergence" in first[0]["Status"].lower(), first
        assert f"href='{table}'" in _block(page, name)
    assert "table" not in _tests(doc)["test_drifting_logs"]
