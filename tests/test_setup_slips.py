"""Set-up slips said in one way (issue 37): one side of a pair of inputs, a file where a dump
folder belongs, and the mode a run is in."""

from __future__ import annotations

import pytest

from tests.helpers import ROOT, dump

LOGS = ROOT / "example_data" / "logs"
NPU, BENCH = f"--acc-npu={dump('pt_bug', 'mix_statistics')}", \
    f"--acc-bench={dump('pt_fp32', 'mix_statistics')}"
CONFIGS = ROOT / "example_data" / "configs"


@pytest.mark.parametrize(("given", "missing"), [
    (f"--acc-bench={dump('pt_fp32', 'mix_statistics')}", "--acc-npu"),
    (f"--acc-npu-log={LOGS / 'mindformers_npu.log'}", "--acc-bench-log"),
    (f"--acc-bench-log={LOGS / 'megatron_bench_a.log'}", "--acc-npu-log"),
    (f"--acc-npu-config={CONFIGS / 'megatron_llama2_7b.sh'}", "--acc-bench-config"),
    (f"--acc-bench-config={CONFIGS / 'megatron_llama2_7b.sh'}", "--acc-npu-config"),
])
def test_one_side_of_a_pair_is_a_usage_error_naming_the_other(
        pytester: pytest.Pytester, given: str, missing: str) -> None:
    result = pytester.runpytest("-p", "no:cacheprovider", given)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    flag = given.split("=")[0]
    result.stderr.fnmatch_lines([f"ERROR: {flag} is given but {missing} is missing: *; add "
                                 f"{missing}=PATH"])


def test_a_file_where_the_dump_belongs_says_which_folder_to_give(
        pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("-p", "no:cacheprovider",
                                f"--acc-npu={LOGS / 'megatron_bench_a.log'}", BENCH)
    result.stdout.fnmatch_lines(["*megatron_bench_a.log: a file where a dump belongs: give "
                                 "msprobe's dump folder (holding step*/rank*/dump.json)*"])
    assert "not valid JSON" not in result.stdout.str()
    # dump.json itself is a dump
    one = next(dump("pt_bug", "mix_statistics").rglob("dump.json"))
    ok = pytester.runpytest("-p", "no:cacheprovider", f"--acc-npu={one}",
                            f"--acc-bench={dump('pt_fp32', 'mix_statistics')}")
    assert ok.ret == pytest.ExitCode.TESTS_FAILED  # the bug pair, compared


def test_the_header_and_summary_say_an_npu_dump_alone_compares_nothing(
        pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("-p", "no:cacheprovider", NPU)
    assert result.ret == pytest.ExitCode.OK
    line = ("accuracy: overflow check of the NPU dump only: no --acc-bench, nothing is compared "
            "(not given: training logs*")
    result.stdout.fnmatch_lines([line, "*= accuracy =*", line])
    both = pytester.runpytest("-p", "no:cacheprovider", NPU, BENCH)
    both.stdout.fnmatch_lines(["accuracy: compare of two dumps (not given: training logs*"])


SUITE = """
def test_my_model(acc_compare):
    acc_compare.assert_close()

def test_my_logs(acc_npu_log):
    assert len(acc_npu_log.frame) > 0
"""


def test_a_suite_test_whose_inputs_are_given_nowhere_errors_unless_told_to_skip(
        pytester: pytest.Pytester) -> None:
    """A CI job whose ini lost its dump paths used to exit 0 (every suite test skipped)."""
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines([
        "*no npu dump given (--acc-npu, ini acc_npu or @accuracy(npu=...)); a suite test needs "
        "its inputs (--acc-missing-input=skip, ini acc_missing_input = skip, skips such tests "
        "instead)*"])
    skipped = pytester.runpytest("-p", "no:cacheprovider", "--acc-missing-input=skip")
    assert skipped.ret == pytest.ExitCode.OK
    skipped.assert_outcomes(skipped=2)
