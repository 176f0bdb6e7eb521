"""MindFormers (MindSpore Transformers) MFLossMonitor / TrainingStateMonitor log reader."""

from __future__ import annotations

import re
from collections import Counter
from operator import itemgetter
from pathlib import Path

import numpy as np
import pandas as pd

from pytest_accuracy.logs.table import (
    LogTable,
    count_lines,
    cut_truncated_tail,
    finish,
    no_steps,
    to_float,
    to_int,
)

# MFLossMonitor generations G0-G4 share this head; the fields after the loss are
# learnt from the file (see ``_layout_regex``) because one regex with every field
# optional is twice as slow as an exact one.
_HEAD = rb"Epoch:\[ *(\d+)/ *\d+\], step:\[ *(\d+)/ *(\d+)\], loss: *"
_LOSS = rb"\[?([^,/\]\n]*)[^,\n]*"
_FIRST = re.compile(_HEAD + _LOSS + rb"(.*)")
_SAMPLE = 200
# Dynamic-graph (pynative) trainer, 2026: no epoch, fields after the loss vary.
_PYNATIVE = re.compile(rb"\{ step:\[ *(\d+)/ *\d+\], loss: *([^,\n]*), ([^\n\r]*)")
# TrainingStateMonitor ``local_norm_format: log`` lines.
_LOCAL = re.compile(
    rb"Epoch:\[ *(\d+)/ *\d+\], step:\[ *(\d+)/ *(\d+)\] local_norm/([^\s:]+): *([^\s]+)"
)
_KV = re.compile(rb"^ *([A-Za-z_][\w /-]*?)(?:: *| +(?=\[))\[? *([^\]]*?) *\]?$")
_COMPLETE = re.compile(rb"[\]T}]\s*$")
_KEYS = {
    b"lr": "lr",
    b"global_norm": "grad_norm",
    b"grad_norm": "grad_norm",
    b"loss_scale": "loss_scale",
    b"overflow cond": "overflow",
}

FORMAT = "mindformers"


def parse(data: bytes, path: Path) -> LogTable:
    """Read MFLossMonitor step lines (every generation) and local-norm lines."""
    data, tail = cut_truncated_tail(data, _COMPLETE)
    notes = [tail] if tail else []
    layout = _learn_layout(data)
    rows = _layout_regex(layout).findall(data) if layout is not None else []
    if rows:
        assert layout is not None
        steps, cols, skipped = _fast_columns(rows, layout, notes)
    else:
        steps, cols, skipped = _pynative_columns(_PYNATIVE.findall(data), notes, path)
    local = _local_norms(data, notes) if b"local_norm" in data else None
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
        notes.append("loss N/A on this rank (non-last pipeline stage): read the last stage's log")
    ignored = count_lines(data) - step_lines - (0 if local is None else len(local))
    if ignored > 0:
        notes.append(f"{ignored} other line(s) ignored (not step records)")
    return finish(path, FORMAT, steps, cols, skipped, notes, local)


def _split(rest: bytes) -> list[tuple[bytes, bytes]]:
    """``b", lr: 1e-05, global_norm [3.2]"`` → [(b"lr", b"1e-05"), (b"global_norm", b"[3.2]")]."""
    out = []
    for part in rest.strip(b" ,}\r").split(b", "):
        m = _KV.match(part)
        if m:
            out.append((m.group(1).strip(), m.group(2)))
    return out


def _learn_layout(data: bytes) -> tuple[tuple[bytes, bool], ...] | None:
    """The most common field layout (key, bracketed value) after the loss in the first lines."""
    seen: Counter[tuple[tuple[bytes, bool], ...]] = Counter()
    for n, m in enumerate(_FIRST.finditer(data)):
        parts = m.group(5).strip(b" ,}\r").split(b", ")
        keys = tuple(
            (kv.group(1).strip(), b"[" in p.partition(b":")[2])
            for p in parts
            if (kv := _KV.match(p))
        )
        seen[keys] += 1
        if n >= _SAMPLE:
            break
    return seen.most_common(1)[0][0] if seen else None


def _layout_regex(layout: tuple[tuple[bytes, bool], ...]) -> re.Pattern[bytes]:
    """Exact layout (fast, single-literal classes) or, failing that, the raw rest of line.

    Groups: epoch, step, steps/epoch, loss, one per layout field, exact rest, fallback rest.
    The last field stops at a newline so a truncated line never swallows the next one.
    """
    fields = []
    for i, (key, bracket) in enumerate(layout):
        stop = rb"\n" if i == len(layout) - 1 else b""
        value = rb"\[([^\]" + stop + rb"]*)\]" if bracket else rb"([^," + stop + rb"]*)"
        if _name(key) is None:  # not kept: do not pay for a group
            value = value.replace(b"(", b"").replace(b")", b"")
        fields.append(rb", " + re.escape(key) + rb":? *" + value)
    return re.compile(_HEAD + _LOSS + rb"(?:" + b"".join(fields) + rb"[ }\r]*(.*)|(.*))")


