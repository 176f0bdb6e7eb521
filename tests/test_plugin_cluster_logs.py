"""The plugin on cluster-shaped logs: a good run is no longer failed for a parsing artefact."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import ROOT

CLUSTER = ROOT / "tests" / "data" / "log_samples" / "cluster"
TRUTH = json.loads((CLUSTER / "truth.json").read_text(encoding="utf-8"))


def clean_megatron(path: Path, name: str) -> Path:
    """The truth of ``name`` as a clean single-rank Megatron log (the bench side)."""
    truth = TRUTH[name]
    lines = []
    for step, (loss, gnorm, skipped) in enumerate(
        zip(truth["loss"], truth["grad_norm"], truth["skipped"], strict=True), start=1
    ):
        field = "" if loss is None else f" lm loss: {loss:.6E} |"
        lines.append(f" iteration {step:8d}/      30 |{field} loss scale: 1.0 | grad norm: "
                     f"{gnorm:.4f} | number of skipped iterations: {int(skipped):3d} |")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("name", ["torchtitan_pp2_tee.log", "megatron_tee_split.log",
                                  "msrun_pp2", "msrun_pp2_tail.log"])
def test_cluster_log_against_its_truth_passes(pytester: pytest.Pytester, name: str) -> None:
    bench = clean_megatron(pytester.path / "bench.log", name)
    result = pytester.runpytest(f"--acc-npu-log={CLUSTER / name}", f"--acc-bench-log={bench}",
                                "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()


def test_cluster_log_self_pair_passes(pytester: pytest.Pytester) -> None:
    log = CLUSTER / "torchtitan_pp2_tee.log"
    result = pytester.runpytest(f"--acc-npu-log={log}", f"--acc-bench-log={log}",
                                f"--acc-bench-log={log}", "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()


def test_stage0_only_log_is_refused_not_failed(pytester: pytest.Pytester) -> None:
    log = CLUSTER / "torchtitan_stage0_only.log"
    result = pytester.runpytest(f"--acc-npu-log={log}", f"--acc-bench-log={log}",
                                "-p", "no:cacheprovider")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*not in the last pipeline stage*"])
