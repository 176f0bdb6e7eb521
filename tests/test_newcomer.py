"""A newcomer's set-up traps and the messages that lead to the fix (issue 26, items 3-5)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from tests.helpers import dump


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", *args)


def dumps(npu: str = "pt_bug", bench: str = "pt_fp32", config: str = "L1_tensor") -> list[str]:
    return [f"--acc-npu={dump(npu, config)}", f"--acc-bench={dump(bench, config)}"]


# -- item 3: set-up traps --------------------------------------------------------------------

def test_inputs_in_the_ini_collect_the_built_in_suite(pytester: pytest.Pytester) -> None:
    pytester.makeini(f"[pytest]\nacc_npu = {dump('pt_bug', 'L1_tensor')}\n"
                     f"acc_bench = {dump('pt_fp32', 'L1_tensor')}\n")
    result = run(pytester, "-q")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["First divergence: Tensor.__add__.5.forward *",
                                 "*1 failed, 48 passed, 197 xfailed*"])


def test_acc_suite_off_keeps_ini_inputs_for_the_fixtures_only(pytester: pytest.Pytester) -> None:
    pytester.makeini(f"[pytest]\nacc_npu = {dump('pt_bug', 'L1_tensor')}\n"
                     f"acc_bench = {dump('pt_fp32', 'L1_tensor')}\nacc_suite = off\n")
    pytester.makepyfile("def test_mine(acc_npu_dump):\n    assert acc_npu_dump.dumps\n")
    result = run(pytester, "-q")
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=1)


def test_a_dump_alone_in_the_ini_says_what_is_missing(pytester: pytest.Pytester) -> None:
    pytester.makeini(f"[pytest]\nacc_bench = {dump('pt_fp32', 'L1_tensor')}\n")
    result = run(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert result.stderr.lines[0] == ("ERROR: --acc-bench is given but --acc-npu is missing: a "
                                      "compare needs both dumps; add --acc-npu=PATH")


def test_npu_dump_with_precheck_needs_no_bench(pytester: pytest.Pytester) -> None:
    result = run(pytester, f"--acc-npu={dump('pt_bug', 'L1_tensor')}", "--acc-precheck",
                 "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.OK
    assert any(line.startswith("accuracy::precheck::") for line in result.stdout.lines)


@pytest.mark.parametrize(("typed", "meant"), [
    ("--acc-bnech=x", "--acc-bench"), ("--acc-npu-lg=x.log", "--acc-npu-log"),
    ("--acc-reprot", "--acc-report")])
def test_a_mistyped_option_names_the_closest(pytester: pytest.Pytester, typed: str,
                                             meant: str) -> None:
    result = run(pytester, typed)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    name = typed.split("=")[0]
    assert result.stderr.lines[0] == f"ERROR: unrecognized option {name}; did you mean {meant}?"


def test_an_option_value_that_looks_like_an_option_is_left_to_argparse(
        pytester: pytest.Pytester) -> None:
    """Only tokens before ``--`` are checked; a known flag passes through untouched."""
    result = run(pytester, *dumps(), "--collect-only", "-q", "--", "--acc-zzz")
    assert "did you mean" not in result.stderr.str()


@pytest.mark.parametrize("workers", [[], ["-n", "2"]])
def test_an_unknown_node_id_is_not_found_with_close_names(pytester: pytest.Pytester,
                                                          workers: list[str]) -> None:
    result = run(pytester, *dumps(), *workers, "accuracy::compare::0/0/Tensor.__add__.5.forwrd")
    # a collection error: pytest says interrupted (2), xdist failed (1); never 0 or 5
    assert result.ret in (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.TESTS_FAILED)
    result.stdout.fnmatch_lines([
        "not found: accuracy::compare::0/0/Tensor.__add__.5.forwrd; did you mean "
        "accuracy::compare::0/0/Tensor.__add__.5.forward or *"])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    assert "passed" not in result.stdout.str()


def test_a_known_node_id_and_a_group_still_select(pytester: pytest.Pytester) -> None:
    result = run(pytester, *dumps(), "accuracy::compare::0/0/Tensor.__add__.5.forward",
                 "accuracy::compare::coverage")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(failed=1, passed=1)
    assert "not found" not in result.stdout.str()


def _marker_suite(pytester: pytest.Pytester, npu: str, bench: str) -> Path:
    """A suite in ``suites/`` whose marker names dumps relative to that directory."""
    suites = pytester.mkdir("suites")
    for name, variant in (("npu", "pt_bug"), ("bench", "pt_fp32")):
        (suites / name).symlink_to(dump(variant, "L1_tensor"), target_is_directory=True)
    (suites / "test_relative.py").write_text(
        "from pytest_accuracy import accuracy\n\n"
        f"@accuracy(npu={npu!r}, bench={bench!r})\n"
        "def test_localised(acc_compare):\n"
        "    assert acc_compare.first_divergence.npu_name == 'Tensor.__add__.5.forward'\n")
    return suites


def test_relative_marker_paths_are_read_from_the_test_file_directory(
        pytester: pytest.Pytester) -> None:
    _marker_suite(pytester, "npu", "bench")
    result = run(pytester, "suites")  # started one directory above the test file
    result.assert_outcomes(passed=1)


def test_a_missing_marker_path_is_one_line_naming_it(pytester: pytest.Pytester) -> None:
    suites = _marker_suite(pytester, "npu", "no_such_dump")
    result = run(pytester, "suites")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([
        f"@accuracy(bench=...): {suites / 'no_such_dump'} does not exist (relative marker "
        f"paths are read from the test file's directory, {suites})"])
    assert "Traceback" not in result.stdout.str()


# -- the unmatched reason (compare/engine.py: _unmatched_reason) --------------------------------

def test_unmatched_reason_does_not_ask_for_the_alignment_already_in_effect(
        pytester: pytest.Pytester) -> None:
    ms, pt = dump("ms_fp32", "L1_tensor"), dump("pt_fp32", "L1_tensor")
    result = run(pytester, f"--acc-npu={ms}", f"--acc-bench={pt}", "-rs")
    text = result.stdout.str()
    assert "unmatched: no pytorch counterpart" in text
    assert "use --acc-align=auto" not in text
    assert "neither the alignment nor the mapping in effect pairs it" in text
    result = run(pytester, f"--acc-npu={ms}", f"--acc-bench={pt}", "--acc-align=name", "-rs")
    assert "pairing is by name only; use --acc-align=auto" in result.stdout.str()


# -- item 4: messages that lead to the fix ------------------------------------------------------

def test_a_precision_failure_names_the_option_that_declares_it(pytester: pytest.Pytester) -> None:
    result = run(pytester, *dumps("pt_bf16", "pt_fp32"))
    result.stdout.fnmatch_lines([
        "If this precision change is on purpose (a bfloat16 run against a float32 golden), "
        "declare it: --acc-allow-precision=bfloat16:float32 (ini acc_allow_precision, marker "
        "@accuracy(allow_precision='bfloat16:float32'))*"])


def test_an_l1_failure_names_its_caller_and_a_mix_failure_its_module(
        pytester: pytest.Pytester) -> None:
    result = run(pytester, *dumps())
    result.stdout.fnmatch_lines([
        "Called from: File */tinyllama_pt.py, line 78, in forward, x = x + "
        "self.attn(self.n1(x)) (this dump records no module structure*",
        "Stack: File */tinyllama_pt.py, line 34, in forward*"])
    result = run(pytester, *dumps(config="mix_statistics"))
    result.stdout.fnmatch_lines(["In module: Module.layers.1.n1.RMSNorm.forward.0",
                                 "Stack: File */tinyllama_pt.py, line 34*"])


def test_a_tensor_failure_counts_mismatched_elements(pytester: pytest.Pytester) -> None:
    result = run(pytester, *dumps())
    result.stdout.fnmatch_lines([
        "output.0: relative error 0.0184 *",
        "Mismatched elements: 16 / 16 (100.0%) with a relative error of 0.1 % or more"])


# -- item 5: compare_result.csv agrees with the terminal ----------------------------------------

def _csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_csv_status_agrees_with_the_terminal(pytester: pytest.Pytester) -> None:
    out = pytester.path / "rep"
    result = run(pytester, *dumps(), f"--acc-report={out}")
    result.assert_outcomes(failed=1, passed=48, xfailed=197)
    rows = _csv(out / "compare_result.csv")
    assert list(rows[0])[:4] == ["Step", "Rank", "Status", "Cause"]
    first = {(r["Step"], r["NPU Name"].rsplit(".", 2)[0]) for r in rows
             if r["Status"] == "first divergence"}
    assert first == {("0", "Tensor.__add__.5.forward")}
    cause = next(r["Cause"] for r in rows if r["Status"] == "first divergence")
    assert cause == "non-tensor argument differs (input.1: 1e-05 vs bench 1e-06)"
    # the many per-tensor "fail" Results belong to nodes that only carry the error
    carried = [r for r in rows if r["Result"] == "fail" and r["Status"] != "first divergence"]
    assert carried and all(r["Status"].startswith(("carried from ", "makes an error"))
                           for r in carried)
    assert {r["Status"] for r in rows} <= {"first divergence", "makes an error", "pass"} | {
        r["Status"] for r in carried}


def test_statistics_relative_errors_are_percent_as_msprobe_writes_them(
        pytester: pytest.Pytester) -> None:
    out = pytester.path / "rep"
    run(pytester, *dumps(config="mix_statistics"), f"--acc-report={out}",
        f"--acc-json={pytester.path / 'acc.json'}")
    import json

    doc = json.loads((pytester.path / "acc.json").read_text())
    node = next(n for n in doc["compare"]["nodes"] if n["first_divergence"])
    row = next(r for r in _csv(out / "compare_result.csv")
               if r["NPU Name"] == f"{node['npu_name']}.{node['tensor']}")
    assert float(row["MaxRelativeErr"]) == pytest.approx(node["max_relative_err"] * 100)
    assert float(row["NormRelativeErr"]) == pytest.approx(node["norm_relative_err"] * 100)


@pytest.mark.parametrize(("key", "closest"), [("acc_bnech", "acc_bench"),
                                               ("acc_npu_lgo", "acc_npu_log")])
def test_a_mistyped_ini_key_is_a_usage_error_naming_the_closest(
        pytester: pytest.Pytester, key: str, closest: str) -> None:
    """A warning would let the run go on in another mode (the NPU dump alone: an overflow
    check that passes): the ini key is refused as a mistyped option is."""
    pytester.makeini(f"[pytest]\nacc_npu = {dump('pt_bug', 'L1_tensor')}\n{key} = x\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: unknown ini key {key} in *tox.ini; did you mean "
                                 f"{closest}?"])


def test_other_plugins_ini_keys_stay_pytest_warnings(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nnot_ours = 1\n")
    pytester.makepyfile("def test_x(): pass")
    assert pytester.runpytest("-p", "no:cacheprovider").ret == 0


@pytest.mark.parametrize("how", ["same path", "link", "copy"])
def test_the_same_run_given_twice_is_refused_by_name(pytester: pytest.Pytester,
                                                     how: str) -> None:
    """A run compared with itself passes whatever it holds (a node 10x off included)."""
    import shutil

    npu = dump("pt_bug", "mix_statistics")
    bench = {"same path": npu, "link": pytester.path / "link", "copy": pytester.path / "copy"}[how]
    if how == "link":
        bench.symlink_to(npu, target_is_directory=True)
    elif how == "copy":
        shutil.copytree(npu, bench)
    result = pytester.runpytest(f"--acc-npu={npu}", f"--acc-bench={bench}", "-p",
                                "no:cacheprovider")
    assert result.ret != 0
    what = "files of the same bytes" if how == "copy" else "the same files"
    result.stdout.fnmatch_lines([f"--acc-npu and --acc-bench are one run: *dump.json and "
                                 f"*dump.json are {what} (at all * step/rank dumps both hold)*"])


def test_two_runs_of_one_model_are_not_one_run(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(f"--acc-npu={dump('pt_bf16', 'mix_statistics')}",
                                f"--acc-bench={dump('pt_fp32', 'mix_statistics')}",
                                "-p", "no:cacheprovider")
    assert "are one run" not in result.stdout.str()
