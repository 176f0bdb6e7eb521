"""What a user sees: option values, selections, levels, summaries and markers, pinned."""

from __future__ import annotations

import re

import pytest

from pytest_accuracy.options import OPTIONS
from tests.helpers import ROOT, dump

LOGS = ROOT / "example_data" / "logs"
CONFIGS = ROOT / "example_data" / "configs"
BENCH_LOGS = [str(LOGS / "megatron_bench_a.log"), str(LOGS / "megatron_bench_b.log")]


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", *args)


def dumps(npu: str = "pt_bug", bench: str = "pt_fp32", config: str = "L1_tensor") -> list[str]:
    return [f"--acc-npu={dump(npu, config)}", f"--acc-bench={dump(bench, config)}"]


@pytest.mark.parametrize(("arg", "message"), [
    ("--acc-steps-select=abc",
     "ERROR: --acc-steps-select: expected integers and ranges, e.g. '0,2-4', got 'abc'"),
    ("--acc-ranks=3-1",
     "ERROR: --acc-ranks: expected integers and ranges, e.g. '0,2-4', got '3-1'"),
    ("--acc-min-matched=half",
     "ERROR: --acc-min-matched: expected a number, e.g. 0.01, got 'half'"),
    ("--acc-inputs=some", "ERROR: --acc-inputs: expected one of failing, all, got 'some'"),
    ("--acc-loss-steps=100", "ERROR: --acc-loss-steps: expected 'start:end', e.g. '100:2000', "
                             "got '100'"),
    ("--acc-local-norm-step=first", "ERROR: --acc-local-norm-step: expected an integer, e.g. 100, "
                                    "got 'first'"),
])
def test_a_bad_option_value_is_one_line_naming_the_option(
        pytester: pytest.Pytester, arg: str, message: str) -> None:
    result = run(pytester, *dumps(), arg)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert result.stderr.lines[0] == message
    assert "Traceback" not in result.stderr.str() + result.stdout.str()


def test_a_bad_ini_value_names_the_ini_key(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nacc_align = fuzzy\n")
    result = run(pytester, *dumps())
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert result.stderr.lines[0] == ("ERROR: acc_align (ini): expected one of auto, always, name, "
                                      "got 'fuzzy'")


def test_a_selection_that_matches_nothing_lists_what_exists(pytester: pytest.Pytester) -> None:
    result = run(pytester, *dumps(), "--acc-steps-select=5")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    where = dump("pt_bug", "L1_tensor")
    result.stdout.fnmatch_lines([f"--acc-steps-select=5 selects nothing in {where}: it has steps "
                                 "0-1 and ranks 0."])
    result = run(pytester, *dumps(), "--acc-steps-select=0-1", "--acc-ranks=2,4-5")
    result.stdout.fnmatch_lines(["--acc-steps-select=0-1 --acc-ranks=2,4-5 selects nothing in *: "
                                 "it has steps 0-1 and ranks 0."])


def test_l0_against_l1_names_the_levels(pytester: pytest.Pytester) -> None:
    result = run(pytester, f"--acc-npu={dump('pt_bug', 'L0_tensor')}",
                 f"--acc-bench={dump('pt_fp32', 'L1_tensor')}")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines([
        "the NPU dump is level L0 (modules only) and the bench dump level L1 (APIs only): they "
        "share no node. Dump both at the same level (or mix)."])


def test_npu_dump_alone_is_checked_for_overflow(pytester: pytest.Pytester) -> None:
    """No bench: every step and rank of the NPU dump is an overflow item (issue 27)."""
    result = run(pytester, f"--acc-npu={dump('pt_bug', 'L0_tensor')}", "-v")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*accuracy::overflow::0/0 PASSED*",
                                 "*accuracy::overflow::1/0 PASSED*"])


def test_every_option_has_its_ini_key_and_the_docs_list_both(pytester: pytest.Pytester) -> None:
    result = run(pytester, "--help")
    readme = (ROOT / "docs" / "options.md").read_text()
    for option in OPTIONS:
        assert re.search(rf"^  {option.flag}\b", result.stdout.str(), re.M), option.flag
        assert f"  {option.dest} " in result.stdout.str(), option.dest
        assert f"`{option.flag}" in readme and f"`{option.dest}" in readme, option.flag


