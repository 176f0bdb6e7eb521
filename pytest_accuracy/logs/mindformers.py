"""MindFormers (MindSpore Transformers) MFLossMonitor / TrainingStateMonitor log reader."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from pytest_accuracy.logs.fields import SEP, Columns, Fields
from pytest_accuracy.logs.ranks import PlaceholderLoss
from pytest_accuracy.logs.records import Records, read_records
from pytest_accuracy.logs.table import (
    LogTable,
    column_of,
    count_lines,
    cut_truncated_tail,
    finish,
    is_true,
    no_steps,
    to_float,
    to_int,
)

# A step record from the marker on: MFLossMonitor generations G0-G4 (``Epoch:[``)
# or the 2026 dynamic-graph trainer (``{ step:[``, no epoch).  With local-norm
# lines in the file (they start ``Epoch:[`` too) only records with a loss are taken.
_EPOCH_ROW = Records(re.compile(rb"Epoch:\[([^\n]*)"), b"Epoch:[")
_EPOCH_LOSS_ROW = Records(
    re.compile(rb"Epoch:\[([^\]\n]*\], step:\[[^\]\n]*\], loss[^\n]*)"), b"Epoch:["
)
_PYNATIVE_ROW = Records(re.compile(rb"\{ step:\[([^\n]*)"), b"{ step:[")
# Skip-data (``skip_data_grad_norm_threshold``): the line after a step's record.
_IS_SKIP = re.compile(rb"is_skip: *\[? *True")
_STEP_HEAD = re.compile(rb"(?:Epoch:\[ *(\d+)/ *\d+\], )?step:\[ *(\d+)/ *(\d+)\]")
_LOSS = rb"\[?([^,/\]\n]*)[^,\n]*"
# One record outside its block's layout, read field by field (groups: epoch,
# step, steps per epoch, loss, rest; the dynamic-graph form has no epoch).
_ODD_EPOCH = re.compile(rb" *(\d+)/ *\d+\], step:\[ *(\d+)/ *(\d+)\], loss: *" + _LOSS + rb"(.*)")
_ODD_PYNATIVE = re.compile(rb" *()(\d+)/ *()\d+\], loss: *" + _LOSS + rb"(.*)")
# TrainingStateMonitor ``local_norm_format: log`` lines.
_LOCAL = re.compile(
    rb"Epoch:\[ *(\d+)/ *\d+\], step:\[ *(\d+)/ *(\d+)\] local_norm/([^\s:]+): *([^\s]+)"
)
# runner_wrapper ``local_norm: True``: a ``local_norm:`` line, then a 1-D numpy array.
_ARRAY = re.compile(rb"\nlocal_norm:\r?\n *\[([^\]]*)\]")
_KV = re.compile(rb"^ *([A-Za-z_][\w /-]*?)(?:: *| +(?=\[))\[? *([^\]]*?) *\]?$")
_COMPLETE = re.compile(rb"[\]T}]\s*$")
_KEYS = {
    "lr": "lr",
    "global_norm": "grad_norm",
    "grad_norm": "grad_norm",
    "loss_scale": "loss_scale",
    "overflow cond": "overflow",
}

FORMAT = "mindformers"


def parse(data: bytes, path: Path) -> LogTable:
    """Read MFLossMonitor step lines (every generation) and local-norm lines."""
    data, tail = cut_truncated_tail(data, _COMPLETE)
    notes = [tail] if tail else []
    has_local = b"local_norm" in data
    parsed, odd_re = _step_records(data, has_local)
    steps, cols, skipped = _columns(parsed, odd_re, notes)
    has_skip = b"is_skip" in data
    if has_skip:
        skipped = skipped | _skip_data(data, steps, notes)
    local, local_lines = _local_norms(data, notes) if has_local else (None, 0)
    step_lines = len(steps)
    if not len(steps) and local is not None:
        # A TrainingStateMonitor-only log: rows are the local-norm steps, no loss.
        steps = np.unique(local["step"].to_numpy(dtype=np.int64))
        cols = {"loss": np.full(len(steps), np.nan)}
        skipped = np.zeros(len(steps), dtype=bool)
        notes.append("no loss lines: rows are the steps of the local-norm lines")
    if not len(steps):
        raise no_steps(path, FORMAT)
    if np.isnan(cols["loss"]).any() and b"loss: N/A" in data:
        steps, cols, skipped = _placeholders(path, data, steps, cols, skipped, notes)
    read = step_lines + local_lines
    read += data.count(b"is_skip:") if has_skip else 0
    ignored = count_lines(data) - read
    if ignored > 0:
        cut = [m.group() for m in _CUT_EPOCH.finditer(data)]
        if cut:  # an Epoch-era record has no visible end to rejoin it by: named, never a step
            notes.append(f"{len(cut)} step record(s) cut before their loss dropped, e.g. "
                         f"{cut[0][:80].decode('utf-8', 'replace')!r}")
        if ignored - len(cut) > 0:
            notes.append(f"{ignored - len(cut)} other line(s) ignored (not step records)")
    return finish(path, FORMAT, steps, cols, skipped, notes, local)


# An Epoch-era step line that ends before its loss (cut by a tee or an interleaved writer;
# eval lines such as ``Epoch:[1/1], eval acc: [0.5]`` have no step)
_CUT_EPOCH = re.compile(rb"Epoch:\[[^\n]*?step:\[(?![^\n]*loss)[^\n]*")


def _placeholders(
    path: Path,
    data: bytes,
    steps: np.ndarray,
    cols: dict[str, np.ndarray],
    skipped: np.ndarray,
    notes: list[str],
) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray]:
    """``loss: N/A (non-last PP stage ...)`` records (pynative trainer): refused when every
    record is one, dropped where another record of the same step has the loss."""
    fake = np.isnan(cols["loss"])
    if data.count(_NON_LAST) >= len(steps):
        raise PlaceholderLoss(path, "every loss is 'N/A (non-last PP stage)': this rank is not "
                              "in the last pipeline stage; give the last stage's log")
    covered = fake & np.isin(steps, steps[~fake])
    notes.append("loss N/A on this rank (non-last pipeline stage): read the last stage's log")
    if not covered.any():
        return steps, cols, skipped
    keep = ~covered
    notes.append(f"{int(covered.sum())} N/A placeholder record(s) of steps logged with a loss "
                 "ignored")
    return steps[keep], {k: v[keep] for k, v in cols.items()}, skipped[keep]


_NON_LAST = b"loss: N/A (non-last PP stage"


def _skip_data(data: bytes, steps: np.ndarray, notes: list[str]) -> np.ndarray:
    """Steps whose update skip-data dropped (``is_skip: [ True]`` after the step's line)."""
    skip = set()
    for m in _IS_SKIP.finditer(data):
        line = data.rfind(b"\n", 0, data.rfind(b"step:[", 0, m.start())) + 1
        head = _STEP_HEAD.search(data, line, m.start())
        if head:
            epoch, step, per_epoch = (int(g or 1) for g in head.groups())
            skip.add((epoch - 1) * per_epoch + step if head.group(1) else step)
    if skip:
        notes.append(f"{len(skip)} step(s) whose update skip-data dropped (is_skip: True)")
    return np.isin(steps, sorted(skip))


def _column(key: str) -> str | None:
    """The column a MindFormers field feeds (``overflow`` for the flag), or None."""
    if key == "step":
        return "_step"
    return _KEYS.get(key, key if key.endswith("loss") else None)


_PLACE = ("_epoch", "_step", "_per_epoch")  # where a record is: read into the global step
_TABLE = bytes.maketrans(b",:/[]{}\r\t", SEP * 3 + b" " * 6)
_EPOCH_FIELDS = Fields(_TABLE, _column, {0: "_epoch", 4: "_per_epoch"}, frozenset({"overflow"}))
_PYNATIVE_FIELDS = Fields(_TABLE, _column, {0: "_step"}, frozenset({"overflow"}))


def _step_records(data: bytes, has_local: bool) -> tuple[Columns, re.Pattern[bytes]]:
    """The step records of the file read column-wise, and how to read an odd one."""
    epoch_row = _EPOCH_LOSS_ROW if has_local else _EPOCH_ROW
    if epoch_row.pattern.search(data):
        return read_records(data, epoch_row, _EPOCH_FIELDS), _ODD_EPOCH
    return read_records(data, _PYNATIVE_ROW, _PYNATIVE_FIELDS), _ODD_PYNATIVE


def _columns(
    parsed: Columns, odd_re: re.Pattern[bytes], notes: list[str]
) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray]:
    """Global steps, value columns and overflow flags of the step records."""
    n = len(parsed)
    cols = parsed.values
    overflow = parsed.flags.get("overflow", np.zeros(n, dtype=bool))
    place = {k: cols.pop(k) if k in cols else np.full(n, np.nan) for k in _PLACE}
    odd = list(parsed.odd_rows)
    bad = parsed.bad
    for i, row in parsed.odd_rows.items():
        bad += _read_odd(row, i, odd_re, cols, overflow, place)
    keep = ~np.isnan(place["_step"])
    one_by_one = int(np.count_nonzero(keep[odd])) if odd else 0  # odd and still a step line
    if not keep.all():
        cols = {k: v[keep] for k, v in cols.items()}
        overflow, place = overflow[keep], {k: v[keep] for k, v in place.items()}
    steps = place["_step"].astype(np.int64)
    epoch = np.nan_to_num(place["_epoch"], nan=1.0)
    if (epoch != 1).any():
        # Step is within the epoch: global step = (epoch - 1) * steps_per_epoch + step.
        steps += ((epoch - 1) * np.nan_to_num(place["_per_epoch"])).astype(np.int64)
    cols.setdefault("loss", np.full(len(steps), np.nan))
    if one_by_one:
        notes.append(f"{one_by_one} step line(s) outside the learnt field layout read one by one")
    if bad:
        notes.append(f"{bad} unparseable value(s) read as NaN")
    return steps, cols, overflow


