"""Column-wise step-line reading: a value is never taken from the wrong field."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pytest_accuracy.logs import fields, megatron, read_log, records

pytestmark = pytest.mark.usefixtures("log_reader")

MEGATRON = (
    " [2025-10-22 16:59:16] iteration {step:8d}/ 1000 | consumed samples: {samples:12d} | "
    "elapsed time per iteration (ms): 1644.7 | learning rate: {lr:.6E} | "
    "global batch size:     8 | lm loss: {loss:.6E} | loss scale: 1.0 | grad norm: {gn:.3f} | "
    "number of skipped iterations:   0 | number of nan iterations:   0 |\n"
)
MINDFORMERS = (
    "2025-04-07 15:34:27,308 - [mindformers/core/callback/callback.py:529] - INFO - "
    "{{ Epoch:[  1/  1], step:[{step:5d}/ 1000], loss: {loss:.6f}, per_step_time: 1758ms, "
    "lr: {lr:g}, overflow cond: {ovf}, loss_scale: 1.0, global_norm: [{gn:.6f}], "
    "train_throughput_per_npu: 170.173T\n"
)


def values(n: int, seed: int = 0) -> list[dict[str, float]]:
    rng = np.random.default_rng(seed)
    return [
        {
            "step": i + 1,
            "samples": 8 * (i + 1),
            "lr": float(rng.uniform(1e-6, 1e-4)),
            "loss": float(rng.uniform(1, 10)),
            "gn": float(rng.uniform(0.1, 30)),
        }
        for i in range(n)
    ]


def test_megatron_line_with_swapped_fields_is_read_by_key(tmp_path: Path) -> None:
    rows = values(40)
    lines = [MEGATRON.format(**r) for r in rows]
    # Same number of fields, lr and grad norm swapped: reading by position would swap them.
    r = rows[20]
    lines[20] = (
        lines[20]
        .replace(f"learning rate: {r['lr']:.6E}", "TMP")
        .replace(f"grad norm: {r['gn']:.3f}", f"learning rate: {r['lr']:.6E}")
        .replace("TMP", f"grad norm: {r['gn']:.3f}")
    )
    path = tmp_path / "megatron.log"
    path.write_text("".join(lines))
    t = read_log(path)
    assert np.array_equal(t.frame["lr"], [float(f"{r['lr']:.6E}") for r in rows])
    assert np.array_equal(t.frame["grad_norm"], [float(f"{r['gn']:.3f}") for r in rows])
    assert "1 line(s) with fields outside the learnt layout read one by one" in t.notes


def test_mindformers_extra_and_missing_fields(tmp_path: Path) -> None:
    rows = values(30)
    lines = [MINDFORMERS.format(ovf="False", **r) for r in rows]
    lines[5] = lines[5].replace(", per_step_time", ", mtp_loss: 0.25, per_step_time")
    lines[9] = lines[9].replace(", loss_scale: 1.0", "")  # one field fewer
    lines[12] = lines[12].replace("overflow cond: False", "overflow cond: True")
    path = tmp_path / "worker_0.log"
    path.write_text("".join(lines))
    t = read_log(path)
    assert list(t.steps) == list(range(1, 31))
    assert np.array_equal(t.frame["loss"], [float(f"{r['loss']:.6f}") for r in rows])
    assert np.array_equal(t.frame["grad_norm"], [float(f"{r['gn']:.6f}") for r in rows])
    mtp = t.frame["mtp_loss"].to_numpy()
    assert mtp[5] == 0.25 and np.isnan(np.delete(mtp, 5)).all()
    scale = t.frame["loss_scale"].to_numpy()
    assert np.isnan(scale[9]) and (np.delete(scale, 9) == 1.0).all()
    assert list(np.flatnonzero(t.frame["skipped"])) == [12]  # the overflow step
    assert "2 step line(s) outside the learnt field layout read one by one" in t.notes


def test_layout_learnt_per_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A resumed run printing another field set is read by its own layout, not one by one."""
    monkeypatch.setattr(fields, "_BLOCK", 8)  # pure path: a layout per block of 8 rows
    monkeypatch.setattr(records, "_FEW", 4)  # compiled: 8 lines outside the first layout are many
    rows = values(16)
    old = [MEGATRON.format(**r) for r in rows[:8]]
    new = [MEGATRON.format(**r).replace("| loss scale: 1.0 ", "") for r in rows[8:]]
    path = tmp_path / "megatron.log"
    path.write_text("".join(old + new))
    t = read_log(path)
    assert np.array_equal(t.frame["loss"], [float(f"{r['loss']:.6E}") for r in rows])
    assert list(t.frame["loss_scale"].isna()) == [False] * 8 + [True] * 8
    assert not any("read one by one" in n for n in t.notes)


