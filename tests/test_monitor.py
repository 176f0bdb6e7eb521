"""msprobe monitor outputs read from real files: values pinned against the raw text."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest

from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.monitor import compare_monitors, read_monitor
from pytest_accuracy.monitor.csvfiles import decimals, read_trainermon_csv
from pytest_accuracy.monitor.model import RankRecords
from pytest_accuracy.monitor.signs import agreement
from tests.helpers import ROOT

EXAMPLE = ROOT / "example_data" / "monitor"
REAL = ROOT / "tests" / "data" / "real" / "msprobe" / "monitor"
PROBE = REAL / "grad_probe_8.3.3"
BUG_PARAM = "model.layers.1.mlp.down_proj.weight"


def _f32(dtype: str) -> float:
    return 1e-4


def _raw(path: Path, name: str, column: str) -> float:
    """A value read from the raw CSV text with the csv module, not with the reader."""
    rows = list(csv.reader(path.read_text(encoding="utf-8-sig").splitlines()))
    row = next(r for r in rows[1:] if name in r)
    return float(row[rows[0].index(column)])


def _run_dir(run: str) -> Path:
    return next((EXAMPLE / run).glob("*-rank0-*"))


def test_decimals_of_msprobe_numbers() -> None:
    assert [decimals(t) for t in ("0.259564", "-1.2e-05", "3", "0.0", "nan")] == [6, 6, 0, 1, 0]


def test_trainermon_csv_values_and_rounding() -> None:
    path = REAL / "trainermon_26.2.0_ndigits6" / "monitor_grad_reduced_step0.csv"
    records = RankRecords(0, path.parent)
    read_trainermon_csv(path, "grad_reduced", records)
    stat = records.stats["grad_reduced"][(0, 0, "layers.0.attn.qkv.weight")]
    assert stat.values["norm"] == 0.259564  # the row's literal text: ...,0,0.259564,-0.016279,...
    assert stat.values["zeros"] == 0.0 and stat.dtype == "torch.float32"
    assert stat.quantum == pytest.approx(1e-6)  # msprobe's default ndigits 6


def test_example_run_layout_and_values() -> None:
    run = read_monitor(EXAMPLE / "bug")
    assert run.layout == "TrainerMon CSV" and list(run.ranks) == [0]
    grads = run.ranks[0].stats["grad_reduced"]
    path = _run_dir("bug") / "grad_reduced_2-2.csv"
    assert grads[(2, 0, BUG_PARAM)].values["norm"] == _raw(path, BUG_PARAM, "norm")
    assert len({n for _, _, n in grads}) == 21


def test_gradient_bug_parts_at_step_2_in_the_right_parameter() -> None:
    cmp = compare_monitors(read_monitor(EXAMPLE / "bug"), read_monitor(EXAMPLE / "bench"), _f32)
    grad = cmp.results[(0, "grad")]
    assert grad.first is not None
    assert (grad.first.step, grad.first.npu_name, grad.first.stat) == (2, BUG_PARAM, "norm")
    npu = _raw(_run_dir("bug") / "grad_reduced_2-2.csv", BUG_PARAM, "norm")
    bench = _raw(_run_dir("bench") / "grad_reduced_2-2.csv", BUG_PARAM, "norm")
    assert grad.first.rel_diff == pytest.approx(abs(npu - bench) / bench)
    assert grad.first.rel_diff == pytest.approx(0.25, rel=1e-3)  # the injected 1.25 scale
    assert [(p.kind, p.step) for p in cmp.firsts(0)] == [
        ("grad", 2), ("param", 2), ("exp_avg", 3), ("exp_avg_sq", 3)]


def test_lr_bug_weights_part_before_gradients() -> None:
    cmp = compare_monitors(read_monitor(EXAMPLE / "lr_bug"), read_monitor(EXAMPLE / "bench"),
                           _f32)
    first = cmp.firsts(0)[0]
    assert (first.kind, first.metric, first.step, first.npu_name) == (
        "param", "param_updated", 0, BUG_PARAM)


def test_benign_pair_agrees_with_a_wide_margin() -> None:
    cmp = compare_monitors(read_monitor(EXAMPLE / "benign"), read_monitor(EXAMPLE / "bench"),
                           _f32)
    assert cmp.firsts(0) == []
    assert all(r.compared > 0 for r in cmp.results.values())
    # the measured noise is far below the tolerance: 1e-5 would still pass
    tight = compare_monitors(read_monitor(EXAMPLE / "benign"), read_monitor(EXAMPLE / "bench"),
                             lambda dtype: 1e-5)
    assert tight.firsts(0) == []


def test_grad_probe_levels_and_sign_rule() -> None:
    l0 = read_monitor(PROBE / "L0" / "bug")
    assert l0.layout == "grad_probe"
    path = PROBE / "L0" / "bug" / "rank0" / "grad_summary_2.csv"
    assert l0.ranks[0].stats["grad_summary"][(2, 0, BUG_PARAM)].values["norm"] == _raw(
        path, BUG_PARAM, "norm")
    l2 = read_monitor(PROBE / "L2" / "bug")
    stat = l2.ranks[0].stats["grad_summary"][(2, 0, BUG_PARAM)]
    assert stat.values["max"] == 0.005176423583179712  # raw text of the L2 row
    cmp = compare_monitors(read_monitor(PROBE / "L1" / "bug"),
                           read_monitor(PROBE / "L1" / "bench"), _f32)
    grad = cmp.results[(0, "grad")]
    assert grad.first is not None and (grad.first.step, grad.first.npu_name) == (2, BUG_PARAM)
    # a scaled gradient keeps its signs: agreement 1.0 at step 2; the norm finds it
    assert dict(grad.signs[BUG_PARAM])[2] == 1.0
    step2 = PROBE / "L1" / "bug" / "rank0" / "step2" / f"{BUG_PARAM}.npy"
    assert agreement(step2, step2) == 1.0


def test_sign_rule_fires_on_a_drop(tmp_path: Path) -> None:
    import numpy as np

    for run in ("bug", "bench"):
        shutil.copytree(PROBE / "L1" / run, tmp_path / run)
    sign = tmp_path / "bug" / "rank0" / "step3" / f"{BUG_PARAM}.npy"
    flipped = ~np.load(sign)
    flipped[:16] = ~flipped[:16]
    np.save(sign, flipped)
    cmp = compare_monitors(read_monitor(tmp_path / "bench"), read_monitor(tmp_path / "bench"),
                           _f32)
    assert cmp.firsts(0) == []
    cmp = compare_monitors(read_monitor(tmp_path / "bug"), read_monitor(tmp_path / "bench"),
                           lambda dtype: 1.0)  # norms waved through: the sign rule alone
    first = cmp.results[(0, "grad")].first
    assert first is not None and (first.stat, first.step, first.npu_name) == (
        "sign", 3, BUG_PARAM)


def test_csv2tb_events_read_like_the_csvs() -> None:
    pytest.importorskip("tensorboard")
    run = read_monitor(REAL / "csv2tb_26.2.0" / "bug")
    assert run.layout == "TensorBoard (csv2tb)"
    value = run.ranks[0].stats["grad_reduced"][(2, 0, BUG_PARAM)].values["norm"]
    assert value == pytest.approx(_raw(_run_dir("bug") / "grad_reduced_2-2.csv", BUG_PARAM,
                                       "norm"), rel=1e-7)  # float32 in the events
    cmp = compare_monitors(run, read_monitor(REAL / "csv2tb_26.2.0" / "bench"), _f32)
    first = cmp.results[(0, "grad")].first
    assert first is not None and (first.step, first.npu_name) == (2, BUG_PARAM)


@pytest.mark.parametrize(("text", "problem"), [
    ("vpp_stage,name,step,norm\n0,a.weight,0,abc\n", "line 2, column 'norm': not a number"),
    ("vpp_stage,name,norm\n0,a.weight,0.1\n", "missing column(s) step"),
    ("vpp_stage,name,step,shape\n0,a.weight,0,[1]\n", "no norm, max or min column"),
    ("vpp_stage,name,step,norm\n0,a.weight,0\n", "line 2: 3 fields, the header has 4"),
    ("", "empty file"),
])
def test_bad_csv_is_named(tmp_path: Path, text: str, problem: str) -> None:
    folder = tmp_path / "Nov26_02-26-45-rank0-x"
    folder.mkdir()
    (folder / "grad_reduced_0-0.csv").write_text(text)
    with pytest.raises(AccuracyInputError) as info:
        read_monitor(tmp_path)
    assert problem in str(info.value) and "grad_reduced_0-0.csv" in str(info.value)


def test_folder_without_monitor_output(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(AccuracyInputError, match="no msprobe monitor output"):
        read_monitor(tmp_path)


def test_two_runs_for_one_rank_are_named(tmp_path: Path) -> None:
    for name in ("Nov26_01-00-00-rank0-a", "Nov26_02-00-00-rank0-b"):
        shutil.copytree(_run_dir("bench"), tmp_path / name)
    with pytest.raises(AccuracyInputError, match="2 monitor folders for rank 0"):
        read_monitor(tmp_path)


def test_core_never_imports_pytest() -> None:
    import subprocess
    import sys

    code = ("import sys, pytest_accuracy.monitor, pytest_accuracy.monitor.report; "
            "sys.exit('pytest' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
