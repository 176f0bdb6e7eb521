"""Every run mode reaches its report header, the JSON document and the summary (issue 26, item 2):
precheck, config checklist, and a user's own @accuracy suite."""

from __future__ import annotations

import json
import re

import pytest

from tests.helpers import ROOT, dump

CONFIGS = ROOT / "example_data" / "configs"
LOGS = ROOT / "example_data" / "logs"


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", *args)


def header(pytester: pytest.Pytester) -> str:
    html = (pytester.path / "rep" / "index.html").read_text()
    found = re.search(r"<header class='(\w+)'><h1>(.*?)</h1><p>(.*?)</p></header>", html)
    assert found is not None
    return " | ".join(found.groups())


def test_a_precheck_run_that_passes_says_so_in_the_header(pytester: pytest.Pytester) -> None:
    result = run(pytester, f"--acc-npu={dump('pt_fp32', 'L1_tensor')}", "--acc-precheck",
                 "--acc-report=rep")
    assert result.ret == pytest.ExitCode.OK
    assert re.fullmatch(r"pass \| pytest-accuracy: PASS \| Precheck: all \d+ APIs pass",
                        header(pytester))


def test_a_config_run_names_its_failed_keys_in_the_header(pytester: pytest.Pytester) -> None:
    result = run(pytester, f"--acc-npu-config={CONFIGS / 'mindformers_llama2_7b_misaligned.yaml'}",
                 f"--acc-bench-config={CONFIGS / 'megatron_llama2_7b.sh'}", "--acc-report=rep")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    text = header(pytester)
    assert text.startswith("fail | pytest-accuracy: FAIL | Config: ")
    assert re.search(r"Config: \d+ of \d+ checklist keys differ: \w+", text)
    assert "nothing was checked" not in text


def test_a_suite_reaches_the_json_the_report_and_the_summary(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=f"""
        from pytest_accuracy import accuracy

        @accuracy(npu=r"{dump('pt_bug', 'L1_tensor')}", bench=r"{dump('pt_fp32', 'L1_tensor')}")
        def test_marker_only():
            pass

        @accuracy(npu=r"{dump('pt_bug', 'L1_tensor')}", bench=r"{dump('pt_fp32', 'L1_tensor')}")
        def test_localised(acc_compare):
            assert acc_compare.first_divergence.npu_name == "Tensor.__add__.5.forward"

        @accuracy(npu_log=r"{LOGS / 'mindformers_npu.log'}",
                  bench_logs=[r"{LOGS / 'megatron_bench_a.log'}"])
        def test_logs(acc_npu_log, acc_bench_logs):
            pass

        def test_unrelated():
            pass
    """)
    result = run(pytester, "--acc-json=acc.json", "--acc-report=rep")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    doc = json.loads((pytester.path / "acc.json").read_text())
    tests = {t["name"].split("::")[-1]: t for t in doc["suites"]["tests"]}
    assert set(tests) == {"test_marker_only", "test_localised", "test_logs"}
    assert tests["test_marker_only"]["status"] == "fail"
    # the line naming the criterion and the amount, not the heading ending in a colon
    assert tests["test_marker_only"]["reason"].startswith(
        "First divergence: Tensor.__add__.5.forward (step 0, rank 0), output.0: relative error")
    assert "(up to 0.0001 allowed)" in tests["test_marker_only"]["reason"]
    assert tests["test_localised"]["status"] == "pass"
    assert tests["test_localised"]["first_divergence"]["npu_name"] == "Tensor.__add__.5.forward"
    assert tests["test_logs"]["inputs"]["npu_log"].endswith("mindformers_npu.log")
    assert doc["verdict"] == "fail"
    assert "Your suites: 1 of 3 tests fail" in header(pytester)
    result.stdout.fnmatch_lines(["*= accuracy =*", "suites: 1 of 3 @accuracy tests failed:",
                                 "  *test_marker_only*"])


def test_a_suite_that_passes_is_a_pass_not_nothing_checked(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=f"""
        from pytest_accuracy import accuracy

        @accuracy(npu=r"{dump('pt_fp32', 'L1_tensor')}", bench=r"{dump('pt_fp32', 'L1_tensor')}")
        def test_same():
            pass
    """)
    result = run(pytester, "--acc-json=acc.json", "--acc-report=rep")
    assert result.ret == pytest.ExitCode.OK
    doc = json.loads((pytester.path / "acc.json").read_text())
    assert doc["verdict"] == "pass" and doc["suites"]["tests"][0]["status"] == "pass"
    assert header(pytester) == "pass | pytest-accuracy: PASS | Your suites: all 1 tests pass"


