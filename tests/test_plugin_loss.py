"""The migration standard on logs: built-in loss items, the marker, fixtures, golden values."""

from __future__ import annotations

import json

import pytest

from tests.helpers import ROOT

LOGS = ROOT / "example_data" / "logs"
BENCH = [f"--acc-bench-log={LOGS / 'megatron_bench_a.log'}",
         f"--acc-bench-log={LOGS / 'megatron_bench_b.log'}"]


def run(pytester: pytest.Pytester, npu: str, *args: str) -> pytest.RunResult:
    return pytester.runpytest(f"--acc-npu-log={LOGS / npu}", *BENCH, "-p", "no:cacheprovider",
                              *args)


def failed_items(result: pytest.RunResult) -> list[str]:
    return sorted(line.split()[1] for line in result.stdout.lines if line.startswith("FAILED"))


def test_good_run_passes_every_check(pytester: pytest.Pytester) -> None:
    out = pytester.path / "acc.json"
    result = run(pytester, "mindformers_npu.log", f"--acc-json={out}")
    assert result.ret == 0
    assert result.parseoutcomes()["passed"] == 7  # the standard six and the lr schedule
    doc = json.loads(out.read_text())
    loss = doc["loss"]
    assert doc["verdict"] == "pass" and loss["status"] == "pass"
    assert {"first_loss_abs", "first_loss_rel", "mean_abs", "mean_rel", "gnorm_mean_rel",
            "steps_compared", "steps_skipped", "divergence_step", "offset"} <= set(loss)
    assert loss["criteria"]["mean_rel"] == 0.01 and loss["divergence_step"] is None


def test_late_drift_fails_zero_centred_and_band(pytester: pytest.Pytester) -> None:
    result = run(pytester, "npu_late_drift.log")
    assert result.ret == 1
    assert {"accuracy::loss::zero_centred", "accuracy::loss::band"} <= set(failed_items(result))
    result.stdout.fnmatch_lines(["Loss difference is not centred on zero: over the late half *"])


def test_first_loss_offset_fails_only_first_loss(pytester: pytest.Pytester) -> None:
    result = run(pytester, "npu_first_offset.log")
    assert failed_items(result) == ["accuracy::loss::first_loss"]


def test_spike_then_divergence_names_the_step(pytester: pytest.Pytester) -> None:
    out = pytester.path / "acc.json"
    result = run(pytester, "npu_spike.log", f"--acc-json={out}")
    assert "accuracy::loss::divergence" in failed_items(result)
    result.stdout.fnmatch_lines(["Loss curves diverge from step 200*"])
    assert json.loads(out.read_text())["loss"]["divergence_step"] == 200


def test_cli_thresholds_override_ini(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nacc_mean_rel = 0.5\nacc_mean_abs = 0.5\n")
    result = run(pytester, "npu_late_drift.log", "-k", "mean_loss")
    assert result.ret == 0
    result = run(pytester, "npu_late_drift.log", "-k", "mean_loss", "--acc-mean-rel=0.001",
                 "--acc-mean-abs=0.001")
    assert result.ret == 1


def test_marker_is_the_assertion_in_a_user_suite(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(f"""
        from pytest_accuracy import accuracy
        BENCH = [r"{LOGS / 'megatron_bench_a.log'}", r"{LOGS / 'megatron_bench_b.log'}"]

        @accuracy(npu_log=r"{LOGS / 'mindformers_npu.log'}", bench_logs=BENCH)
        def test_good(acc_npu_log, acc_bench_logs):
            assert len(acc_npu_log.frame) == 300

        @accuracy(npu_log=r"{LOGS / 'npu_late_drift.log'}", bench_logs=BENCH, mean_rel=0.01)
        def test_drift(acc_npu_log, acc_bench_logs):
            pass

        @accuracy(npu_log=r"{LOGS / 'npu_late_drift.log'}", bench_logs=BENCH, mean_rel=0.5,
                  mean_abs=0.5, steps=(1, 120))
        def test_drift_early_window_only(acc_npu_log, acc_bench_logs):
            pass
    """)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*Migration standard missed (* checks):*",
                                 "*mean_loss] Mean loss mismatch over 300 paired steps*"])


def test_write_golden_then_gate_on_it(pytester: pytest.Pytester) -> None:
    golden = pytester.path / "golden.json"
    run(pytester, "mindformers_npu.log", f"--acc-write-golden={golden}")
    assert "lm loss" in json.loads(golden.read_text())
    result = pytester.runpytest(f"--acc-npu-log={LOGS / 'mindformers_npu.log'}",
                                f"--acc-bench-log={golden}", "-p", "no:cacheprovider")
    assert result.ret == 0


def test_empty_log_is_a_clear_collection_error(pytester: pytest.Pytester) -> None:
    empty = pytester.path / "empty.log"
    empty.write_text("")
    result = pytester.runpytest(f"--acc-npu-log={empty}", *BENCH, "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert "INTERNALERROR" not in result.stdout.str()
    result.stdout.fnmatch_lines([f"unreadable input: {empty}: *"])


def test_local_norm_lines_name_the_parameter_that_differs(pytester: pytest.Pytester) -> None:
    sample = ROOT / "tests/data/log_samples/mindformers_trainingstatemonitor_local_norm_doc.txt"
    text = sample.read_text()
    changed = pytester.path / "npu.log"
    changed.write_text(text.replace("model.layers.1.attention_norm.weight: 0.1092",
                                    "model.layers.1.attention_norm.weight: 0.2184"))
    assert changed.read_text() != text
    result = pytester.runpytest(f"--acc-npu-log={changed}", f"--acc-bench-log={sample}",
                                "-p", "no:cacheprovider", "-k", "local_norm")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["Local norms differ at step 1: 1 of * parameters beyond 0.1 "
                                 "relative, worst first:",
                                 "  model.layers.1.attention_norm.weight: 0.2184 vs bench 0.1092 "
                                 "(relative difference 1)"])


def test_local_norms_without_common_names_skip_not_pass(pytester: pytest.Pytester) -> None:
    sample = ROOT / "tests/data/log_samples/mindformers_trainingstatemonitor_local_norm_doc.txt"
    renamed = pytester.path / "npu.log"
    renamed.write_text(sample.read_text().replace("local_norm/", "local_norm/npu."))
    result = pytester.runpytest(f"--acc-npu-log={renamed}", f"--acc-bench-log={sample}",
                                "-p", "no:cacheprovider", "-k", "local_norm", "-rs")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*1 skipped*"])
    result.stdout.fnmatch_lines(["*no parameter with a local norm in both logs at step 1 "
                                 "(NPU names like ?'npu.lm_head.weight'*"])


def test_logs_sharing_too_few_steps_are_refused(pytester: pytest.Pytester) -> None:
    """A verdict on 1 of 300 steps is no verdict: the overlap is required and its steps said."""
    lines = (LOGS / "megatron_bench_a.log").read_text().splitlines()
    shifted = pytester.path / "npu_shifted.log"  # the same lines renumbered 300..599
    shifted.write_text("\n".join(
        line.replace(f"iteration {n:>8}/", f"iteration {n + 299:>8}/")
        for n, line in enumerate(lines, start=1)) + "\n")
    result = pytester.runpytest(f"--acc-npu-log={shifted}", BENCH[0], "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["unreadable input: *npu_shifted.log: shares only 1 of 300 steps "
                                 "with *megatron_bench_a.log (steps 300; NPU logged steps "
                                 "300..599, bench logged steps 1..300): at least 50% of the "
                                 "shorter log's steps must be in both*"])
