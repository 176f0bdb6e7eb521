"""Logs as they come off a cluster (tests/data/log_samples/cluster): multi-rank, pipeline
placeholders, tee-split lines, validation records, HF steps, TensorBoard runs and tags.

The truth table (``truth.json``) is what the generator printed, read back with ``float``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.logs import read_log
from pytest_accuracy.logs.rejoin import rejoin
from tests.helpers import ROOT

CLUSTER = ROOT / "tests" / "data" / "log_samples" / "cluster"
TRUTH = json.loads((CLUSTER / "truth.json").read_text(encoding="utf-8"))

pytestmark = pytest.mark.usefixtures("log_reader")  # compiled scanner and pure path alike


@pytest.mark.parametrize("name", sorted(TRUTH))
def test_each_cluster_log_reads_its_truth(name: str) -> None:
    truth = TRUTH[name]
    table = read_log(CLUSTER / name)
    steps = truth.get("steps") or list(range(1, len(truth["loss"]) + 1))
    assert list(table.steps) == steps
    want = np.array([math.nan if v is None else v for v in truth["loss"]])
    np.testing.assert_array_equal(table.frame["loss"].to_numpy(), want)
    assert list(table.frame["grad_norm"]) == truth["grad_norm"]
    assert list(table.frame["skipped"]) == truth["skipped"]
    if "validation" in truth:
        assert table.validation is not None
        got = {str(k): v for k, v in table.validation["loss"].items()}
        assert got == truth["validation"]


def test_pipeline_placeholders_never_win() -> None:
    table = read_log(CLUSTER / "torchtitan_pp2_tee.log")
    assert (table.frame["loss"] > 0).all()  # no -1.0 whoever printed last
    assert "loss read from rank 3" in table.notes[0] and "rank 0, rank 1" in table.notes[0]


@pytest.mark.parametrize("name", ["torchtitan_stage0_only.log", "msrun_pp2/msrun_log/worker_0.log"])
def test_no_rank_with_the_loss_is_refused(name: str) -> None:
    with pytest.raises(AccuracyInputError, match="not in the last pipeline stage"):
        read_log(CLUSTER / name)


def test_directory_of_stage0_workers_is_refused(tmp_path: Path) -> None:
    for r in (0, 1):
        src = CLUSTER / "msrun_pp2" / "msrun_log" / f"worker_{r}.log"
        (tmp_path / src.name).write_bytes(src.read_bytes())
    with pytest.raises(AccuracyInputError, match="no rank in this input has the loss"):
        read_log(tmp_path)


def test_directory_of_worker_logs_is_not_tensorboard() -> None:
    table = read_log(CLUSTER / "msrun_pp2")
    assert table.format == "mindformers" and "rank 3" in table.notes[0]


def test_validation_lines_are_no_steps(tmp_path: Path) -> None:
    line = "step: {s:2}  loss: {v:8.5f}  grad_norm:  1.0000  memory:  9.46GiB(64.99%)  mfu: 1%\n"
    text = line.format(s=10, v=3.0) + "validate step: 10  loss:  2.5000  memory:  9.46GiB(6%)\n"
    text += "validate step: 15  loss:  2.4000  memory:  9.46GiB(6%)\n" + line.format(s=11, v=2.9)
    table = read_log(_write(tmp_path, "titan.log", text))
    assert list(table.steps) == [10, 11] and list(table.frame["loss"]) == [3.0, 2.9]
    assert table.validation is not None
    assert table.validation["loss"].to_dict() == {10: 2.5, 15: 2.4}


def test_megatron_record_cut_after_a_pipe_is_rejoined(tmp_path: Path) -> None:
    line = " iteration {:8d}/     100 | lm loss: {} | grad norm: 1.000 |\n"
    whole = line.format(2, "2.5E+00")
    text = line.format(1, "3.0E+00") + whole[:30] + "\n" + whole[30:]
    table = read_log(_write(tmp_path, "cut.log", text))
    assert list(table.steps) == [1, 2] and list(table.frame["loss"]) == [3.0, 2.5]
    assert any("1 step record(s) split over lines" in n for n in table.notes)


def test_megatron_fragment_without_its_rest_is_dropped_by_name(tmp_path: Path) -> None:
    line = " iteration {:8d}/     100 | lm loss: {} | grad norm: 1.000 |\n"
    text = line.format(1, "3.0E+00") + " iteration        3/     100 | lm lo\n"
    text += line.format(4, "2.0E+00")
    table = read_log(_write(tmp_path, "cut.log", text))
    assert list(table.steps) == [1, 4] and list(table.frame["loss"]) == [3.0, 2.0]
    assert any("cut step record(s) whose rest is not in the log dropped, e.g. "
               "'iteration        3/     100 | lm lo'" in n for n in table.notes)


def test_rejoin_leaves_clean_logs_untouched() -> None:
    data = (CLUSTER / "msrun_pp2" / "msrun_log" / "worker_3.log").read_bytes()
    result = rejoin(data, "mindformers")
    assert result.data is data and result.joined == 0


def test_hf_without_state_is_refused_with_the_option() -> None:
    with pytest.raises(AccuracyInputError, match=r"--acc-logging-steps N"):
        read_log(CLUSTER / "hf_4g_no_state" / "train.log")
    table = read_log(CLUSTER / "hf_4g_no_state" / "train.log", logging_steps=5)
    assert list(table.steps) == TRUTH["hf_4g/train.log"]["steps"]


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# --- TensorBoard -------------------------------------------------------------------------------


def _events(folder: Path, scalars: dict[str, list[tuple[int, float]]], suffix: str = "") -> None:
    writer_mod = pytest.importorskip("tensorboard.summary.writer.event_file_writer")
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary

    folder.mkdir(parents=True, exist_ok=True)
    writer = writer_mod.EventFileWriter(str(folder), filename_suffix=suffix)
    for tag, values in scalars.items():
        for step, value in values:
            summary = Summary(value=[Summary.Value(tag=tag, simple_value=value)])
            writer.add_event(Event(step=step, wall_time=float(step), summary=summary))
    writer.close()


def test_tensorboard_loss_train_tag(tmp_path: Path) -> None:
    _events(tmp_path / "tb", {"loss/train": [(1, 3.0), (2, 2.5)], "grad_norm/train": [(1, 1.0)]})
    table = read_log(tmp_path / "tb")
    assert list(table.frame["loss"]) == [3.0, 2.5] and table.frame["grad_norm"].iloc[0] == 1.0


def test_tensorboard_named_tag_and_missing_tag(tmp_path: Path) -> None:
    _events(tmp_path / "tb", {"my/objective": [(1, 3.0), (2, 2.5)]})
    with pytest.raises(AccuracyInputError, match="--acc-log-tag"):
        read_log(tmp_path / "tb")
    assert list(read_log(tmp_path / "tb", tag="my/objective").frame["loss"]) == [3.0, 2.5]
    with pytest.raises(AccuracyInputError, match="no scalar tagged 'nope'"):
        read_log(tmp_path / "tb", tag="nope")


def test_tensorboard_two_runs_in_one_directory_are_refused(tmp_path: Path) -> None:
    _events(tmp_path / "tb", {"lm loss": [(1, 3.0), (2, 2.5)]}, suffix=".a")
    _events(tmp_path / "tb", {"lm loss": [(1, 3.1), (2, 2.6)]}, suffix=".b")
    with pytest.raises(AccuracyInputError, match="more than one run"):
        read_log(tmp_path / "tb")
    one = sorted((tmp_path / "tb").iterdir())[0]
    assert list(read_log(one).frame["loss"]) == [3.0, 2.5]


def test_tensorboard_resumed_run_is_merged(tmp_path: Path) -> None:
    _events(tmp_path / "tb", {"lm loss": [(1, 3.0), (2, 2.5), (3, 2.4)]}, suffix=".a")
    _events(tmp_path / "tb", {"lm loss": [(3, 2.25), (4, 2.125)]}, suffix=".b")
    table = read_log(tmp_path / "tb")
    assert list(table.frame["loss"]) == [3.0, 2.5, 2.25, 2.125]


def test_tensorboard_run_directories_refused_by_name_rank_directories_read(tmp_path: Path) -> None:
    _events(tmp_path / "runs" / "a", {"train/loss": [(1, 3.0)]})
    _events(tmp_path / "runs" / "b", {"train/loss": [(1, 3.1)]})
    with pytest.raises(AccuracyInputError, match=r"2 TensorBoard runs \(a, b\)"):
        read_log(tmp_path / "runs")
    _events(tmp_path / "mf" / "rank_0", {"learning-rate": [(1, 1e-4)]})
    _events(tmp_path / "mf" / "rank_1", {"loss": [(1, 3.25)]})
    table = read_log(tmp_path / "mf")
    assert list(table.frame["loss"]) == [3.25] and "rank_1" in table.notes[0]


def test_an_epoch_era_mindformers_record_cut_before_its_loss_is_named(tmp_path: Path) -> None:
    """Epoch-era MFLossMonitor lines show no end to rejoin them by: a line cut before its loss
    (torchrun --tee, an interleaved writer) is dropped and named, never a NaN step."""
    line = ("print_output_info: Epoch:[  1/  2], step:[{:5d}/29134], loss: {:.3f}, "
            "time:68580.279 ms, lr:8e-08, overflow cond: False, loss_scale: 128.0")
    lines = [line.format(s, 1 - s / 100) for s in range(1, 8)]
    lines[3] = lines[3][: lines[3].index("loss")]  # step 4 cut before its loss
    path = tmp_path / "worker_0.log"
    path.write_text("\n".join(lines) + "\n")
    table = read_log(path)
    assert list(table.steps) == [1, 2, 3, 5, 6, 7]
    assert table.notes == ("1 step record(s) cut before their loss dropped, e.g. "
                           "'Epoch:[  1/  2], step:[    4/29134], '",)
