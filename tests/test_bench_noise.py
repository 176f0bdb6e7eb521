"""Tolerances from the bench's own noise (issue 39): --acc-bench-noise, a second bench run.

Real dumps: tests/data/real/cross (transformers' Llama in fp32, eager attention as the bench
and sdpa attention as its second run; x-transformers as the NPU codebase, README there), and
tests/data/real/bench_noise (transformers' Qwen2 in bf16 under three GEMM kernels: the bench,
its second run, the NPU; and the NPU with layer 0's input RMSNorm weight 1.2 % off, a bug 3x
inside the fixed bf16 tolerance; README there).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pytest_accuracy.compare.bench_noise import (
    MAX_LEARNED,
    NOISE_FACTOR,
    learned_tolerance,
    noise_floor,
)
from pytest_accuracy.compare.criteria import judge_stats
from pytest_accuracy.compare.metrics import stats_metrics
from pytest_accuracy.dumps.stats import Stats
from tests.helpers import ROOT

CROSS = ROOT / "tests" / "data" / "real" / "cross"
BENCH, SDPA = CROSS / "_bench_fp32" / "mix", CROSS / "_bench_sdpa" / "mix"
BF16 = ROOT / "tests" / "data" / "real" / "bench_noise"
# the node that makes the bug's error, per level (README: where the npu_bug run first parts)
BUG_NODE = {"L1": "Tensor.__mul__.4.forward", "mix": "Tensor.__mul__.4.forward",
            "L0": "Module.model.layers.0.input_layernorm.Qwen2RMSNorm.forward.0"}


def _run(pytester: pytest.Pytester, npu: Path, bench: Path, noise: Path, *flags: str
         ) -> tuple[pytest.RunResult, dict]:
    out = pytester.path / "acc.json"
    result = pytester.runpytest(f"--acc-npu={npu}", f"--acc-bench={bench}",
                                f"--acc-bench-noise={noise}", f"--acc-json={out}",
                                "-p", "no:cacheprovider", *flags)
    return result, (json.loads(out.read_text()) if out.exists() else {})


def test_the_learned_tolerance_is_the_spread_times_the_factor_over_the_floor() -> None:
    bf16_eps = 2.0**-7
    assert noise_floor("bfloat16") == bf16_eps
    assert learned_tolerance(0.0, "bfloat16").rel_err == bf16_eps  # runs alike: the floor
    assert learned_tolerance(1e-3, "bfloat16").rel_err == bf16_eps  # 4e-3 is under it
    assert learned_tolerance(5e-3, "bfloat16").rel_err == pytest.approx(NOISE_FACTOR * 5e-3)
    assert learned_tolerance(3.0, "float32").rel_err == MAX_LEARNED  # runs that do not agree
    assert learned_tolerance(1e-8, "float32").rel_err == 1e-5
    tol = learned_tolerance(4e-3, "bfloat16")
    # the cosine bound only restates the relative one: |e| <= r|b| keeps cos >= sqrt(1 - r^2)
    r = tol.rel_err
    assert tol.min_cosine <= (1 - r * r) ** 0.5


def test_the_message_says_how_far_past_the_bench_runs_own_spread() -> None:
    tol = learned_tolerance(2.5e-3, "bfloat16")  # up to 0.01: 3x inside bf16's fixed 0.04
    bench = Stats(2.0, -2.0, 0.01, 10.0)
    judged = judge_stats(stats_metrics(Stats(2.0, -2.0, 0.01, 10.131), bench), "bfloat16", tol)
    assert not judged.ok
    assert "Norm relative error 0.0131, 5.2x the bench runs' own spread (0.0025) here " \
           "(up to 0.01 allowed)" in judged.detail
    alike = judge_stats(stats_metrics(Stats(2.0, -2.0, 0.01, 10.1), bench), "bfloat16",
                        learned_tolerance(0.0, "bfloat16"))
    assert "where the two bench runs agree exactly" in alike.detail


def test_a_clean_pair_of_two_codebases_passes_on_tolerances_learned_from_sdpa(
        pytester: pytest.Pytester) -> None:
    """fp32: the two bench runs (eager and sdpa attention) differ by at most ~2.3e-7 at a
    node, so nodes are held to the float32 floor 1e-5 instead of 1e-4; x-transformers still
    passes everywhere (its largest error on this pair is below that)."""
    result, doc = _run(pytester, CROSS / "xt_clean" / "mix", BENCH, SDPA)
    assert result.ret == 0, result.stdout.str()[-2000:]
    learned = [n for n in doc["compare"]["nodes"] if n["tolerance"] and n["status"] == "pass"
               and "spread" in n["tolerance"]]
    assert len(learned) > 100
    assert max(n["tolerance"]["spread"] for n in learned) < 1e-6
    assert {n["tolerance"]["rel_err"] for n in learned} == {1e-5}
    line = next(x for x in result.outlines if x.startswith("Tolerances learned"))
    assert f"at {len(learned)} of " in line
    assert doc["criteria"]["compare"]["bench_noise"]["factor"] == NOISE_FACTOR
    assert doc["inputs"]["bench_noise"] == str(SDPA)


def test_the_same_run_as_its_own_noise_is_refused(pytester: pytest.Pytester) -> None:
    result, _ = _run(pytester, CROSS / "xt_clean" / "mix", BENCH, BENCH)
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*--acc-bench and --acc-bench-noise are one run*same files*"
                                 "give a second bench run made under another kernel*"])


def test_a_rerun_that_computed_the_same_bits_is_refused(pytester: pytest.Pytester) -> None:
    """Another file (rewritten with other spacing), the same statistics everywhere: no noise
    to learn, and held to the floor every node would fail on rounding alone."""
    copy = pytester.path / "rerun"
    shutil.copytree(BENCH, copy)
    for path in copy.rglob("dump.json"):
        path.write_text(json.dumps(json.loads(path.read_text()), indent=3) + "\n")
    result, _ = _run(pytester, CROSS / "xt_clean" / "mix", BENCH, copy)
    assert result.ret != 0
    result.stdout.fnmatch_lines([f"*--acc-bench-noise {copy}: all * outputs it shares with the "
                                 "bench dump * are recorded equal*another kernel, seed or "
                                 "device*"])


def test_a_noise_run_of_other_steps_is_refused(pytester: pytest.Pytester) -> None:
    other = pytester.path / "other"
    shutil.copytree(SDPA / "step0", other / "step7")
    result, _ = _run(pytester, CROSS / "xt_clean" / "mix", BENCH, other)
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*--acc-bench-noise *holds no step and rank of the bench "
                                 "dump (it has step 7 rank 0, the bench step 0 rank 0, "
                                 "step 1 rank 0)*"])


def test_acc_bench_given_twice_takes_the_second_as_the_noise_run(
        pytester: pytest.Pytester) -> None:
    """Never a silent replacement of the first: the second is the bench's noise run."""
    out = pytester.path / "acc.json"
    result = pytester.runpytest(f"--acc-npu={CROSS / 'xt_clean' / 'mix'}", f"--acc-bench={BENCH}",
                                "--acc-bench", str(SDPA), f"--acc-json={out}",
                                "-p", "no:cacheprovider")
    assert result.ret == 0
    doc = json.loads(out.read_text())
    assert (doc["inputs"]["bench"], doc["inputs"]["bench_noise"]) == (str(BENCH), str(SDPA))
    third = pytester.runpytest(f"--acc-npu={CROSS / 'xt_clean' / 'mix'}", f"--acc-bench={BENCH}",
                               f"--acc-bench={SDPA}", f"--acc-bench={BENCH}",
                               "-p", "no:cacheprovider")
    assert third.ret == pytest.ExitCode.USAGE_ERROR
    third.stderr.fnmatch_lines(["*--acc-bench: given a third time*"])