def _read_odd(
    row: bytes,
    i: int,
    odd_re: re.Pattern[bytes],
    cols: dict[str, np.ndarray],
    overflow: np.ndarray,
    place: dict[str, np.ndarray],
) -> int:
    """Fill row ``i`` from its own text; a record that is no step line stays without a step."""
    m = odd_re.match(row)
    if not m:
        return 0
    epoch, step, per_epoch, loss, rest = m.groups()
    place["_step"][i] = int(step)
    if epoch:
        place["_epoch"][i], place["_per_epoch"][i] = int(epoch), int(per_epoch)
    value, bad = to_float([loss])
    column_of(cols, "loss", len(overflow))[i] = value[0]
    return bad + _fill_from_text(rest, i, cols, overflow, len(overflow))


def _split(rest: bytes) -> list[tuple[bytes, bytes]]:
    """``b", lr: 1e-05, global_norm [3.2]"`` → [(b"lr", b"1e-05"), (b"global_norm", b"[3.2]")]."""
    out = []
    for part in rest.strip(b" ,}\r").split(b", "):
        m = _KV.match(part)
        if m:
            out.append((m.group(1).strip(), m.group(2)))
    return out


def _fill_from_text(
    text: bytes,
    i: int,
    cols: dict[str, np.ndarray],
    overflow: np.ndarray,
    n: int,
) -> int:
    """Fill row ``i`` from the ``key: value`` fields of ``text``."""
    bad = 0
    for key, raw in _split(text):
        name = _column(key.decode("utf-8", "replace"))
        if name is None or name == "_step":
            continue
        if name == "overflow":
            overflow[i] = is_true(raw)
            continue
        value, n_bad = to_float([raw])
        bad += n_bad
        column_of(cols, name, n)[i] = value[0]
    return bad