@pytest.mark.parametrize("fmt", ["{:.6E}", "{:.6f}", "{!r}", "{:.4g}", "{:.17g}"])
def test_values_equal_python_float(tmp_path: Path, fmt: str) -> None:
    """pandas' tokenizer must give the float Python's ``float(text)`` gives, to the bit."""
    rng = np.random.default_rng(7)
    raw = np.concatenate([rng.uniform(0, 20, 500), 10.0 ** rng.uniform(-12, 6, 500)])
    texts = [fmt.format(float(x)) for x in raw]
    lines = [
        MEGATRON.format(step=i + 1, samples=8, lr=1e-5, loss=1.0, gn=1.0).replace(
            "lm loss: 1.000000E+00", f"lm loss: {text}"
        )
        for i, text in enumerate(texts)
    ]
    path = tmp_path / "megatron.log"
    path.write_text("".join(lines))
    got = read_log(path).frame["loss"].to_numpy()
    assert np.array_equal(got, np.array([float(t) for t in texts]))


def test_missing_and_junk_values(tmp_path: Path) -> None:
    rows = values(6)
    lines = [MEGATRON.format(**r) for r in rows]
    lines[1] = lines[1].replace(f"grad norm: {rows[1]['gn']:.3f}", "grad norm: nan")
    lines[2] = lines[2].replace(f"grad norm: {rows[2]['gn']:.3f}", "grad norm: N/A")
    lines[3] = lines[3].replace(f"grad norm: {rows[3]['gn']:.3f}", "grad norm: 1.2.3")
    path = tmp_path / "megatron.log"
    path.write_text("".join(lines))
    t = read_log(path)
    gn = t.frame["grad_norm"].to_numpy()
    assert np.isnan(gn[1:4]).all() and not np.isnan(gn[[0, 4, 5]]).any()
    assert "1 unparseable value(s) read as NaN" in t.notes  # only the junk, not nan or N/A


def test_control_bytes_and_a_huge_line_are_read_or_flagged(tmp_path: Path) -> None:
    rows = values(5)
    lines = [MEGATRON.format(**r) for r in rows]
    lines[1] = lines[1].replace("consumed samples", 'consumed\x00samples\x1f"quoted')
    lines[3] = lines[3].rstrip("\n") + " extra: " + "x" * 1_000_000 + " |\n"
    path = tmp_path / "megatron.log"
    path.write_bytes("".join(lines).encode("latin-1"))
    t = read_log(path)
    assert list(t.steps) == [1, 2, 3, 4, 5]
    assert np.array_equal(t.frame["loss"], [float(f"{r['loss']:.6E}") for r in rows])


def test_a_block_pandas_rejects_is_read_one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise fields.pd.errors.ParserError("Error tokenizing data")

    monkeypatch.setattr(fields, "_tokenize", refuse)
    rows = [MEGATRON.format(**r).split("iteration ", 1)[1].strip().encode() for r in values(3)]
    parsed = fields.read_rows(rows, megatron._FIELDS)
    assert parsed.odd.all() and not parsed.values


def test_a_marker_line_that_is_no_step_record_is_ignored(tmp_path: Path) -> None:
    rows = values(4)
    lines = [MINDFORMERS.format(ovf="False", **r) for r in rows]
    lines.insert(2, "2025-04-07 15:34:27,308 - INFO - Epoch:[  1/  1], eval acc: [0.5]\n")
    path = tmp_path / "worker_0.log"
    path.write_text("".join(lines))
    t = read_log(path)
    assert list(t.steps) == [1, 2, 3, 4]
    assert "1 other line(s) ignored (not step records)" in t.notes
    assert not any("one by one" in n for n in t.notes)


@pytest.mark.parametrize(
    "name",
    [
        "megatron_lm_issue_lines.txt",
        "mindspeed_llm_fsdp2_doc.txt",
        "mindformers_mflossmonitor_high_availability_doc.txt",
        "mindformers_mflossmonitor_skip_data_doc.txt",
        "hf_trainer_issue_lines.txt",
    ],
)
def test_slices_and_blocks_do_not_change_the_table(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file read a few bytes and rows at a time gives the table read in one go."""
    path = Path(__file__).parent / "data" / "log_samples" / name
    steps = 1 if name.startswith("hf_") else None  # printed HF dicts carry no step numbers
    whole = read_log(path, logging_steps=steps)
    monkeypatch.setattr(fields, "_SLICE", 200)  # a slice per line or two
    monkeypatch.setattr(fields, "_BLOCK", 2)
    sliced = read_log(path, logging_steps=steps)
    assert sliced.frame.equals(whole.frame)
    # Only how many lines fell outside their block's layout may differ.
    assert drop_one_by_one(sliced.notes) == drop_one_by_one(whole.notes)


def drop_one_by_one(notes: tuple[str, ...]) -> list[str]:
    return [n for n in notes if "one by one" not in n]
