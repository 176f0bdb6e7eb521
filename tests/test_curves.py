"""Curve checks: the DESIGN.md formulas on hand-checked tables, and the example runs' verdicts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pytest_accuracy.curves import (
    LossCriteria,
    check_band,
    check_divergence,
    check_first_loss,
    check_grad_norm,
    check_mean_loss,
    check_zero_centred,
    compare_local_norms,
    evaluate,
    find_divergence_step,
)
from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.logs import LogTable, read_log
from pytest_accuracy.logs.table import finish

EXAMPLES = Path(__file__).parent.parent / "example_data" / "logs"


def table(
    name: str,
    loss: list[float],
    grad: list[float] | None = None,
    start: int = 1,
    skipped: list[bool] | None = None,
) -> LogTable:
    steps = np.arange(start, start + len(loss))
    cols = {"loss": np.array(loss, dtype=float)}
    if grad is not None:
        cols["grad_norm"] = np.array(grad, dtype=float)
    flags = None if skipped is None else np.array(skipped)
    return finish(Path(name), "test", steps, cols, flags)


# Step 4 is NaN on the NPU and the trainer marked it skipped (loss-scale overflow).
NPU = table("npu.log", [2.0, 1.5, 1.2, float("nan"), 1.0], [10, 11, 10, 1, 10.5],
            skipped=[False, False, False, True, False])
BENCH = table("bench.log", [2.004, 1.49, 1.21, 1.1, 1.0], [10, 10, 10, 1, 10])


@pytest.fixture(scope="module")
def benches() -> list[LogTable]:
    return [
        read_log(EXAMPLES / "megatron_bench_a.log"),
        read_log(EXAMPLES / "megatron_bench_b.log"),
    ]


def test_first_loss_formula() -> None:
    r = check_first_loss(NPU, BENCH)
    assert r.status == "pass" and r.worst_steps == (1,)
    assert r.measured["first_loss_abs"] == pytest.approx(0.004)
    assert r.measured["first_loss_rel"] == pytest.approx(0.004 / 2.004)
    assert r.measured["first_loss_rel"] == pytest.approx(0.001996007984031936)


def test_first_loss_either_limit_and_message() -> None:
    big = check_first_loss(table("n", [200.5]), table("b", [200.0]))
    assert big.status == "pass"  # abs 0.5 fails, rel 0.25 % passes: "or"
    r = check_first_loss(table("n", [2.02]), table("b", [2.0]))
    assert r.status == "fail"
    assert r.message == (
        "First loss mismatch at step 1: npu 2.02, bench 2.\n"
        "Absolute difference: 0.02 (up to 0.005 allowed)\n"
        "Relative difference: 1.0000% (up to 0.50% allowed)\n"
        "Either limit passing is enough."
    )


def test_mean_loss_formula_excludes_steps_the_trainer_skipped() -> None:
    r = check_mean_loss(NPU, BENCH)
    # d = [-0.004, 0.01, -0.01, 0] on steps 1, 2, 3, 5; step 4 is skipped on the NPU
    assert r.measured["steps"] == 4 and r.measured["skipped"] == 1
    assert r.measured["mean_abs"] == pytest.approx(0.006)
    rel = (0.004 / 2.004 + 0.01 / 1.49 + 0.01 / 1.21 + 0.0) / 4
    assert r.measured["mean_rel"] == pytest.approx(rel)
    assert r.measured["mean_rel"] == pytest.approx(0.0042429700)
    assert r.status == "pass" and r.worst_steps[:2] == (2, 3)


def test_mean_loss_fails_when_both_limits_fail() -> None:
    r = check_mean_loss(table("n", [2.1, 2.1]), table("b", [2.0, 2.0]))
    assert r.status == "fail"
    assert "Mean absolute difference: 0.1 (up to 0.01 allowed)" in r.message
    assert "Greatest difference: 0.1 at step 1 (npu 2.1, bench 2)" in r.message


def test_grad_norm_formula() -> None:
    r = check_grad_norm(NPU, BENCH)
    # |g_n - g_b| / |g_b| = [0, 0.1, 0, 0.05] on steps 1, 2, 3, 5
    assert r.measured["gnorm_mean_rel"] == pytest.approx(0.0375)
    assert r.status == "pass" and r.worst_steps[0] == 2
    assert check_grad_norm(NPU, table("b", [1.0] * 5)).status == "skip"


def test_window_restricts_steps() -> None:
    r = check_mean_loss(NPU, BENCH, LossCriteria(steps=(2, 3)))
    assert r.measured["steps"] == 2 and r.measured["mean_abs"] == pytest.approx(0.01)


def test_no_steps_in_common_is_a_clear_error() -> None:
    npu, bench = table("npu.log", [1.0, 1.0, 1.0]), table("bench.log", [1.0] * 3, start=10)
    with pytest.raises(AccuracyInputError) as info:
        evaluate(npu, [bench])
    assert str(info.value) == (
        "npu.log: no steps in common with bench.log "
        "(NPU logged steps 1..3, bench logged steps 10..12)"
    )


def test_all_nan_npu_fails_naming_the_first_step() -> None:
    npu = table("npu.log", [float("nan")] * 5)
    report = evaluate(npu, [BENCH])
    assert report.status == "fail" and report.steps_skipped == 5
    mean = report.check("mean_loss")
    assert mean.status == "fail" and mean.measured["first_nonfinite_step"] == 1
    assert mean.message == (
        "NPU loss is nan at step 1 (and on 4 later step(s)) where the bench is finite (2.004): "
        "a non-finite loss is an overflow or a divergence, never a dropped step (steps the "
        "trainer itself skipped are excluded)."
    )
    assert json.loads(json.dumps(report.to_dict()))["status"] == "fail"


def test_loss_turning_nan_fails_at_that_step() -> None:
    loss = list(2.0 - np.arange(300) / 1000)
    npu = table("npu.log", [*loss[:100], *[float("nan")] * 200])
    r = check_mean_loss(npu, table("bench.log", loss))
    assert r.status == "fail" and r.worst_steps == (101, 102, 103, 104, 105)
    assert r.message.startswith("NPU loss is nan at step 101 (and on 199 later step(s))")


def test_inf_grad_norm_fails_unless_the_bench_has_it_too() -> None:
    grads = [1.0, 1.1, 1.2, 1.3]
    npu = table("n", [2.0] * 4, [1.0, float("inf"), 1.2, 1.3])
    r = check_grad_norm(npu, table("b", [2.0] * 4, grads))
    assert r.status == "fail" and r.measured["first_nonfinite_step"] == 2
    assert r.message.startswith("NPU grad norm is inf at step 2 where the bench is finite (1.1)")
    same = check_grad_norm(npu, table("b", [2.0] * 4, [1.0, float("inf"), 1.2, 1.3]))
    assert same.status == "pass"


def test_nan_loss_on_the_same_bench_step_is_excluded() -> None:
    npu = table("n", [2.0, float("nan"), 1.9])
    r = check_mean_loss(npu, table("b", [2.0, float("nan"), 1.9]))
    assert r.status == "pass" and r.measured["skipped"] == 1


def test_mostly_unparseable_series_is_an_input_error() -> None:
    with pytest.raises(AccuracyInputError) as err:
        finish(Path("x.log"), "megatron", np.arange(300), {"loss": np.full(300, np.nan)},
               notes=["280 unparseable value(s) read as NaN"])
    assert err.value.problem == (
        "280 unparseable values in 300 megatron step records: the log cannot be read reliably "
        "(are the numbers cut off or in another locale?)"
    )


def test_zero_centred_noise_passes_offset_fails() -> None:
    rng = np.random.default_rng(3)
    t = np.arange(400)
    bench = 2.0 + np.exp(-t / 50)
    noisy = table("n", list(bench + rng.normal(0, 0.01, 400)))
    assert check_zero_centred(noisy, [table("b", list(bench))]).status == "pass"
    late = table("n", list(bench + np.where(t >= 200, 0.1, 0.0) + rng.normal(0, 0.01, 400)))
    r = check_zero_centred(late, [table("b", list(bench))])
    assert r.status == "fail" and r.measured["segment_start"] == 201
    assert r.measured["offset"] == pytest.approx(0.1, abs=0.005)
    assert "late half (steps 201..400) the NPU is on average" in r.message


def test_good_run_passes_everything(benches: list[LogTable]) -> None:
    report = evaluate(read_log(EXAMPLES / "mindformers_npu.log"), benches)
    assert report.status == "pass", [c.message for c in report.checks if not c.passed]
    assert [c.status for c in report.checks] == ["pass"] * 7  # with the learning-rate schedule
    assert report.steps_compared == 300 and report.steps_skipped == 0
    against_b = evaluate(read_log(EXAMPLES / "mindformers_npu.log"), benches[::-1])
    assert against_b.steps_compared == 299 and against_b.steps_skipped == 1  # NaN iteration 77
    assert report.divergence_step is None
    assert json.loads(json.dumps(report.to_dict()))["status"] == "pass"


def test_late_drift_fails_zero_centred_and_band(benches: list[LogTable]) -> None:
    npu = read_log(EXAMPLES / "npu_late_drift.log")
    assert check_zero_centred(npu, benches).status == "fail"
    band = check_band(npu, benches)
    assert band.status == "fail" and band.measured["outside_frac"] > 0.4
    assert check_first_loss(npu, benches[0]).status == "pass"


def test_first_offset_fails_first_loss_only(benches: list[LogTable]) -> None:
    report = evaluate(read_log(EXAMPLES / "npu_first_offset.log"), benches)
    status = {c.name: c.status for c in report.checks}
    assert status["first_loss"] == "fail" and status["mean_loss"] == "pass"
    assert status["divergence"] == "pass"


def test_spike_then_divergence_step(benches: list[LogTable]) -> None:
    npu = read_log(EXAMPLES / "npu_spike.log")
    assert find_divergence_step(npu, benches) == 200
    r = check_divergence(npu, benches)
    assert r.status == "fail" and r.worst_steps == (200,)
    assert r.message.startswith("Loss curves diverge from step 200:")
    assert find_divergence_step(read_log(EXAMPLES / "mindformers_npu.log"), benches) is None


def test_band_needs_two_bench_runs(benches: list[LogTable]) -> None:
    npu = read_log(EXAMPLES / "mindformers_npu.log")
    assert check_band(npu, benches[:1]).status == "skip"


def test_relax_to_bench_noise() -> None:
    a = table("a", [2.0, 1.9, 1.8, 1.7])
    b = table("b", [2.02, 1.9, 1.8, 1.7])
    npu = table("n", [2.015, 1.9, 1.8, 1.7])
    assert evaluate(npu, [a, b]).check("first_loss").status == "fail"
    relaxed = evaluate(npu, [a, b], LossCriteria(relax_to_bench_noise=True))
    assert relaxed.check("first_loss").status == "pass"
    assert relaxed.criteria.first_loss_abs == pytest.approx(0.02)


def test_compare_local_norms_maps_names() -> None:
    npu = pd.DataFrame(
        {
            "step": [1, 1, 1, 2],
            "param": ["model.a", "model.b", "model.c", "model.a"],
            "norm": [1.0, 2.0, 3.0, 9.0],
        }
    )
    bench = pd.DataFrame({"step": [1, 1, 1], "param": ["a", "b", "d"], "norm": [1.0, 1.0, 5.0]})
    for name_map in ({"model.a": "a", "model.b": "b"}, lambda n: n.removeprefix("model.")):
        out = compare_local_norms(npu, bench, step=1, name_map=name_map)
        assert list(out["param"]) == ["model.b", "model.a"]
        assert list(out["rel_diff"]) == [1.0, 0.0]
        assert out.attrs["npu_only"] == ["model.c"] and out.attrs["bench_only"] == ["d"]
    top = compare_local_norms(npu, bench, step=1, name_map={"model.b": "b"}, top=1)
    assert list(top["param"]) == ["model.b"]
    assert compare_local_norms(npu, bench, step=1).empty  # no name in common without a map