def test_a_suite_test_names_its_noise_run_in_the_marker(pytester: pytest.Pytester) -> None:
    """``@accuracy(bench_noise=...)``: the marker-only compare and the acc_compare fixture
    learn from it; a noise run that is the bench itself fails that test with the reason."""
    npu = CROSS / "xt_clean" / "mix"
    pytester.makepyfile(f"""
        from pytest_accuracy import accuracy

        @accuracy(npu=r"{npu}", bench=r"{BENCH}", bench_noise=r"{SDPA}")
        def test_marker():
            pass

        @accuracy(npu=r"{npu}", bench=r"{BENCH}", bench_noise=r"{SDPA}")
        def test_fixture(acc_compare):
            tolerances = [r.tolerance for r in acc_compare.comparison.results()
                          if r.tolerance is not None and r.tolerance.spread is not None]
            assert len(tolerances) > 100
            assert {{t.rel_err for t in tolerances}} == {{1e-5}}

        @accuracy(npu=r"{npu}", bench=r"{BENCH}", bench_noise=r"{BENCH}")
        def test_itself():
            pass
    """)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*_ test_itself _*", "*misses its @accuracy criteria:",
                                 "Compare of *",
                                 "--acc-bench and --acc-bench-noise are one run*"])


@pytest.mark.parametrize("level", sorted(BUG_NODE))
def test_bf16_kernel_noise_passes_and_a_bug_inside_the_fixed_tolerance_fails(
        pytester: pytest.Pytester, level: str) -> None:
    """No hand-set tolerance: the benign NPU (another GEMM kernel) passes on the bench runs'
    spread, the RMSNorm weight off by 1.2 % fails where it is made, though the fixed bf16
    tolerance (4e-2) lets it pass."""
    runs = BF16 / level
    clean, doc = _run(pytester, runs / "npu_clean", runs / "bench", runs / "bench_noise")
    assert clean.ret == 0, clean.stdout.str()[-3000:]
    bug, doc = _run(pytester, runs / "npu_bug", runs / "bench", runs / "bench_noise")
    assert bug.ret == 1, bug.stdout.str()[-3000:]
    first = doc["compare"]["first_divergence"]
    assert (first["npu_name"], first["step"], first["rank"]) == (BUG_NODE[level], 0, 0)
    node = next(n for n in doc["compare"]["nodes"] if n["npu_name"] == BUG_NODE[level])
    assert node["tolerance"]["spread"] == 0.0  # before any linear: the bench runs agree
    assert "where the two bench runs agree exactly (up to 0.0078125 allowed)" in node["reason"]
    out = pytester.path / "fixed.json"
    fixed = pytester.runpytest(f"--acc-npu={runs / 'npu_bug'}", f"--acc-bench={runs / 'bench'}",
                               f"--acc-json={out}", "-p", "no:cacheprovider")
    assert fixed.ret == 0  # what a fixed tolerance lets through


def test_bf16_statistics_are_recorded_in_bf16_and_judged_so(pytester: pytest.Pytester) -> None:
    """msprobe stores a bf16 tensor's Max, Min and Mean as bf16: the benign NPU's silu is a
    step of bf16 off where both bench runs record the same value. Max/Min/Mean are allowed
    two steps of the dtype over a learned tolerance; the Norm is not."""
    runs = BF16 / "mix"
    _, doc = _run(pytester, runs / "npu_clean", runs / "bench", runs / "bench_noise")
    silu = next(n for n in doc["compare"]["nodes"] if n["npu_name"] == "Functional.silu.1.forward")
    assert silu["status"] == "pass"
    assert silu["tolerance"]["spread"] == 0.0
    assert 2.0**-7 < silu["max_relative_err"] <= 2 * 2.0**-7  # one step of a bf16 Max