def test_a_suite_records_reasons_as_text_and_failures_by_their_amount(
        pytester: pytest.Pytester) -> None:
    """A skip's reason is its text, not pytest's (path, line, "Skipped: ...") tuple; a user's
    assert is summed up by its own line, not "test_x.py:5: AssertionError"."""
    pytester.makepyfile(test_suite=f"""
        import pytest
        from pytest_accuracy import accuracy

        @accuracy(npu=r"{dump('pt_bug', 'L1_tensor')}", bench=r"{dump('pt_fp32', 'L1_tensor')}")
        def test_skipped(acc_compare):
            pytest.skip("not on this machine")

        @accuracy(npu=r"{dump('pt_bug', 'L1_tensor')}", bench=r"{dump('pt_fp32', 'L1_tensor')}")
        def test_asserts(acc_compare):
            assert len(acc_compare.failures) == 0, "failures left"
    """)
    run(pytester, "--acc-json=acc.json")
    doc = json.loads((pytester.path / "acc.json").read_text())
    tests = {t["name"].split("::")[-1]: t for t in doc["suites"]["tests"]}
    assert tests["test_skipped"]["reason"] == "not on this machine"
    assert tests["test_asserts"]["reason"].startswith("AssertionError: failures left")
    assert tests["test_asserts"]["summary"] == tests["test_asserts"]["reason"]


@pytest.mark.parametrize("workers", [[], ["-n", "2"]])
def test_a_suite_only_run_gets_the_section_and_the_step_summary(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, workers: list[str]) -> None:
    """No --acc-* option at all, only a user's @accuracy test: the accuracy section and
    $GITHUB_STEP_SUMMARY as the built-in suite gets them."""
    page = pytester.path / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(page))
    pytester.makepyfile(test_suite=f"""
        from pytest_accuracy import accuracy

        @accuracy(npu=r"{dump('pt_bug', 'L1_tensor')}", bench=r"{dump('pt_fp32', 'L1_tensor')}")
        def test_localised(acc_compare):
            acc_compare.assert_close()
    """)
    result = run(pytester, *workers)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*= accuracy =*", "suites: 1 of 1 @accuracy tests failed:*"])
    text = page.read_text()
    assert text.startswith("## ❌ pytest-accuracy: FAIL") and "test\\_localised" in text


def test_a_plain_test_run_loads_nothing_of_the_suite(pytester: pytest.Pytester,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    pytester.makepyfile(test_plain="def test_x():\n    assert True\n")
    result = run(pytester)
    assert result.ret == pytest.ExitCode.OK
    assert "= accuracy =" not in result.stdout.str()


def test_picking_one_suite_test_by_node_id_runs_only_it(pytester: pytest.Pytester) -> None:
    """Logs named in the ini feed the suite's fixtures; picking one suite test by node id
    used to run the built-in accuracy::loss items too (the same divergence failed twice)."""
    pytester.makeini(f"[pytest]\nacc_npu_log = {LOGS / 'npu_late_drift.log'}\n"
                     f"acc_bench_log = {LOGS / 'megatron_bench_a.log'}\n")
    pytester.makepyfile(test_s="def test_logs(acc_npu_log, acc_bench_logs):\n"
                               "    assert len(acc_npu_log.frame) > 0\n")
    one = run(pytester, "test_s.py::test_logs")
    one.assert_outcomes(passed=1)
    everything = run(pytester)  # the ini's inputs still run the built-in suite by default
    assert everything.ret == pytest.ExitCode.TESTS_FAILED
    everything.stdout.fnmatch_lines(["*accuracy::loss::*"])


def test_the_fixture_table_is_the_report_csv_with_every_input(pytester: pytest.Pytester) -> None:
    """What the README says of `.table` against compare_result.csv, row for row."""
    import csv

    npu, bench = dump("pt_bug", "L1_tensor"), dump("pt_fp32", "L1_tensor")
    pytester.makepyfile(test_t=f"""
        from pytest_accuracy import accuracy

        @accuracy(npu=r"{npu}", bench=r"{bench}")
        def test_t(acc_compare):
            acc_compare.table.to_csv("table.csv", index=False)
    """)
    pytester.runpytest("-p", "no:cacheprovider", "test_t.py")
    table = list(csv.DictReader((pytester.path / "table.csv").open()))
    counts = {}
    for mode in ("", "--acc-inputs=all"):
        run(pytester, f"--acc-npu={npu}", f"--acc-bench={bench}", "--acc-report=rep",
            *([mode] if mode else []))
        rows = list(csv.DictReader((pytester.path / "rep" / "compare_result.csv").open()))
        counts[mode] = len(rows)
    assert (len(table), counts[""], counts["--acc-inputs=all"]) == (590, 519, 590)
