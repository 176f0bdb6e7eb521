"""msprobe acc_check results through the plugin: the bundled before/after example, bad files."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
EXAMPLE = ROOT / "example_data" / "msprobe_acc_check"
REAL = Path(__file__).parent / "data" / "real" / "msprobe" / "acc_check"


def test_bundled_example_names_each_regression(pytester: pytest.Pytester) -> None:
    out, rep = pytester.path / "acc.json", pytester.path / "rep"
    result = pytester.runpytest(f"--acc-npu-precheck-results={EXAMPLE / 'after'}",
                                f"--acc-bench-precheck-results={EXAMPLE / 'before'}",
                                f"--acc-json={out}", f"--acc-report={rep}",
                                "-p", "no:cacheprovider")
    assert result.ret == 1
    result.assert_outcomes(passed=6, failed=6)
    failed = sorted(line.split()[1] for line in result.stdout.lines if line.startswith("FAILED"))
    assert failed == [f"accuracy::precheck::msprobe/{name}" for name in (
        "Functional.silu.0.backward", "Functional.silu.0.forward", "Torch.rsqrt.0.backward",
        "Torch.rsqrt.0.forward", "Torch.softmax.0.backward", "Torch.softmax.0.forward")]
    result.stdout.fnmatch_lines([
        "Torch.rsqrt.0.forward: msprobe says pass, our standard says fail (they disagree)",
        "Regression: it passed in the bench results (msprobe says pass, our standard says pass).",
        "  output.0 float32 (2, 15, 1): mean relative error 0.0002 (up to 6.1e-05 allowed for "
        "float32); msprobe: pass",
        "  output.0: mean relative error grew 3.28x: 2.74e-08 before, 0.0002 now (up to 2x "
        "allowed)",
    ])
    apis = {a["name"]: a["status"] for a in json.loads(out.read_text())["precheck"]["apis"]}
    assert apis["msprobe/Torch.rsqrt.0.forward"] == "fail"
    assert apis["msprobe/Tensor.__add__.1.forward"] == "pass"
    with (rep / "precheck_accuracy_checking_result.csv").open(newline="") as handle:
        rows = {r["API name"]: r for r in csv.DictReader(handle)}
    assert rows["msprobe/Torch.rsqrt.0"]["Forward Test Success"] == "error"
    assert rows["msprobe/Functional.linear.0"]["Backward Test Success"] == "pass"


def test_growth_alone_fails_and_its_factor_is_an_option(pytester: pytest.Pytester) -> None:
    """The clean run against itself passes; a wider factor lets the rsqrt growth through."""
    clean = REAL / "pt_26.2.0_fp32_clean"
    result = pytester.runpytest(f"--acc-npu-precheck-results={clean}",
                                f"--acc-bench-precheck-results={clean}", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=12)
    result = pytester.runpytest(f"--acc-npu-precheck-results={EXAMPLE / 'after'}",
                                f"--acc-bench-precheck-results={EXAMPLE / 'before'}",
                                "--acc-precheck-growth=1e9", "-p", "no:cacheprovider",
                                "-k", "rsqrt")
    result.assert_outcomes(failed=2, deselected=10)  # its own mean relative error still fails


def test_ini_key_turns_the_suite_on(pytester: pytest.Pytester) -> None:
    pytester.makeini(f"[pytest]\nacc_npu_precheck_results = {REAL / 'pt_26.2.0_nan_inf'}\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(["Torch.matmul.0.forward: msprobe says warning, our standard "
                                 "says fail (they disagree)"])


def test_a_run_that_compared_nothing_is_an_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(f"--acc-npu-precheck-results={REAL / 'pt_26.2.0_vf_false_pass'}",
                                "-p", "no:cacheprovider")
    assert result.ret not in (0, 5)
    result.stdout.fnmatch_lines(["*msprobe compared nothing: every output is SKIP*"])


def test_bad_file_is_one_named_line(pytester: pytest.Pytester) -> None:
    bad = pytester.path / "accuracy_checking_details_1.csv"
    bad.write_text("API Name,Bench Dtype,DEVICE Dtype,Status\n"
                   "=cmd|' /C calc'!A0,torch.float64,torch.float32,pass\n", encoding="utf-8")
    result = pytester.runpytest(f"--acc-npu-precheck-results={bad}", "-p", "no:cacheprovider")
    assert result.ret == 2
    result.stdout.fnmatch_lines([f"unreadable input: {bad}: line 2: the name =cmd|' /C calc'!A0 "
                                 "starts with '=', a spreadsheet formula, not an msprobe API name"])
    assert "Traceback" not in result.stdout.str()


def test_bench_results_alone_say_what_is_missing(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(f"--acc-bench-precheck-results={EXAMPLE / 'before'}",
                                "-p", "no:cacheprovider")
    assert result.ret == 2
    result.stdout.fnmatch_lines(["*give the run under test too, --acc-npu-precheck-results=PATH"])