def _local_norms(data: bytes, notes: list[str]) -> tuple[pd.DataFrame | None, int]:
    """Per-parameter local norms as a long frame (or None) and the log lines they took.

    Named ``local_norm/<name>: v`` lines (TrainingStateMonitor), and the unnamed
    arrays of runner_wrapper ``local_norm: True``.
    """
    frames, lines = [], 0
    rows = _LOCAL.findall(data)
    if rows:
        epoch, step, per_epoch = (to_int([r[i] for r in rows]) for i in (0, 1, 2))
        norms, _ = to_float([r[4] for r in rows])
        names = [r[3].decode("utf-8", "replace") for r in rows]
        frames.append(
            pd.DataFrame({"step": (epoch - 1) * per_epoch + step, "param": names, "norm": norms})
        )
        lines += len(rows)
    if b"\nlocal_norm:" in data:
        unnamed, block_lines = _unnamed_local_norms(data, notes)
        frames += unnamed
        lines += block_lines
    return (pd.concat(frames, ignore_index=True) if frames else None), lines


def _unnamed_local_norms(data: bytes, notes: list[str]) -> tuple[list[pd.DataFrame], int]:
    """runner_wrapper ``local_norm: True`` logs `` norm_size: [..]``, ``local_norm:`` and a
    numpy array before each step line: per-parameter sums of squared gradients in the
    optimizer's parameter order, per device and before the gradient reduction, no names.
    Read as parameters ``#0``, ``#1``... with norm = sqrt(sum of squares)."""
    frames, lines, summarised = [], 0, 0
    for m in _ARRAY.finditer(data):
        lines += 2 + m.group(1).count(b"\n")
        head = _STEP_HEAD.search(data, m.end())
        if head is None:
            continue
        if b"..." in m.group(1):  # numpy shortened a long array: the values are not all there
            summarised += 1
            continue
        try:
            squares = np.fromiter(map(float, m.group(1).split()), np.float64)
        except ValueError:
            continue
        epoch, step, per_epoch = (int(g or 1) for g in head.groups())
        step = (epoch - 1) * per_epoch + step if head.group(1) else step
        params = [f"#{i}" for i in range(len(squares))]
        frames.append(pd.DataFrame({"step": step, "param": params, "norm": np.sqrt(squares)}))
    if frames:
        notes.append(
            f"unnamed local_norm arrays of {len(frames)} step(s) read as parameters #0..#N in "
            "optimizer order, norm = sqrt of the logged sum of squares (per device)"
        )
    if summarised:
        notes.append(f"{summarised} local_norm array(s) shortened by numpy ('...') not read")
    return frames, lines + data.count(b" norm_size:")