def test_ini_keys_work_for_flags_and_lists(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nacc_precheck = true\n")
    result = run(pytester, f"--acc-npu={dump('pt_bug', 'L1_tensor')}", "--collect-only", "-q")
    ids = [line for line in result.stdout.lines if line.startswith("accuracy::")]
    assert ids and all(i.startswith("accuracy::precheck::") for i in ids)
    pytester.makeini("[pytest]\nacc_scope =\n    Functional.linear.*\n    Tensor.__add__.*\n")
    result = run(pytester, *dumps(), "--collect-only", "-q")
    nodes = [line.split("/")[-1] for line in result.stdout.lines if "::0/0/" in line]
    assert nodes and {n.split(".")[0] + "." + n.split(".")[1] for n in nodes} == {
        "Functional.linear", "Tensor.__add__"}


def test_a_node_id_argument_selects_generated_items(pytester: pytest.Pytester) -> None:
    result = run(pytester, *dumps(), "accuracy::compare::coverage",
                 "accuracy::compare::0/0/Tensor.__add__.5.forward")
    assert result.ret == 1
    result.assert_outcomes(passed=1, failed=1, deselected=244)


def test_loss_summary_lists_every_failing_check_and_the_divergence_step(
        pytester: pytest.Pytester) -> None:
    result = run(pytester, f"--acc-npu-log={LOGS / 'npu_spike.log'}",
                 *(f"--acc-bench-log={b}" for b in BENCH_LOGS))
    lines = result.stdout.str().split("= accuracy =")[1].splitlines()[1:7]
    assert lines[0] == "loss: 5 of 7 checks failed; the loss curves diverge from step 200."
    assert [line.split(":")[0] for line in lines[1:]] == [
        "  mean_loss", "  grad_norm", "  band", "  zero_centred", "  divergence"]
    assert lines[1] == (
        "  mean_loss: Mean loss mismatch over 300 paired steps (0 skipped); mean absolute "
        "difference 0.100785 (up to 0.01 allowed); mean relative difference 4.3110% (up to 1.00% "
        "allowed); greatest difference 1.49794 at step 200 (npu 3.91504, bench 2.4171).")


def test_config_summary_counts_every_failing_key(pytester: pytest.Pytester) -> None:
    result = run(pytester, f"--acc-npu-config={CONFIGS / 'mindformers_llama2_7b_misaligned.yaml'}",
                 f"--acc-bench-config={CONFIGS / 'megatron_llama2_7b_args.yaml'}")
    result.stdout.fnmatch_lines([
        "config: 3 of 63 checklist keys failed:",
        "  num_heads differs: npu model.model_config.num_heads = 64, bench --num-attention-heads "
        "= 32 (the guide: *).",
        "  rms_norm_eps differs: *",
        "  adam_beta2 differs: *",
    ])


def test_marker_only_dump_test_asserts_the_compare(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(f"""
        from pytest_accuracy import accuracy

        @accuracy(npu=r"{dump('pt_bug', 'L1_tensor')}", bench=r"{dump('pt_fp32', 'L1_tensor')}")
        def test_bug():
            pass

        @accuracy(npu=r"{dump('pt_fp32', 'L1_tensor')}", bench=r"{dump('pt_fp32', 'L1_tensor')}")
        def test_same():
            pass

        @accuracy(npu=r"{dump('pt_bug', 'L0_tensor')}", bench=r"{dump('pt_fp32', 'L1_tensor')}")
        def test_nothing_pairs():
            pass
    """)
    result = run(pytester)
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines([
        "*_ test_bug _*",
        "test_bug (test_marker_only_dump_test_asserts_the_compare.py:3) misses its @accuracy "
        "criteria:",
        "Compare of */pt_bug/L1_tensor with */pt_fp32/L1_tensor:",
        "First divergence: Tensor.__add__.5.forward (step 0, rank 0), output.0: *",
        "1 of 244 NPU nodes miss the compare criteria.",
        "*_ test_nothing_pairs _*",
        "*misses its @accuracy criteria:",
        "Compare of *",
        "only 0 of 126 NPU nodes found a bench counterpart (at least 50% required).",
    ])
    assert "plugin.py" not in result.stdout.str()


def test_failing_log_marker_shows_the_test_and_criteria_not_plugin_code(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(f"""
        from pytest_accuracy import accuracy

        @accuracy(npu_log=r"{LOGS / 'npu_late_drift.log'}", bench_logs={BENCH_LOGS!r})
        def test_drift(acc_npu_log, acc_bench_logs):
            pass
    """)
    result = run(pytester)
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    section = text.split("_ test_drift _")[1].split("= short test summary")[0]
    assert section.splitlines()[1:3] == [
        "test_drift (test_failing_log_marker_shows_the_test_and_criteria_not_plugin_code.py:3) "
        "misses its @accuracy criteria:",
        "Migration standard missed (4 of 7 checks):"]
    assert "plugin.py" not in text and "Traceback" not in text
