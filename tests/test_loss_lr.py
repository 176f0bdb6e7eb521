"""accuracy::loss::lr (issue 39): both runs' learning rates step by step, the first step where
the schedules part named; the logs' printed digits are no difference."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers import ROOT

LOGS = ROOT / "example_data" / "logs"
BENCH = [LOGS / "megatron_bench_a.log", LOGS / "megatron_bench_b.log"]


def _run(pytester: pytest.Pytester, npu: Path) -> pytest.RunResult:
    return pytester.runpytest(f"--acc-npu-log={npu}", *(f"--acc-bench-log={b}" for b in BENCH),
                              "-k", "lr", "-p", "no:cacheprovider", "-rA")


def test_schedules_printed_with_other_digits_agree(pytester: pytest.Pytester) -> None:
    """MindFormers prints 4.9998629e-06 where Megatron prints 4.999863E-06: one schedule."""
    result = _run(pytester, LOGS / "mindformers_npu.log")
    result.stdout.fnmatch_lines(["PASSED accuracy::loss::lr"])


def test_a_warmup_off_by_one_step_is_named_at_its_first_step(pytester: pytest.Pytester) -> None:
    """The NPU log's learning rates shifted by one step from step 40 on (a scheduler counting
    from another step): the check names step 40 and the two values."""
    lines = (LOGS / "megatron_bench_a.log").read_text().splitlines(keepends=True)
    lrs = [re.search(r"learning rate: (\S+) \|", line) for line in lines]
    shifted = []
    for i, (line, found) in enumerate(zip(lines, lrs, strict=True)):
        if found and i >= 39 and i + 1 < len(lines) and lrs[i + 1]:
            line = line.replace(found.group(1), lrs[i + 1].group(1))  # type: ignore[union-attr]
        shifted.append(line)
    npu = pytester.path / "npu.log"
    npu.write_text("".join(shifted))
    result = _run(pytester, npu)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    want = lrs[39].group(1), lrs[40].group(1)  # type: ignore[union-attr]
    result.stdout.fnmatch_lines([
        f"Learning-rate schedules part at step 40: npu {float(want[1]):.6g}, bench "
        f"{float(want[0]):.6g} (relative difference *, up to 1e-05 allowed: the digits the logs "
        "print); * of * paired steps differ.",
        "Compare the two schedulers before anything else*"])


def test_a_log_without_learning_rates_skips_with_the_reason(tmp_path: Path) -> None:
    from pytest_accuracy.curves.schedule import check_lr
    from pytest_accuracy.logs import read_log

    npu, bench = read_log(LOGS / "mindformers_npu.log"), read_log(BENCH[0])
    npu.frame["lr"] = float("nan")
    result = check_lr(npu, bench)
    assert (result.status, result.message) == ("skip", f"no learning rate in {npu.path}")
