"""A per-model regression suite on training logs: the @accuracy marker is the assertion.

Run: pytest example_suites/tiny_llama
"""

from __future__ import annotations

from pathlib import Path

from pytest_accuracy import accuracy

LOGS = Path(__file__).resolve().parents[2] / "example_data" / "logs"
BENCH = [str(LOGS / "megatron_bench_a.log"), str(LOGS / "megatron_bench_b.log")]


@accuracy(npu_log=str(LOGS / "mindformers_npu.log"), bench_logs=BENCH,
          first_loss_abs=0.005, mean_rel=0.01, gnorm_rel=0.10)
def test_llama_pretrain_meets_migration_standard(acc_npu_log, acc_bench_logs) -> None:  # type: ignore[no-untyped-def]
    # the marker alone asserts the standard; the body can add model-specific checks
    assert acc_npu_log.format == "mindformers"
    assert not acc_npu_log.frame["skipped"].any()


@accuracy(npu_log=str(LOGS / "npu_late_drift.log"), bench_logs=BENCH, steps=(1, 120))
def test_drifting_run_is_fine_early_on(acc_npu_log, acc_bench_logs) -> None:  # type: ignore[no-untyped-def]
    assert acc_npu_log.frame.index.max() == 300


def test_drift_is_caught_from_a_script() -> None:
    from pytest_accuracy.curves import LossCriteria, evaluate
    from pytest_accuracy.logs import read_log

    report = evaluate(read_log(LOGS / "npu_late_drift.log"), [read_log(p) for p in BENCH],
                      LossCriteria())
    assert report.check("zero_centred").status == "fail"
    assert report.divergence_step is not None and report.divergence_step > 120
