"""Monitor items through pytest: the bundled example names the step and parameter."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import ROOT

EXAMPLE = ROOT / "example_data" / "monitor"
BUG_PARAM = "model.layers.1.mlp.down_proj.weight"


def _run(pytester: pytest.Pytester, npu: str, bench: str, *extra: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", f"--acc-npu-monitor={EXAMPLE / npu}",
                              f"--acc-bench-monitor={EXAMPLE / bench}", *extra)


def test_gradient_bug_names_step_and_parameter(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "bug", "bench", "--acc-json=acc.json")
    # one cause, one failure: weights and Adam moments part after the gradients, carrying them
    result.assert_outcomes(passed=1, failed=1, xfailed=3)
    result.stdout.fnmatch_lines([
        "*_ accuracy::monitor::0/grad _*",
        f"Gradients part at step 2, rank 0: {BUG_PARAM} first (1 of 21 paired parameters "
        "differ at that step, worst first):",
        f"  {BUG_PARAM}: grad_reduced norm 0.0619745 vs bench 0.0495796: relative difference "
        "0.25 (up to 0.0001 allowed, float32, plus 1e-10 for rounding)",
        "Steps 0-1 agree.",
        f"First state to part on rank 0: gradients (grad_reduced) at step 2, {BUG_PARAM}; then "
        "weights at step 2, Adam exp_avg (first moment) at step 3, Adam exp_avg_sq (second "
        "moment) at step 3.",
        "Dump step 2 of both runs with msprobe (level mix, scope model.layers.1.mlp.down_proj.*)*",
    ])
    assert result.ret == 1
    doc = json.loads((pytester.path / "acc.json").read_text())
    grad = next(s for s in doc["monitor"]["states"] if s["name"] == "0/grad")
    assert (grad["status"], grad["step"], grad["param"]) == ("fail", 2, BUG_PARAM)
    assert grad["first_state"] == {"kind": "grad", "metric": "grad_reduced", "step": 2,
                                   "param": BUG_PARAM}
    assert doc["inputs"]["npu_monitor"].endswith("bug")
    statuses = {s["name"]: s["status"] for s in doc["monitor"]["states"]}
    assert statuses == {"0/grad": "fail", "0/param": "carried", "0/exp_avg": "carried",
                        "0/exp_avg_sq": "carried", "coverage": "pass"}


def test_lr_bug_fails_the_weights_and_carries_the_rest(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "lr_bug", "bench", "-rfx")
    result.assert_outcomes(passed=1, failed=1, xfailed=3)
    result.stdout.fnmatch_lines([
        "FAILED accuracy::monitor::0/param*",
        f"XFAIL accuracy::monitor::0/grad - grad parts at step 1 (*), after param parted at "
        f"step 0 ({BUG_PARAM}): it carries that error*",
    ])


def test_benign_pair_passes(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "benign", "bench")
    result.assert_outcomes(passed=5)
    assert result.ret == 0


def test_lr_bug_says_weights_part_first(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "lr_bug", "bench", "-k", "param")
    result.assert_outcomes(failed=1, deselected=4)
    result.stdout.fnmatch_lines([
        f"Weights part at step 0, rank 0: {BUG_PARAM} first*",
        f"The update of {BUG_PARAM} differs while its gradients agree: check the optimizer "
        "settings of its parameter group*",
    ])


def test_one_monitor_missing_is_a_collection_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("-p", "no:cacheprovider",
                                f"--acc-npu-monitor={EXAMPLE / 'bug'}")
    result.stdout.fnmatch_lines(["*unreadable input: *--acc-bench-monitor is missing*"])
    assert result.ret != 0


def test_folder_without_monitor_output_errors(pytester: pytest.Pytester) -> None:
    (pytester.path / "empty").mkdir()
    result = pytester.runpytest("-p", "no:cacheprovider", "--acc-npu-monitor=empty",
                                f"--acc-bench-monitor={EXAMPLE / 'bench'}")
    result.stdout.fnmatch_lines(["*unreadable input: *empty: no msprobe monitor output*"])
    assert result.ret != 0
    assert "Traceback" not in result.stdout.str()


def test_nothing_paired_fails(pytester: pytest.Pytester) -> None:
    npu = pytester.path / "npu" / "Nov26_02-26-45-rank0-x"
    npu.mkdir(parents=True)
    (npu / "grad_reduced_0-0.csv").write_text(
        "vpp_stage,name,step,norm\n0,other.weight,0,0.5\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "--acc-npu-monitor=npu",
                                f"--acc-bench-monitor={EXAMPLE / 'bench'}")
    result.assert_outcomes(failed=1, skipped=1)
    result.stdout.fnmatch_lines(["*nothing was compared*", "*Matched 0 of 1 NPU parameter*"])
    assert result.ret == 1


def test_ini_keys_turn_the_suite_on(pytester: pytest.Pytester, tmp_path: Path) -> None:
    for run in ("bug", "bench"):
        shutil.copytree(EXAMPLE / run, pytester.path / run)
    pytester.makeini("[pytest]\nacc_npu_monitor = bug\nacc_bench_monitor = bench\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "-k", "grad")
    result.assert_outcomes(failed=1, deselected=4)
