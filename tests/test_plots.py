"""Loss-report plots: the PNG files are written (skipped without matplotlib)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pytest_accuracy.logs import LogTable, read_log
from pytest_accuracy.report.plots import plot_loss_report

pytest.importorskip("matplotlib")

EXAMPLES = Path(__file__).parent.parent / "example_data" / "logs"
PNG = b"\x89PNG\r\n\x1a\n"


def test_loss_report_pngs(tmp_path: Path) -> None:
    benches = [read_log(EXAMPLES / f"megatron_bench_{x}.log") for x in "ab"]
    paths = plot_loss_report(read_log(EXAMPLES / "npu_spike.log"), benches, tmp_path / "plots")
    assert [p.name for p in paths] == ["loss.png", "loss_diff.png", "grad_norm.png"]
    for path in paths:
        assert path.read_bytes()[:8] == PNG and path.stat().st_size > 5000


def test_local_norm_bars_and_single_bench(tmp_path: Path) -> None:
    npu = read_log(EXAMPLES / "mindformers_npu.log")
    bench = read_log(EXAMPLES / "megatron_bench_a.log")
    local = pd.DataFrame({"step": [1, 1, 1], "param": ["w1", "w2", "emb"], "norm": [1.0, 2.0, 3.0]})
    npu = LogTable(npu.path, npu.format, npu.frame, local, npu.notes)
    bench = LogTable(bench.path, bench.format, bench.frame, local.assign(norm=[1.0, 2.1, 4.0]))
    paths = plot_loss_report(npu, [bench], tmp_path)
    assert [p.name for p in paths] == [
        "loss.png",
        "loss_diff.png",
        "grad_norm.png",
        "local_norm.png",
    ]
    assert all(p.read_bytes()[:8] == PNG for p in paths)
    assert np.isfinite(npu.frame["loss"]).all()
