"""Real logs and baselines other projects wrote (tests/data/real): values pinned to the raw text."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.logs import read_log
from tests.helpers import ROOT

REAL = ROOT / "tests" / "data" / "real"
BASELINES = sorted((REAL / "mindspeed_baseline").glob("*.json"))
GOLDENS = sorted((REAL / "megatron_golden").glob("*.json"))
OLD_MEGATRON = sorted((REAL / "logs").glob("megatron_2019_*.log"))
# The raw line, read by the test itself: ' iteration  100/  600 | ... | lm loss 5.0E+00 | ...'.
OLD_LINE = re.compile(
    r"iteration +(\d+)/ *\d+ \|.*\| learning rate ([-0-9.E+]+) \| lm loss ([-0-9.E+]+) "
    r"\| loss scale ([0-9.]+) \|"
)

pytestmark = pytest.mark.usefixtures("log_reader")  # compiled scanner and pure path alike


def raw_json(path: Path) -> dict[str, object]:
    data: dict[str, object] = json.loads(path.read_text(encoding="utf-8"))
    return data


def losses(path: Path) -> list[float]:
    return [float(v) for v in read_log(path).frame["loss"]]


@pytest.mark.parametrize("path", BASELINES, ids=lambda p: p.name)
def test_mindspeed_baseline_reads_every_series(path: Path) -> None:
    raw = raw_json(path)
    table = read_log(path)
    lm = raw["lm loss"]
    assert isinstance(lm, list)
    assert table.format == "golden"
    assert list(table.steps) == list(range(1, len(lm) + 1))
    assert losses(path) == [float(v) for v in lm]
    assert not table.frame["skipped"].any()
    grad = raw.get("grad norm") or []
    if grad:
        assert list(table.frame["grad_norm"]) == grad
    for extra in ("throughput", "time info"):
        if raw.get(extra):  # the other series become columns named as the baseline names them
            assert list(table.frame[extra]) == raw[extra]


def test_mindspeed_baseline_with_margin_keys_ignores_them() -> None:
    table = read_log(REAL / "mindspeed_baseline" / "deepseek4_flash_fsdp2_margins.json")
    assert "lm loss margin" not in table.frame and "throughput margin" not in table.frame
    assert table.frame.loc[1, "loss"] == 12.66318  # literal from the file
    assert table.frame.loc[1, "grad_norm"] == 26.44


@pytest.mark.parametrize("path", GOLDENS, ids=lambda p: p.name)
def test_megatron_golden_values_match_the_json(path: Path) -> None:
    raw = raw_json(path)
    spec = raw["total loss"] if "distill" in path.name else raw["lm loss"]
    assert isinstance(spec, dict)
    values = spec["values"]
    if isinstance(values, list):  # pre-2025 layout: sampled from start_step every step_interval
        start, every = int(spec["start_step"]), int(spec["step_interval"])
        values = {str(start + i * every): v for i, v in enumerate(values)}
    recorded = [int(k) for k, v in values.items() if v != "nan"]
    table = read_log(path)
    assert list(table.steps) == sorted(int(k) for k in values if int(k) <= max(recorded))
    for step in recorded:
        assert table.frame.loc[step, "loss"] == values[str(step)]


def test_golden_steps_never_recorded_are_dropped_and_named() -> None:
    path = REAL / "megatron_golden" / "moe_offloading_unrecorded_tail_dev_dgx_gb200.json"
    raw = raw_json(path)["lm loss"]
    assert raw["end_step"] == 50 and raw["values"]["26"] == "nan"  # type: ignore[index]
    table = read_log(path)
    assert list(table.steps) == list(range(1, 26)) and not table.frame["skipped"].any()
    assert ("25 step(s) after step 25 have 'nan' in every metric (planned, never recorded): "
            "dropped") in table.notes


@pytest.mark.parametrize("path", sorted((REAL / "megatron_inference_golden").glob("*.json")),
                         ids=lambda p: p.name)
def test_inference_golden_is_refused_by_name(path: Path) -> None:
    with pytest.raises(AccuracyInputError, match=r"a Megatron inference golden .* not training"):
        read_log(path)


def test_distillation_golden_takes_its_loss_from_total_loss() -> None:
    path = REAL / "megatron_golden" / "distill_skip_lm_loss_dev_dgx_h100.json"
    raw = raw_json(path)
    assert set(raw["lm loss"]["values"].values()) == {0.0}  # type: ignore[index]
    table = read_log(path)
    assert "'lm loss' is 0 at every step: loss column taken from 'total loss'" in table.notes
    assert table.frame.loc[1, "loss"] == 0.49197 and table.frame.loc[100, "loss"] > 0
    assert list(table.frame["lm loss"].unique()) == [0.0]  # the zeros are still there to see


def test_golden_with_only_a_kd_loss_reads_it_and_says_so(tmp_path: Path) -> None:
    # No real file found with only `kd loss`; the layout is Megatron's golden schema.
    path = tmp_path / "golden_values.json"
    kd = {"start_step": 1, "end_step": 3, "step_interval": 1,
          "values": {"1": 2.5, "2": 2.25, "3": "nan"}}
    zeros = {**kd, "values": {"1": 3.0, "3": 4.0}}  # recorded at 3: a skipped step, kept
    path.write_text(json.dumps({"kd loss": kd, "num-zeros": zeros}))
    table = read_log(path)
    assert table.format == "golden"
    assert "'lm loss' is absent: loss column taken from 'kd loss'" in table.notes
    assert list(table.frame["loss"][:2]) == [2.5, 2.25]
    assert list(table.frame["skipped"]) == [False, False, True]


def test_baseline_with_no_loss_at_all_says_the_loss_is_empty(tmp_path: Path) -> None:
    path = tmp_path / "baseline.json"
    path.write_text('{\n  "throughput": [\n    4.9,\n    20.1\n  ]\n}\n')
    table = read_log(path)
    assert "no 'lm loss' metric and no other loss: loss column is empty" in table.notes
    assert table.frame["skipped"].all()


@pytest.mark.parametrize("path", OLD_MEGATRON, ids=lambda p: p.name)
def test_2019_megatron_lines_without_colons(path: Path) -> None:
    raw = OLD_LINE.findall(path.read_text(encoding="utf-8"))
    assert len(raw) >= 3
    table = read_log(path)
    assert table.format == "megatron"
    assert list(table.steps) == [int(step) for step, *_ in raw]
    for step, lr, loss, scale in raw:
        got = table.frame.loc[int(step)]
        assert (got["loss"], got["lr"], got["loss_scale"]) == (float(loss), float(lr), float(scale))
        assert not got["skipped"]
    assert any("without ':'" in note for note in table.notes)


def test_2019_megatron_interleaved_line_keeps_its_step() -> None:
    # Two ranks wrote at once: the real line reads 's iteration      100/     600 | ...'.
    path = REAL / "logs" / "megatron_2019_gpt2_mp2_excerpt.log"
    assert "\ns iteration      100/" in path.read_text(encoding="utf-8")
    assert read_log(path).frame.loc[100, "loss"] == 5.023855


def test_torchtitan_loss_file_matches_the_text() -> None:
    path = REAL / "logs" / "torchtitan_llama3_cuda_losses.txt"
    raw = [line.split() for line in path.read_text(encoding="utf-8").splitlines()]
    table = read_log(path)
    assert table.format == "torchtitan-losses"
    assert list(table.steps) == [int(s) for s, _ in raw]
    assert list(table.frame["loss"]) == [float(v) for _, v in raw]


REAL_LOGS = BASELINES + GOLDENS + sorted((REAL / "logs").glob("*"))


@pytest.mark.parametrize("path", REAL_LOGS, ids=lambda p: p.name)
def test_no_real_log_reads_as_nan_losses(path: Path) -> None:
    table = read_log(path)
    loss = table.frame["loss"].to_numpy()
    assert np.isfinite(loss).mean() > 0.9, f"{path.name}: {table.notes}"
    assert not math.isnan(float(np.nanmax(loss)))
