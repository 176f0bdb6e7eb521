"""torchtitan logs (``step: N  loss: x  grad_norm: y``) and its ``<step> <loss>`` loss files."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from pytest_accuracy.logs.fields import SEP, Columns, Fields
from pytest_accuracy.logs.records import Records, read_records
from pytest_accuracy.logs.table import (
    LogTable,
    column_of,
    count_lines,
    cut_truncated_tail,
    finish,
    no_steps,
    to_float,
    to_int,
)

FORMAT = "torchtitan"
FORMAT_LOSSES = "torchtitan-losses"

# torchtitan colours every key (``\x1b[32mloss:``): the colour codes are matched in place,
# which costs nothing, where removing them from the whole file cost 2x the parse.
_C = rb"(?:\x1b\[[0-9;]*m)?"
_STEP = re.compile(
    rb"step: *(\d+) +" + _C + rb"loss: *([^\s\x1b]+)(?: +" + _C + rb"grad_norm: *([^\s\x1b]+))?"
)
_LOSS_FILE = re.compile(rb"^ *(\d+)[ \t,]+([^\s,]+) *\r?$", re.M)
_COMPLETE = re.compile(rb"%" + _C + rb"\s*$")
# The compiled scanner reads the metric line as words (``step: 14  loss:  3.24405``: padding
# varies with the value); _STEP stays the definition and reads every line the scanner leaves.
_RECORDS = Records(re.compile(rb"step:([^\n]*)"), b"step:", once=True)
_KEY_COLOUR = re.compile(r"^\x1b\[[0-9;]*m")


def _column(key: str) -> str | None:
    name = _KEY_COLOUR.sub("", key)
    return name if name in ("loss", "grad_norm") else None


_FIELDS = Fields(
    bytes.maketrans(b": \t\r", SEP * 4),
    _column,
    fixed={0: "_step"},
    collapse=True,
    digits=frozenset({"_step"}),
)


def parse(data: bytes, path: Path) -> LogTable:
    """Read torchtitan metric lines (ANSI colours and ``[rank0]:`` prefixes are ignored)."""
    data, tail = cut_truncated_tail(data, _COMPLETE)
    parsed = read_records(data, _RECORDS, _FIELDS, rest=_regex_rows)
    if not len(parsed):
        raise no_steps(path, FORMAT)
    notes = [tail] if tail else []
    if parsed.bad:
        notes.append(f"{parsed.bad} unparseable value(s) read as NaN")
    if (ignored := count_lines(data) - len(parsed)) > 0:
        notes.append(f"{ignored} other line(s) ignored")
    cols = {k: column_of(parsed.values, k, len(parsed)) for k in ("_step", "loss", "grad_norm")}
    steps = cols.pop("_step").astype(np.int64)
    return finish(path, FORMAT, steps, cols, notes=notes)


def _regex_rows(data: bytes, starts: list[int] | None) -> Columns:
    """The metric lines ``_STEP`` finds, as columns (``starts``: where each record is)."""
    if starts is None:
        rows = _STEP.findall(data)
    else:
        found = list(_STEP.finditer(data))
        rows = [m.groups() for m in found]
        starts += [m.start(1) for m in found]
    loss, bad = to_float([r[1] for r in rows])
    grad, bad_g = to_float([r[2] for r in rows])
    steps = to_int([r[0] for r in rows]).astype(np.float64)
    values = {"_step": steps, "loss": loss, "grad_norm": grad}
    return Columns(values, {}, np.zeros(len(rows), dtype=bool), bad + bad_g)


def parse_losses(data: bytes, path: Path) -> LogTable:
    """Read a ``<step> <repr(float)>`` loss file (``tests/assets/losses/*.txt``)."""
    rows = _LOSS_FILE.findall(data)
    if not rows:
        raise no_steps(path, FORMAT_LOSSES)
    loss, bad = to_float([r[1] for r in rows])
    notes = [f"{bad} unparseable value(s) read as NaN"] if bad else []
    if (ignored := count_lines(data) - len(rows)) > 0:
        notes.append(f"{ignored} other line(s) ignored")
    return finish(path, FORMAT_LOSSES, to_int([r[0] for r in rows]), {"loss": loss}, notes=notes)