def _name(key: bytes) -> str | None:
    """The column a MindFormers field feeds (``overflow`` for the flag), or None."""
    return _KEYS.get(key, key.decode() if key.endswith(b"loss") else None)


def _fast_columns(
    rows: list[tuple[bytes, ...]], layout: tuple[tuple[bytes, bool], ...], notes: list[str]
) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray]:
    """Columns from the layout regex; only lines that miss the layout go field by field."""
    kept = [key for key, _ in layout if _name(key) is not None]
    n, width = len(rows), 4 + len(kept) + 2
    col = [list(map(itemgetter(i), rows)) for i in range(width)]
    steps = to_int(col[1])
    if set(col[0]) != {b"1"}:
        # Step is within the epoch: global step = (epoch - 1) * steps_per_epoch + step.
        steps = (to_int(col[0]) - 1) * to_int(col[2]) + steps
    cols, bad = {"loss": to_float(col[3])[0]}, 0
    overflow = np.zeros(n, dtype=bool)
    for j, key in enumerate(kept, start=4):
        name = _name(key)
        if name == "overflow":
            if set(col[j]) - {b"False", b""}:
                overflow = np.fromiter(map(_is_true, col[j]), bool, n)
        elif name is not None:
            cols[name], n_bad = to_float(col[j])
            bad += n_bad
    rest, fallback = col[-2], col[-1]
    odd = []
    if any(fallback) or any(rest):
        odd = [i for i in range(n) if fallback[i] or rest[i]]
    for i in odd:
        text = fallback[i] or rest[i]
        bad += _fill_from_text(text, i, cols, overflow, n, overwrite=bool(fallback[i]))
    if odd:
        notes.append(f"{len(odd)} step line(s) outside the learnt field layout read one by one")
    if bad:
        notes.append(f"{bad} unparseable value(s) read as NaN")
    return steps, cols, overflow


def _is_true(raw: bytes) -> bool:
    """``overflow cond`` is ``False``/``True`` or a numpy bool repr like ``[ True]``."""
    return raw.strip(b" []\r") in (b"True", b"1")


def _fill_from_text(
    text: bytes,
    i: int,
    cols: dict[str, np.ndarray],
    overflow: np.ndarray,
    n: int,
    overwrite: bool = False,
) -> int:
    """Fill row ``i`` from the ``key: value`` fields of ``text``."""
    bad = 0
    for key, raw in _split(text):
        name = _name(key)
        if name is None:
            continue
        if name == "overflow":
            overflow[i] = _is_true(raw)
            continue
        value, n_bad = to_float([raw])
        bad += n_bad
        column = cols.setdefault(name, np.full(n, np.nan))
        if overwrite or np.isnan(column[i]):
            column[i] = value[0]
    return bad


def _pynative_columns(
    rows: list[tuple[bytes, bytes, bytes]], notes: list[str], path: Path
) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray]:
    """Columns from dynamic-graph trainer lines (``{ step:[..], loss: .., grad_norm: .. }``)."""
    n = len(rows)
    steps = to_int([r[0] for r in rows])
    loss, bad = to_float([r[1] for r in rows])
    cols: dict[str, np.ndarray] = {"loss": loss}
    overflow = np.zeros(n, dtype=bool)
    for i, row in enumerate(rows):
        bad += _fill_from_text(row[2], i, cols, overflow, n)
    if bad:
        notes.append(f"{bad} unparseable value(s) read as NaN")
    return steps, cols, overflow


def _local_norms(data: bytes, notes: list[str]) -> pd.DataFrame | None:
    """Per-parameter ``local_norm/<name>: v`` lines as a long frame, or None."""
    if b"\nlocal_norm:\n" in data or b"\nlocal_norm:\r\n" in data:
        notes.append("unnamed local_norm arrays (runner_wrapper local_norm: True) not read")
    rows = _LOCAL.findall(data)
    if not rows:
        return None
    epoch, step, per_epoch = (to_int([r[i] for r in rows]) for i in (0, 1, 2))
    norms, _ = to_float([r[4] for r in rows])
    return pd.DataFrame(
        {
            "step": (epoch - 1) * per_epoch + step,
            "param": [r[3].decode("utf-8", "replace") for r in rows],
            "norm": norms,
        }
    )
