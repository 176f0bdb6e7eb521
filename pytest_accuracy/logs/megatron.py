"""Megatron-LM / MindSpeed-LLM ``training_log`` reader (every era, MoE and MTP loss keys)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from pytest_accuracy.logs.fields import SEP, Fields
from pytest_accuracy.logs.records import Records, read_records
from pytest_accuracy.logs.table import (
    LogTable,
    column_of,
    count_lines,
    cut_truncated_tail,
    finish,
    no_steps,
    to_float,
)

FORMAT = "megatron"

# A step record from the iteration number on; ``_ODD`` reads one outside the layout.
_ROW = Records(re.compile(rb"iteration +(\d+/[^\n]*)"), b"iteration ", skip_spaces=True)
_ODD = re.compile(rb"(\d+)/ *\d+ *\|([^\n\r]*)")
_COMPLETE = re.compile(rb"\|\s*$")
_HEAD = 1 << 24
# Fields read into standard columns; every ``... loss`` key becomes a column too.
_STANDARD = {
    "learning rate": "lr",
    "loss scale": "loss_scale",
    "grad norm": "grad_norm",
    "number of skipped iterations": "_skipped",
    "number of nan iterations": "_nan",
}
_UNRELIABLE = "current loss is not reliable"
# Megatron before v1.0 printed ' learning rate {:.3E} |', ' lm loss {:.6E} |': no colon.
# The value must end its field (`` |``): ``| number of nan iterations: 0 |`` is no such field.
_NO_COLON = re.compile(rb"\| ([a-z][a-z_ ]*[a-z]) ([-+]?(?:\d|\.\d|nan|inf)[^\s|:]*) +(?=\|)")


def parse(data: bytes, path: Path) -> LogTable:
    """Read every ``iteration N/M | key: value | ...`` line into a LogTable.

    Speed: the lines are parsed column-wise by ``records.read_records`` (one C
    pass, or pandas' C tokenizer; keys checked per row); a line whose fields differ from its
    block's layout (extra, missing or reordered keys) is read field by field.
    """
    data, tail = cut_truncated_tail(data, _COMPLETE)
    notes = [tail] if tail else []
    if _NO_COLON.search(data[:_HEAD]):
        data = _NO_COLON.sub(rb"| \1: \2 ", data)
        notes.append("2019-era Megatron fields without ':' ('| lm loss 6.7E+00 |') read")
    parsed = read_records(data, _ROW, _FIELDS)
    n, cols = len(parsed), parsed.values
    steps = np.nan_to_num(cols.pop("_step", np.full(n, np.nan)), nan=-1).astype(np.int64)
    odd = list(parsed.odd_rows)
    bad = parsed.bad + sum(_fill_row(row, i, steps, cols, n) for i, row in parsed.odd_rows.items())
    keep = steps >= 0
    one_by_one = int(np.count_nonzero(keep[odd])) if odd else 0  # odd and still a step line
    if not keep.any():
        raise no_steps(path, FORMAT)
    if not keep.all():
        steps, cols = steps[keep], {k: v[keep] for k, v in cols.items()}
    if one_by_one:
        notes.append(f"{one_by_one} line(s) with fields outside the learnt layout read one by one")
    if bad:
        notes.append(f"{bad} unparseable value(s) read as NaN")
    skipped = _skipped(cols, len(steps))
    loss_key = _primary_loss(cols)
    cols["loss"] = cols[loss_key].copy() if loss_key else np.full(len(steps), np.nan)
    if loss_key and loss_key != "lm loss":
        notes.append(f"loss column taken from {loss_key!r} (no 'lm loss' key)")
    # Both markers are printed from the first step on: the head is enough to look in.
    head = data[:_HEAD]
    if _UNRELIABLE.encode() in head:
        notes.append("run printed 'fix-router or fix-sub-seq-length is set, " + _UNRELIABLE + "'")
    ignored = count_lines(data) - len(steps)
    if ignored > 0:
        notes.append(f"{ignored} line(s) without a step record ignored")
    fmt = "mindspeed-llm" if b">>  iteration" in head or b"core attn ratio" in head else FORMAT
    return finish(path, fmt, steps, cols, skipped, notes)


def _split_fields(rest: bytes) -> list[tuple[str, bytes]]:
    """``' a: 1 | b: 2 |'`` → [("a", b"1"), ("b", b"2")]; a field without a value keeps its text."""
    out = []
    for part in rest.split(b"|"):
        key, sep, value = part.strip().partition(b":")
        if not key:
            continue
        out.append((key.strip().decode("utf-8", "replace"), value.strip() if sep else b""))
    return out


def _column(key: str) -> str | None:
    """The table column a Megatron key feeds, or None for fields we do not keep."""
    if key in _STANDARD:
        return _STANDARD[key]
    if key.endswith("loss") and key != "loss scale" and "validation" not in key:
        return key
    return None


_FIELDS = Fields(bytes.maketrans(b":/|\r", SEP * 3 + b" "), _column, fixed={0: "_step"})


def _fill_row(
    row: bytes, i: int, steps: np.ndarray, cols: dict[str, np.ndarray], n: int
) -> int:
    """Read one line outside the layout into row ``i``; a line without a step stays dropped."""
    m = _ODD.match(row)
    if not m:
        return 0
    steps[i] = int(m.group(1))
    bad = 0
    for key, raw in _split_fields(m.group(2)):
        name = _column(key)
        if name is None:
            continue
        value, n_bad = to_float([raw])
        bad += n_bad
        column_of(cols, name, n)[i] = value[0]
    return bad


def _skipped(cols: dict[str, np.ndarray], n: int) -> np.ndarray:
    """A step is skipped when Megatron counted a skipped or NaN iteration in it."""
    flag = np.zeros(n, dtype=bool)
    for key in ("_skipped", "_nan"):
        if key in cols:
            flag |= np.nan_to_num(cols.pop(key)) > 0
    return flag


def _primary_loss(cols: dict[str, np.ndarray]) -> str | None:
    """``lm loss`` when present, else ``loss`` / ``total loss`` / the first loss key."""
    for key in ("lm loss", "loss", "total loss"):
        if key in cols:
            return key
    losses = [k for k in cols if k.endswith("loss")]
    return losses[0] if losses else None
