"""Megatron-LM / MindSpeed-LLM ``training_log`` reader (every era, MoE and MTP loss keys)."""

from __future__ import annotations

import re
from collections import Counter
from operator import itemgetter
from pathlib import Path

import numpy as np

from pytest_accuracy.logs.table import (
    LogTable,
    count_lines,
    cut_truncated_tail,
    finish,
    no_steps,
    to_float,
    to_int,
)

FORMAT = "megatron"

_LINE = re.compile(rb"iteration +(\d+)/ *\d+ *\|([^\n\r]*)")
_COMPLETE = re.compile(rb"\|\s*$")
_SAMPLE = 200
# Fields read into standard columns; every ``... loss`` key becomes a column too.
_STANDARD = {
    "learning rate": "lr",
    "loss scale": "loss_scale",
    "grad norm": "grad_norm",
    "number of skipped iterations": "_skipped",
    "number of nan iterations": "_nan",
}
_UNRELIABLE = "current loss is not reliable"


def parse(data: bytes, path: Path) -> LogTable:
    """Read every ``iteration N/M | key: value | ...`` line into a LogTable.

    Speed: the field layout of the first lines is learnt and compiled into one
    regex whose groups are the wanted fields in the file's own order; a line the
    layout does not cover (extra or reordered fields) is read field by field.
    """
    data, tail = cut_truncated_tail(data, _COMPLETE)
    notes = [tail] if tail else []
    keys = _learn_layout(data)
    if keys is None:
        raise no_steps(path, FORMAT)
    wanted = [k for k in keys if _column(k) is not None]
    rows = _layout_regex(keys, wanted).findall(data)
    if not rows:
        raise no_steps(path, FORMAT)
    steps = to_int(list(map(itemgetter(0), rows)))
    cols, bad = _columns(rows, wanted)
    rest, fallback = list(map(itemgetter(-2), rows)), list(map(itemgetter(-1), rows))
    odd = []
    if any(fallback) or any(rest):
        odd = [i for i in range(len(rows)) if fallback[i] or rest[i]]
    for i in odd:
        bad += _fill_row(fallback[i] or rest[i], i, cols, len(rows))
    if odd:
        notes.append(f"{len(odd)} line(s) with fields outside the learnt layout read one by one")
    if bad:
        notes.append(f"{bad} unparseable value(s) read as NaN")
    skipped = _skipped(cols)
    loss_key = _primary_loss(cols)
    cols["loss"] = cols[loss_key].copy() if loss_key else np.full(len(rows), np.nan)
    if loss_key and loss_key != "lm loss":
        notes.append(f"loss column taken from {loss_key!r} (no 'lm loss' key)")
    if _UNRELIABLE.encode() in data:
        notes.append("run printed 'fix-router or fix-sub-seq-length is set, " + _UNRELIABLE + "'")
    ignored = count_lines(data) - len(rows)
    if ignored > 0:
        notes.append(f"{ignored} line(s) without a step record ignored")
    fmt = "mindspeed-llm" if b">>  iteration" in data or b"core attn ratio" in data else FORMAT
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


def _learn_layout(data: bytes) -> tuple[str, ...] | None:
    """The most common field-key sequence among the first iteration lines, or None."""
    seen: Counter[tuple[str, ...]] = Counter()
    for n, m in enumerate(_LINE.finditer(data)):
        seen[tuple(key for key, _ in _split_fields(m.group(2)))] += 1
        if n >= _SAMPLE:
            break
    return seen.most_common(1)[0][0] if seen else None


def _column(key: str) -> str | None:
    """The table column a Megatron key feeds, or None for fields we do not keep."""
    if key in _STANDARD:
        return _STANDARD[key]
    if key.endswith("loss") and key != "loss scale" and "validation" not in key:
        return key
    return None


def _layout_regex(keys: tuple[str, ...], wanted: list[str]) -> re.Pattern[bytes]:
    """Exact layout with single-literal classes (fast), else the raw rest of the line.

    Groups: step, one per wanted field, exact rest, fallback rest.  The last field
    stops at a newline so a line cut mid-value never swallows the next line.
    """
    parts = [rb"iteration +(\d+)/ *\d+ *\|(?:"]
    for i, key in enumerate(keys):
        stop = rb"\n" if i == len(keys) - 1 else b""
        head = rb" *" + re.escape(key.encode())
        if key in wanted:
            parts.append(head + rb":([^|" + stop + rb"]*)\|")
        else:
            parts.append(head + rb"(?::[^|" + stop + rb"]*)?\|")
    parts.append(rb"[ \r]*(.*)|(.*))")
    return re.compile(b"".join(parts))


def _columns(rows: list[tuple[bytes, ...]], wanted: list[str]) -> tuple[dict[str, np.ndarray], int]:
    cols: dict[str, np.ndarray] = {}
    bad = 0
    for i, key in enumerate(wanted, start=1):
        name = _column(key)
        assert name is not None
        raw = list(map(itemgetter(i), rows))
        cols[name], n_bad = to_float(raw)
        bad += n_bad
    return cols, bad


def _fill_row(rest: bytes, i: int, cols: dict[str, np.ndarray], n: int) -> int:
    bad = 0
    for key, raw in _split_fields(rest):
        name = _column(key)
        if name is None:
            continue
        value, n_bad = to_float([raw])
        bad += n_bad
        cols.setdefault(name, np.full(n, np.nan))[i] = value[0]
    return bad


def _skipped(cols: dict[str, np.ndarray]) -> np.ndarray:
    """A step is skipped when Megatron counted a skipped or NaN iteration in it."""
    n = len(next(iter(cols.values())))
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
