"""Config checklist items (accuracy::config::<key>) through pytester."""

from __future__ import annotations

import json

import pytest

from tests.helpers import ROOT

CONFIGS = ROOT / "example_data" / "configs"


def test_misaligned_configs_fail_exactly_the_changed_keys(pytester: pytest.Pytester) -> None:
    out = pytester.path / "acc.json"
    result = pytester.runpytest(
        f"--acc-npu-config={CONFIGS / 'mindformers_llama2_7b_misaligned.yaml'}",
        f"--acc-bench-config={CONFIGS / 'megatron_llama2_7b.sh'}", f"--acc-json={out}",
        "-p", "no:cacheprovider")
    assert result.ret == 1
    failed = sorted(line.split()[1] for line in result.stdout.lines if line.startswith("FAILED"))
    assert failed == ["accuracy::config::adam_beta2", "accuracy::config::num_heads",
                      "accuracy::config::rms_norm_eps"]
    result.stdout.fnmatch_lines([
        "config 'rms_norm_eps' differs: npu model.model_config.rms_norm_eps = 1e-06, bench "
        "--norm-epsilon = 1e-05 (the guide: *"])
    doc = json.loads(out.read_text())
    keys = {k["name"]: k for k in doc["config"]["keys"]}
    assert keys["num_heads"]["npu_value"] == 64 and keys["num_heads"]["bench_value"] == 32


def test_aligned_configs_pass(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(
        f"--acc-npu-config={CONFIGS / 'mindformers_llama2_7b.yaml'}",
        f"--acc-bench-config={CONFIGS / 'megatron_llama2_7b.sh'}", "-p", "no:cacheprovider")
    assert result.ret == 0
    assert result.parseoutcomes()["passed"] >= 30
