"""Log readers: every real excerpt, every format generation, and every kind of bad input."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from pytest_accuracy.errors import AccuracyInputError, MissingExtraError
from pytest_accuracy.logs import FORMATS, STANDARD_COLUMNS, read_log, write_golden
from pytest_accuracy.logs.tensorboard import from_scalars

SAMPLES = Path(__file__).parent / "data" / "log_samples"
EXAMPLES = Path(__file__).parent.parent / "example_data" / "logs"
TRIED = ", ".join(FORMATS)

pytestmark = pytest.mark.usefixtures("log_reader")  # compiled scanner and pure path alike


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode())
    return path


def row(table, step: int) -> dict:  # type: ignore[no-untyped-def]
    return table.frame.loc[step].to_dict()


# --- real excerpts ---------------------------------------------------------------------------


def test_megatron_issue_lines_every_era() -> None:
    t = read_log(SAMPLES / "megatron_lm_issue_lines.txt")
    assert t.format == "megatron"
    assert list(t.steps) == [1, 122, 123, 3383, 3384, 5426]
    assert list(t.frame.columns[:5]) == list(STANDARD_COLUMNS)
    first = row(t, 1)  # core 0.14, timestamp, MoE seq_load_balancing_loss
    assert first["loss"] == 12.19037 and first["lm loss"] == 12.19037
    assert first["grad_norm"] == 18.417 and first["lr"] == 3.900183e-07
    assert first["seq_load_balancing_loss"] == 1.300237 and first["loss_scale"] == 1.0
    old = row(t, 3383)  # pre-2024: no timestamp, learning rate :.3E
    assert (old["loss"], old["grad_norm"], old["lr"]) == (0.7334521, 0.752, 6.68e-06)
    assert row(t, 122)["loss"] == 2.50422 and row(t, 123)["grad_norm"] == 0.236
    nan_line = row(t, 5426)  # Megatron-DeepSpeed: no loss field, grad norm: nan
    assert math.isnan(nan_line["loss"]) and math.isnan(nan_line["grad_norm"])
    assert nan_line["skipped"] is True or nan_line["skipped"] == 1
    assert int(t.frame["skipped"].sum()) == 1


def test_mindformers_high_availability_doc_with_typos() -> None:
    t = read_log(SAMPLES / "mindformers_mflossmonitor_high_availability_doc.txt")
    assert t.format == "mindformers"
    assert list(t.frame["loss"]) == [10.649, 10.633, 9.673, 9.287, 8.867]
    gn = t.frame["grad_norm"].to_numpy()
    assert np.isnan(gn[:2]).all()  # "global_norm: [1 31049]" is a doc typo: NaN, not a crash
    assert list(gn[2:]) == [10.579812, 21.932272, 16.986555]  # "global_norm [x]" without colon
    assert row(t, 5)["lr"] == 9.8386645e-06
    assert "2 unparseable value(s) read as NaN" in t.notes
    assert not t.frame["skipped"].any()


def test_mindformers_skip_data_doc() -> None:
    t = read_log(SAMPLES / "mindformers_mflossmonitor_skip_data_doc.txt")
    assert list(t.steps) == [1, 2]
    assert list(t.frame["grad_norm"]) == [44.313248, 47.329006]
    assert list(t.frame["loss"]) == [0.0, 0.0]
    assert list(t.frame["skipped"]) == [True, True]  # is_skip: [ True] after each step
    assert "2 step(s) whose update skip-data dropped (is_skip: True)" in t.notes
    assert "5 other line(s) ignored (not step records)" in t.notes


def test_mindformers_legacy_file_handler_line() -> None:
    t = read_log(SAMPLES / "mindformers_legacy_mindrlhf_doc.txt")
    assert list(t.steps) == [2]
    assert row(t, 2)["loss"] == 0.744 and row(t, 2)["lr"] == 8e-08
    assert row(t, 2)["loss_scale"] == 128.0


def test_mindformers_local_norm_lines() -> None:
    t = read_log(SAMPLES / "mindformers_trainingstatemonitor_local_norm_doc.txt")
    assert t.local_norm is not None
    assert len(t.local_norm) == 11  # device_local_norm is not a parameter
    norms = dict(zip(t.local_norm["param"], t.local_norm["norm"], strict=True))
    assert norms["lm_head.weight"] == 15.7734
    assert norms["model.layers.2.ffn_norm.weight"] == 0.0739
    assert set(t.local_norm["step"]) == {1}
    assert "no loss lines: rows are the steps of the local-norm lines" in t.notes


def test_mindspeed_fsdp2_restart_keeps_last() -> None:
    t = read_log(SAMPLES / "mindspeed_llm_fsdp2_doc.txt")
    assert t.format == "mindspeed-llm"
    assert list(t.steps) == [1, 2, 3]
    assert row(t, 1)["loss"] == 3.316887 and row(t, 1)["grad_norm"] == 70.959  # last run wins
    assert row(t, 3)["loss"] == 1.134654 and row(t, 3)["lr"] == 9.99995e-06
    assert "2 repeated step record(s) (restart or resume); kept the last of each" in t.notes


def test_mindspeed_baseline_json() -> None:
    t = read_log(SAMPLES / "mindspeed_llm_baseline_json_excerpt.txt")
    assert t.format == "golden"
    assert list(t.steps) == [1, 2, 3, 4, 5]
    assert list(t.frame["loss"]) == [10.87014, 10.85756, 10.86511, 10.85751, 10.85116]
    assert row(t, 1)["grad_norm"] == 37.771


def test_megatron_golden_excerpt() -> None:
    t = read_log(SAMPLES / "megatron_golden_values_excerpt.txt")
    assert list(t.steps) == [1, 5, 10, 15]
    assert row(t, 5)["loss"] == 10.92817 and row(t, 1)["num-zeros"] == 1834.0
    assert any("every 5 steps" in n for n in t.notes)


def test_hf_printed_dicts() -> None:
    # printed dicts carry no step: with no trainer_state.json to say them, never silent 1..N
    with pytest.raises(AccuracyInputError, match="--acc-logging-steps"):
        read_log(SAMPLES / "hf_trainer_issue_lines.txt")
    t = read_log(SAMPLES / "hf_trainer_issue_lines.txt", logging_steps=1)
    assert t.format == "hf-log"
    assert list(t.steps) == [1, 2, 3, 4, 5, 6, 7]
    assert row(t, 1)["loss"] == 10.5949 and row(t, 1)["grad_norm"] == 188.28981018066406
    assert row(t, 1)["lr"] == 4.5833333333333334e-05
    assert math.isnan(row(t, 5)["grad_norm"])  # bare nan in the repr
    t10 = read_log(SAMPLES / "hf_trainer_issue_lines.txt", logging_steps=10)
    assert list(t10.steps) == [10, 20, 30, 40, 50, 60, 70]


def test_torchtitan_lines_both_eras() -> None:
    t = read_log(SAMPLES / "torchtitan_issue_lines.txt")
    assert t.format == "torchtitan"
    assert list(t.steps) == [14, 15, 16, 17, 200, 210]
    assert row(t, 14)["loss"] == 3.24405 and row(t, 14)["grad_norm"] == 0.8319
    assert row(t, 200)["loss"] == 6.1384 and math.isnan(row(t, 200)["grad_norm"])


def test_torchtitan_loss_file() -> None:
    t = read_log(SAMPLES / "torchtitan_expected_losses_excerpt.txt")
    assert t.format == "torchtitan-losses"
    assert row(t, 1)["loss"] == 8.049097061157227 and row(t, 5)["loss"] == 5.192974090576172


# --- generations and variants (synthetic lines in the documented shapes) ----------------------

PREFIX = "2025-04-07 15:34:27,308 - [mindformers/core/callback/callback.py:529] - INFO - "


def test_mindformers_g0_non_sink_overflow_and_epochs(tmp_path: Path) -> None:
    text = (
        "[INFO] 2023-07-11 10:48:37,162 [/x/callback.py:269] print_output_info: Epoch:[  2/  2], "
        "step:[    3/  100], loss:[5.123/5.500], time:68580.279 ms, lr:[2.4499998e-06], "
        "overflow cond: True, loss_scale: 64.0\n"
    )
    t = read_log(write(tmp_path, "info.log", text))
    assert list(t.steps) == [103]  # (epoch - 1) * steps_per_epoch + step
    r = row(t, 103)
    assert r["loss"] == 5.123 and r["lr"] == 2.4499998e-06 and r["loss_scale"] == 64.0
    assert r["skipped"]  # overflow cond: True


def test_mindformers_g4_separate_losses_and_numpy_bool(tmp_path: Path) -> None:
    lines = [
        PREFIX + "{ Epoch:[  1/  1], step:[    1/   10], loss: 2.500000, lm_loss: 2.400000, "
        "load_balancing_loss: 0.100000, per_step_time: 1758ms, lr: 1e-05, overflow cond: False, "
        "loss_scale: 1.0, global_norm: [3.500000]",
        PREFIX + "{ Epoch:[  1/  1], step:[    2/   10], loss: 2.400000, lm_loss: 2.300000, "
        "load_balancing_loss: 0.100000, per_step_time: 1758ms, lr: 1e-05, overflow cond: [ True], "
        "loss_scale: 1.0, global_norm: None",
    ]
    t = read_log(write(tmp_path, "worker_0.log", "\n".join(lines) + "\n"))
    assert list(t.frame["lm_loss"]) == [2.4, 2.3]
    assert list(t.frame["load_balancing_loss"]) == [0.1, 0.1]
    assert row(t, 1)["grad_norm"] == 3.5 and math.isnan(row(t, 2)["grad_norm"])
    assert list(t.frame["skipped"]) == [False, True]


def test_mindformers_pynative_trainer(tmp_path: Path) -> None:
    text = (
        "{ step:[    1/   10], loss:  11.813965, per_step_time:  13570ms, load_balancing_loss:"
        "   1.093977, lr: 1.000000e-05, grad_norm:  13.831877, throughput:   1.36T }\n"
        "{ step:[    2/   10], loss: N/A (non-last PP stage, refer to last stage for real loss), "
        "per_step_time:  1357ms, lr: 1.000000e-05, grad_norm: NaN, throughput:   1.36T }\n"
    )
    t = read_log(write(tmp_path, "worker_3.log", text))
    r = row(t, 1)
    assert (r["loss"], r["grad_norm"], r["lr"]) == (11.813965, 13.831877, 1e-05)
    assert r["load_balancing_loss"] == 1.093977
    assert math.isnan(row(t, 2)["loss"]) and row(t, 2)["skipped"]
    assert any("non-last pipeline stage" in n for n in t.notes)


def test_megatron_moe_mtp_skipped_and_launcher_prefix(tmp_path: Path) -> None:
    head = (
        "[default0]: [2026-01-02 03:04:05.123456] iteration {:8d}/     100 | consumed samples: 8 |"
    )
    tail = " loss scale: 1.0 | grad norm: 2.500 | number of skipped iterations: {} |"
    tail += " number of nan iterations:   0 |"
    good = " learning rate: 1.000000E-04 | lm loss: 3.000000E+00 | mtp_1 loss: 3.100000E+00 |"
    good += " load_balancing_loss: 1.000000E-02 |"
    lines = [head.format(1) + good + tail.format(0), head.format(2) + good + tail.format(1)]
    t = read_log(write(tmp_path, "megatron.log", "\n".join(lines) + "\n"))
    assert list(t.frame["mtp_1 loss"]) == [3.1, 3.1]
    assert row(t, 1)["load_balancing_loss"] == 0.01
    assert list(t.frame["skipped"]) == [False, True]  # number of skipped iterations: 1


def test_garbage_nan_inf_and_truncated_tail(tmp_path: Path) -> None:
    mk = "{{ Epoch:[  1/  1], step:[{:5d}/   10], loss: {}, per_step_time: 1ms, lr: 1e-05, "
    mk += "overflow cond: False, loss_scale: 1.0, global_norm: [2.0]"
    text = "\n".join(
        [
            "random garbage \x00\xff line",
            PREFIX + mk.format(1, "2.000000"),
            "Traceback (most recent call last):",
            PREFIX + mk.format(2, "nan"),
            PREFIX + mk.format(3, "inf"),
            PREFIX + mk.format(4, "1.900000"),
            PREFIX + "{ Epoch:[  1/  1], step:[    5/   10], loss: 1.8",  # cut by a crash
        ]
    )
    t = read_log(write(tmp_path, "worker_0.log", text))
    assert list(t.steps) == [1, 2, 3, 4]
    assert list(t.frame["skipped"]) == [False, True, True, False]
    assert np.isnan(t.frame["loss"].to_numpy()[1:3]).all()  # inf becomes NaN too
    assert "ignored a truncated last line (no newline at end of file)" in t.notes
    assert "2 other line(s) ignored (not step records)" in t.notes


def test_crlf_and_megatron_truncated_mid_file(tmp_path: Path) -> None:
    line = " iteration {:8d}/     100 | lm loss: {} | grad norm: 1.000 |"
    text = "\r\n".join([line.format(1, "3.0E+00"), " iteration        2/     100 | lm lo"])
    text += "\r\n" + line.format(3, "2.0E+00") + "\r\n"
    t = read_log(write(tmp_path, "crlf.log", text))
    # the cut record is no step (never a skipped step with a NaN loss) and never eats line 3
    assert list(t.steps) == [1, 3]
    assert list(t.frame["loss"]) == [3.0, 2.0]
    assert any("cut step record" in note for note in t.notes)


def test_tabular_aliases_csv_and_jsonl(tmp_path: Path) -> None:
    csv = "Iteration,LM Loss,Grad-Norm,Learning Rate,overflow\n"
    csv += "1,3.5,10,1e-4,False\n2,3.4,9,1e-4,True\n"
    t = read_log(write(tmp_path, "run.csv", csv))
    assert t.format == "tabular" and list(t.steps) == [1, 2]
    assert row(t, 1)["loss"] == 3.5 and row(t, 1)["grad_norm"] == 10.0 and row(t, 2)["skipped"]
    jsonl = '{"step": 5, "loss": 2.5, "mtp_1 loss": 2.6}\n{"step": 10, "loss": 2.4}\n'
    t = read_log(write(tmp_path, "run.jsonl", jsonl))
    assert list(t.steps) == [5, 10] and row(t, 5)["mtp_1 loss"] == 2.6


def test_hf_trainer_state(tmp_path: Path) -> None:
    state = {
        "log_history": [
            {"loss": 2.5, "grad_norm": 3.0, "learning_rate": 1e-4, "epoch": 0.1, "step": 10},
            {"eval_loss": 2.6, "step": 10},
            {"loss": 2.4, "grad_norm": "nan", "learning_rate": 1e-4, "epoch": 0.2, "step": 20},
            {"train_loss": 2.45, "step": 20},
        ]
    }
    t = read_log(write(tmp_path, "trainer_state.json", json.dumps(state)))
    assert t.format == "hf-trainer-state" and list(t.steps) == [10, 20]
    assert row(t, 10)["grad_norm"] == 3.0 and math.isnan(row(t, 20)["grad_norm"])


def test_golden_list_layout_and_round_trip(tmp_path: Path) -> None:
    spec = {"start_step": 1, "end_step": 9, "step_interval": 4, "values": [3.0, "nan", 2.0]}
    t = read_log(write(tmp_path, "golden_values_dev.json", json.dumps({"lm loss": spec})))
    assert list(t.steps) == [1, 5, 9] and list(t.frame["skipped"]) == [False, True, False]
    bench = read_log(EXAMPLES / "megatron_bench_b.log")
    out = write_golden(bench, tmp_path / "baseline.json")
    back = read_log(out)
    assert list(back.steps) == list(bench.steps)
    np.testing.assert_array_equal(back.frame["loss"], bench.frame["loss"])
    np.testing.assert_array_equal(back.frame["skipped"], bench.frame["skipped"])
    metrics = json.loads(out.read_text())
    assert metrics["lm loss"]["values"]["77"] == "nan" and metrics["lm loss"]["step_interval"] == 1


def test_example_logs_read() -> None:
    npu = read_log(EXAMPLES / "mindformers_npu.log")
    assert npu.format == "mindformers" and list(npu.steps) == list(range(1, 301))
    golden = read_log(EXAMPLES / "megatron_golden.json")
    bench = read_log(EXAMPLES / "megatron_bench_a.log")
    np.testing.assert_allclose(golden.frame["loss"], bench.frame["loss"], atol=5e-6)


def test_tensorboard_scalars_table() -> None:
    scalars = {
        "lm loss": [(1, 3.0), (2, 2.9), (2, 2.8)],
        "grad-norm": [(1, 5.0), (2, 4.0)],
        "mtp_1 loss": [(1, 3.1)],
        "lm loss validation": [(2, 3.3)],
    }
    t = from_scalars(Path("tb"), scalars)
    assert list(t.steps) == [1, 2] and row(t, 2)["loss"] == 2.8 and row(t, 2)["grad_norm"] == 4.0
    assert math.isnan(row(t, 2)["mtp_1 loss"]) and "lm loss validation" not in t.frame


def test_tensorboard_missing_package_is_one_line(tmp_path: Path) -> None:
    pytest.importorskip("numpy")
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        events = write(tmp_path, "events.out.tfevents.1.host", "")
        with pytest.raises(MissingExtraError) as info:
            read_log(events)
        assert str(info.value) == (
            "tensorboard.backend.event_processing.event_accumulator is not installed: "
            "pip install 'pytest-accuracy[tensorboard]'"
        )
    else:
        pytest.skip("tensorboard is installed")


# --- bad input ---------------------------------------------------------------------------------


def test_empty_file(tmp_path: Path) -> None:
    path = write(tmp_path, "empty.log", "\n  \n")
    with pytest.raises(AccuracyInputError) as info:
        read_log(path)
    assert str(info.value) == f"{path}: empty file: no training steps"


def test_unknown_format(tmp_path: Path) -> None:
    path = write(tmp_path, "notes.txt", "hello\nthis is not a training log\n")
    with pytest.raises(AccuracyInputError) as info:
        read_log(path)
    assert str(info.value) == (
        f"{path}: unknown log format: no training-step lines (tried: mindformers, megatron, "
        "hf-trainer-state, hf-log, torchtitan, torchtitan-losses, golden, tabular, tensorboard)"
    )
    assert TRIED in str(info.value)


def test_forced_format_without_steps_and_bad_names(tmp_path: Path) -> None:
    path = write(tmp_path, "x.log", "nothing here\n")
    with pytest.raises(AccuracyInputError, match="no training steps found in this megatron log"):
        read_log(path, fmt="mindspeed")
    with pytest.raises(AccuracyInputError, match="unknown log format 'nemo'"):
        read_log(path, fmt="nemo")
    with pytest.raises(AccuracyInputError, match="file not found"):
        read_log(tmp_path / "missing.log")
    with pytest.raises(AccuracyInputError, match="not valid JSON"):
        read_log(write(tmp_path, "bad.json", '{"lm loss": {"values": '), fmt="golden")


def test_tabular_garbage_rows_and_cut_jsonl(tmp_path: Path) -> None:
    csv = "step,loss\n1,2.5\ngarbage line here,,,,\n2,2.4\nxx,1\n3,2.3\n4,abc\n5,N/A\n"
    t = read_log(write(tmp_path, "t.csv", csv))
    assert list(t.steps) == [1, 2, 3, 4, 5]
    assert list(t.frame["loss"].fillna(-1)) == [2.5, 2.4, 2.3, -1, -1]
    assert "1 unparseable value(s) read as NaN" in t.notes  # abc; N/A is a missing marker
    assert "1 malformed row(s) ignored" in t.notes
    assert "1 row(s) without a numeric step ignored" in t.notes
    jsonl = '{"step":1,"loss":2.5}\nnot json\n{"step":2,"loss":2.4}\n{"step":3,"lo'
    t = read_log(write(tmp_path, "t.jsonl", jsonl))
    assert list(t.steps) == [1, 2] and "2 unreadable line(s) ignored" in t.notes


def test_megatron_other_lines_are_not_steps(tmp_path: Path) -> None:
    lines = [
        " iteration       10/     100 | lm loss: 3.000000E+00 | grad norm: 1.000 |",
        " validation loss at iteration 10 on validation set | lm loss value: 3.1E+00 |",
        "saving checkpoint at iteration      10 to /ckpt in torch_dist format",
        "[Rank 0] (after 10 iterations) memory (MB) | allocated: 1.0 | max allocated: 2.0",
        " iteration       20/     100 | lm loss: 2.000000E+00 | grad norm: 0.500 |",
    ]
    t = read_log(write(tmp_path, "train.log", "\n".join(lines) + "\n"))
    assert list(t.steps) == [10, 20] and list(t.frame["loss"]) == [3.0, 2.0]
    assert "3 line(s) without a step record ignored" in t.notes


def test_mindformers_is_skip_marks_the_step_above_it(tmp_path: Path) -> None:
    line = (
        "- INFO - {{ Epoch:[  2/  2], step:[    {s}/    3], loss: 2.0, per_step_time: 5ms, "
        "lr: 1e-05, overflow cond: False, loss_scale: 1.0, global_norm: [4.0], "
        "train_throughput_per_npu: 1.0T\n"
    )
    skip = "- INFO - opt_global_step: 3, skip_data_grad_norm_threshold: 3.0, is_skip: [ {v}]\n"
    text = line.format(s=1) + skip.format(v="False") + line.format(s=2) + skip.format(v="True")
    t = read_log(write(tmp_path, "worker_0.log", text + line.format(s=3)))
    assert list(t.steps) == [4, 5, 6]  # epoch 2 of 3-step epochs
    assert list(t.frame["skipped"]) == [False, True, False]
    assert "1 step(s) whose update skip-data dropped (is_skip: True)" in t.notes


def test_hf_printed_dicts_take_steps_from_the_runs_trainer_state(tmp_path: Path) -> None:
    printed = (SAMPLES / "hf_trainer_issue_lines.txt").read_text().splitlines()[1:5]
    log = write(tmp_path, "train.log", "\n".join(printed) + "\n")
    losses = [10.5949, 8.2312, 7.8988]  # the checkpoint was saved before the 4th log
    state = {"log_history": [{"loss": v, "step": 10 * (i + 1)} for i, v in enumerate(losses)]}
    (tmp_path / "checkpoint-30").mkdir()
    (tmp_path / "checkpoint-30" / "trainer_state.json").write_text(json.dumps(state))
    (tmp_path / "checkpoint-7").mkdir()  # an older checkpoint: not the one read
    (tmp_path / "checkpoint-7" / "trainer_state.json").write_text(json.dumps({"log_history": []}))
    t = read_log(log)
    assert list(t.steps) == [10, 20, 30, 40]
    assert t.notes[0] == "steps from checkpoint-30/trainer_state.json (printed HF dicts carry none)"
    # A state of another run (other losses) is not used: refused, never numbered 1..N
    state["log_history"][0]["loss"] = 1.0
    (tmp_path / "trainer_state.json").write_text(json.dumps(state))
    with pytest.raises(AccuracyInputError, match="--acc-logging-steps"):
        read_log(log)


def test_torchtitan_coloured_console_log(tmp_path: Path) -> None:
    """torchtitan colours every key; a log captured from the console keeps the codes."""
    line = (
        "[rank0]:[titan] 2026-05-18 16:04:46,338 - root - INFO - \x1b[31mstep: {s:2}  "
        "\x1b[32mloss: {l:8.5f}  \x1b[33mgrad_norm: {g:7.4f}  \x1b[34mmemory:  9.46GiB(64.99%)  "
        "\x1b[35mtps: 7,282  \x1b[36mtflops: 0.52  \x1b[35mmfu: 0.17%\x1b[39m"
    )
    text = "\n".join(line.format(s=s, l=3 + s / 10, g=s / 100) for s in (14, 15, 16))
    t = read_log(write(tmp_path, "titan.log", text))  # last line complete, no newline
    assert t.format == "torchtitan" and list(t.steps) == [14, 15, 16]
    assert list(t.frame["loss"]) == [4.4, 4.5, 4.6]
    assert list(t.frame["grad_norm"]) == [0.14, 0.15, 0.16]
    assert not any("truncated" in n for n in t.notes)


def test_hf_printed_dicts_of_another_shape_are_read_as_literals(tmp_path: Path) -> None:
    line = "{{'loss': {l}, 'grad_norm': {g}, 'learning_rate': 1e-05, 'epoch': 0.1}}\n"
    lines = [line.format(l=1 + i / 10, g=2 + i / 10) for i in range(20)]
    lines[7] = "{'loss': 1.7, 'aux_loss': 0.5, 'grad_norm': 2.7, 'learning_rate': 1e-05}\n"
    lines[9] = "{'loss': 1.9, 'grad_norm': 2.9, 'learning_rate': 1e-05, 'epoch': 0.1\n"  # cut
    t = read_log(write(tmp_path, "train.log", "".join(lines)), logging_steps=1)
    assert len(t) == 19  # the cut dict is no record
    assert list(t.frame["loss"])[7] == 1.7 and list(t.frame["grad_norm"])[7] == 2.7
    assert list(t.frame["grad_norm"]) == [2 + i / 10 for i in range(20) if i != 9]


def test_jsonl_read_column_wise_with_odd_lines(tmp_path: Path) -> None:
    lines = [
        json.dumps({"step": i, "loss": 2 + i / 8, "grad_norm": i / 3, "overflow": i == 4})
        for i in range(1, 9)
    ]
    lines[2] = json.dumps({"step": 3, "aux": [1, 2], "loss": 2.375, "lm_loss": 9.0})  # other shape
    lines[5] = json.dumps({"step": 6, "loss": "nan", "grad_norm": None, "overflow": False})
    text = "# metrics\n" + "\n".join(lines) + "\n\nnot json\n"
    t = read_log(write(tmp_path, "metrics.jsonl", text))
    assert list(t.steps) == list(range(1, 9))
    assert list(t.frame["loss"].fillna(-1)) == [2.125, 2.25, 2.375, 2.5, 2.625, -1, 2.875, 3.0]
    gn = t.frame["grad_norm"].to_numpy()
    assert gn[1] == 2 / 3 and np.isnan(gn[[2, 5]]).all()
    assert list(np.flatnonzero(t.frame["skipped"])) == [3, 5]  # overflow at step 4; NaN loss
    assert row(t, 3)["lm_loss"] == 9.0
    assert "1 unreadable line(s) ignored" in t.notes


def test_mindformers_unnamed_local_norm_arrays(tmp_path: Path) -> None:
    """runner_wrapper ``local_norm: True``: norm_size, ``local_norm:`` and a numpy array dump
    (wrapping over lines) before each step line; entries are sums of squared gradients."""
    step = (
        "2025-04-07 15:34:27,308 - [mindformers/core/callback/callback.py:529] - INFO - "
        "{{ Epoch:[  1/  1], step:[    {s}/    3], loss: 2.{s}, per_step_time: 5ms, lr: 1e-05, "
        "overflow cond: False, loss_scale: 1.0, global_norm: [4.0], "
        "train_throughput_per_npu: 1.0T\n"
    )
    block = "2025-04-07 15:34:27,300 - INFO -  norm_size: [ 4 16  4]\nlocal_norm:\n{arr}\n"
    text = (
        block.format(arr="[1.0000e+00 4.0000e+00\n 9.0000e+00]")
        + step.format(s=1)
        + block.format(arr="[1.6e+01 ... 2.5e+01]")
        + step.format(s=2)  # shortened by numpy
        + block.format(arr="[0.25 1.   4.  ]")
        + step.format(s=3)
    )
    t = read_log(write(tmp_path, "worker_0.log", text))
    assert list(t.steps) == [1, 2, 3] and list(t.frame["loss"]) == [2.1, 2.2, 2.3]
    assert t.local_norm is not None
    norms = {(s, p): v for s, p, v in t.local_norm[["step", "param", "norm"]].itertuples(False)}
    assert norms == {
        (1, "#0"): 1.0,
        (1, "#1"): 2.0,
        (1, "#2"): 3.0,
        (3, "#0"): 0.5,
        (3, "#1"): 1.0,
        (3, "#2"): 2.0,
    }
    assert "1 local_norm array(s) shortened by numpy ('...') not read" in t.notes
    assert any(n.startswith("unnamed local_norm arrays of 2 step(s)") for n in t.notes)
    assert not any("ignored" in n for n in t.notes)  # every line was read


def test_keys_that_normalise_alike_do_not_collide(tmp_path: Path) -> None:
    """A JSON key with spaces (`" lr"`) and a CSV with `LR` and `lr`: no crash, right column."""
    lines = ['{"step": 1, "loss": 2.5, " lr": 1e-05}\n'] + [
        f'{{"step": {i}, "loss": 2.5, "lr": 1e-05}}\n' for i in (2, 3)
    ]
    t = read_log(write(tmp_path, "metrics.jsonl", "".join(lines)))
    assert list(t.frame["lr"]) == [1e-05] * 3
    t = read_log(write(tmp_path, "metrics.csv", "step,LR,lr,loss\n1,5,1e-5,2.5\n2,5,1e-5,2.4\n"))
    assert list(t.frame["lr"]) == [1e-05] * 2 and list(t.frame["loss"]) == [2.5, 2.4]
